// eos: an exactly-once chain. -workers franz-go GroupTransactSessions (one transactional id
// each, one consumer group, read_committed) each loop: poll (at most -max-poll records),
// produce "out:<value>" to the same partition of the output topic, end the transaction
// (TxnOffsetCommit of the consumed offsets, then EndTxn), and begin the next one at once. A
// rebalance during a transaction makes franz-go abort it and rewind to the committed offsets.
// Once every worker has partitions, the input is filled with -records records; the run stops
// when the committed transactions hold all of them. A checker then reads the output
// read_committed and reports each input record's copies (exactly one each), their order per
// partition, and the group's committed offsets against the input's end.
//
// Throughput: records/s from the start of the filling (the group formed) to the last commit.
//
// -steps create, then fill, then check, each in a run of its own, make the program the filler
// and checker of another client's chain (bench/eos_chain.py runs confluent-kafka's and
// lockgate's that way).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type chainTally struct {
	mu           sync.Mutex
	committed    int // records in committed transactions
	transactions int
	aborted      int
	perWorker    map[int]int // committed transactions by worker
	lastCommit   time.Time
	started      time.Time     // when the clock started (set before any commit can count)
	longestGap   time.Duration // the longest time without a commit, from started on
	failures     []error
}

func (t *chainTally) commit(worker, records int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.perWorker[worker]++
	now := time.Now()
	since := t.lastCommit
	if since.Before(t.started) {
		since = t.started
	}
	t.longestGap = max(t.longestGap, now.Sub(since))
	t.lastCommit = now
	t.transactions++
	t.committed += records
	return t.committed
}

func (t *chainTally) fail(err error) {
	t.mu.Lock()
	t.failures = append(t.failures, err)
	t.mu.Unlock()
}

type eosResult struct {
	Mode     string `json:"mode"`
	Protocol string `json:"protocol"`
	Records  int    `json:"records"`
	Workers  int    `json:"workers"`
	MaxPoll  int    `json:"max_poll"`
	// the chain: JoinSeconds until every worker had partitions, then Seconds from there (the
	// input's filling included) to the last commit
	JoinSeconds      float64 `json:"join_seconds"`
	Seconds          float64 `json:"seconds"`
	RecordsPerSecond float64 `json:"records_per_second"`
	FillSeconds      float64 `json:"fill_seconds"`
	// the longest time without a commit (a stalled chain shows here)
	LongestGapSeconds  float64     `json:"longest_gap_seconds"`
	Transactions       int         `json:"transactions"`
	WorkerTransactions map[int]int `json:"worker_transactions"`
	Aborted            int         `json:"aborted"`
	CommittedRecords   int         `json:"committed_records"`
	// the checker
	OutputRecords    int             `json:"output_records"`
	Missing          int             `json:"missing"`
	Duplicates       int             `json:"duplicates"`
	Foreign          int             `json:"foreign"`
	InOrder          bool            `json:"in_order"`
	OffsetsCommitted bool            `json:"offsets_committed"`
	CommittedOffsets map[int32]int64 `json:"committed_offsets"`
	InputEndOffsets  map[int32]int64 `json:"input_end_offsets"`
	Failures         []string        `json:"failures"`
	Requests         map[string]int  `json:"requests"`
}

func runExactlyOnce(ctx context.Context, args []string) (any, error) {
	var c common
	var input, output, group, protocol, transactionalPrefix, steps string
	var workers, valueSize, maxPoll int
	flags := flag.NewFlagSet("eos", flag.ContinueOnError)
	c.register(flags, 2000)
	flags.StringVar(&input, "input", "", "input topic, created and filled")
	flags.StringVar(&output, "output", "", "output topic, created")
	flags.StringVar(&group, "group", "", "consumer group of the workers")
	flags.StringVar(&protocol, "protocol", "classic", "group protocol: classic or consumer (KIP-848)")
	flags.StringVar(&transactionalPrefix, "transactional-id", "", "worker n's transactional id is this plus -n (default: the group)")
	flags.IntVar(&workers, "workers", 2, "workers (transactional consumers-producers) in the group")
	flags.IntVar(&valueSize, "value-size", 100, "bytes of each input value")
	flags.IntVar(&maxPoll, "max-poll", 500, "records per poll at most, so per transaction")
	flags.StringVar(&steps, "steps", "create,chain,fill,check", "what to do, of create (both topics), "+
		"chain, fill (the input; with chain, once every worker has partitions) and check")
	ctx, cancel, err := withDeadline(ctx, flags, &c, args)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if input == "" || output == "" || group == "" || workers < 1 || (protocol != "classic" && protocol != "consumer") {
		return nil, fmt.Errorf("-input, -output, -group, -workers >= 1 and -protocol classic|consumer are required")
	}
	if transactionalPrefix == "" {
		transactionalPrefix = group
	}
	doing := map[string]bool{}
	for _, step := range strings.Split(steps, ",") {
		if step != "create" && step != "chain" && step != "fill" && step != "check" {
			return nil, fmt.Errorf("unknown step %q: create, chain, fill or check", step)
		}
		doing[step] = true
	}
	adm, err := newAdmin(&c)
	if err != nil {
		return nil, err
	}
	defer adm.close()
	result := &eosResult{Mode: "eos", Protocol: protocol, Records: c.records, Workers: workers, MaxPoll: maxPoll,
		Failures: []string{}}
	var failures []error
	if doing["create"] {
		if err := adm.createTopics(ctx, &c, input, output); err != nil {
			return nil, err
		}
	}
	filler := func() error {
		filled := time.Now()
		if err := fill(ctx, &c, input, valueSize); err != nil {
			return err
		}
		result.FillSeconds = time.Since(filled).Seconds()
		return nil
	}
	switch {
	case doing["chain"]:
		chain := chainOptions{protocol: protocol, group: group, input: input, output: output,
			transactionalPrefix: transactionalPrefix, workers: workers, maxPoll: maxPoll}
		if !doing["fill"] {
			filler = nil
		}
		failures = append(failures, runChain(ctx, &c, chain, filler, result)...)
	case doing["fill"]:
		if err := filler(); err != nil {
			return nil, err
		}
	}
	if doing["check"] {
		if err := check(ctx, &c, adm, group, input, output, result); err != nil {
			failures = append(failures, err)
		}
	}
	result.Failures = errorList(failures)
	return result, nil
}

type chainOptions struct {
	protocol, group, input, output, transactionalPrefix string
	workers, maxPoll                                    int
}

// runChain starts the workers, waits until each has partitions, runs fill (when given: the
// chain then starts with an empty input, as a pipeline does), and waits until the committed
// transactions hold every input record. The clock runs from then on, so that the group's
// forming is not counted. It reports the figures in result and returns the failures.
func runChain(ctx context.Context, c *common, chain chainOptions, fill func() error, result *eosResult) []error {
	tally := &chainTally{perWorker: map[int]int{}}
	requests := newRequestCounter()
	done := make(chan struct{})
	var closeDone sync.Once
	stop := func() { closeDone.Do(func() { close(done) }) }
	var wait sync.WaitGroup
	owned := make([]atomic.Int64, chain.workers)
	joining := time.Now()
	for n := 0; n < chain.workers; n++ {
		track := func(_ context.Context, _ *kgo.Client, partitions map[string][]int32, sign int64) {
			for _, list := range partitions {
				owned[n].Add(sign * int64(len(list)))
			}
		}
		options := append(workerOptions(c, requests, chain.protocol, chain.group, chain.input,
			fmt.Sprintf("%s-%d", chain.transactionalPrefix, n)),
			kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, added map[string][]int32) { track(ctx, cl, added, 1) }),
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, removed map[string][]int32) { track(ctx, cl, removed, -1) }),
			kgo.OnPartitionsLost(func(ctx context.Context, cl *kgo.Client, lost map[string][]int32) { track(ctx, cl, lost, -1) }),
		)
		session, err := kgo.NewGroupTransactSession(options...)
		if err != nil {
			tally.fail(err)
			stop()
			break
		}
		wait.Add(1)
		go func() {
			defer wait.Done()
			defer session.Close()
			if err := work(ctx, session, n, chain.output, c.records, chain.maxPoll, tally, done, stop); err != nil {
				tally.fail(fmt.Errorf("worker %d: %w", n, err))
				stop()
			}
		}()
	}
	everyWorkerOwns := func() bool {
		select {
		case <-done: // a worker failed
			return true
		default:
		}
		for n := range owned {
			if owned[n].Load() <= 0 {
				return false
			}
		}
		return true
	}
	if err := waitUntil(ctx, everyWorkerOwns, "every worker assigned partitions"); err != nil {
		tally.fail(err)
		stop()
	}
	started := time.Now()
	tally.mu.Lock()
	tally.started = started
	tally.mu.Unlock()
	result.JoinSeconds = started.Sub(joining).Seconds()
	if fill != nil {
		if err := fill(); err != nil {
			tally.fail(err)
			stop()
		}
	}
	wait.Wait()
	result.Transactions, result.Aborted, result.CommittedRecords = tally.transactions, tally.aborted, tally.committed
	result.WorkerTransactions = tally.perWorker
	if tally.transactions > 0 {
		result.Seconds = tally.lastCommit.Sub(started).Seconds()
		result.RecordsPerSecond = float64(tally.committed) / result.Seconds
		result.LongestGapSeconds = tally.longestGap.Seconds()
	}
	result.Requests = requests.snapshot()
	return tally.failures
}

func workerOptions(c *common, requests *requestCounter, protocol, group, input, transactionalID string) []kgo.Opt {
	options := append(c.clientOptions(requests),
		kgo.TransactionalID(transactionalID),
		kgo.TransactionTimeout(30*time.Second),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.SessionTimeout(10*time.Second),
		kgo.HeartbeatInterval(500*time.Millisecond),
	)
	if protocol == "consumer" {
		options = append(options, kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
	}
	return options
}

// fill writes the input: record i has key i and a value of valueSize bytes starting "i:", on
// partition i mod partitions, so partition p holds its keys in increasing order.
func fill(ctx context.Context, c *common, input string, valueSize int) error {
	producer, err := kgo.NewClient(append(c.clientOptions(nil), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return err
	}
	defer producer.Close()
	var failed atomic.Pointer[error]
	for i := 0; i < c.records; i++ {
		key := strconv.Itoa(i)
		value := append([]byte(key+":"), bytes.Repeat([]byte{'x'}, max(0, valueSize-len(key)-1))...)
		producer.Produce(ctx, &kgo.Record{Topic: input, Partition: int32(i % c.partitions), Key: []byte(key), Value: value},
			func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			})
	}
	if err := producer.Flush(ctx); err != nil {
		return err
	}
	if err := failed.Load(); err != nil {
		return fmt.Errorf("filling %s: %w", input, *err)
	}
	return nil
}

// work is one worker's loop; it returns when every input record is in a committed
// transaction (stop is closed then) or on an error that ends the transactional session.
func work(ctx context.Context, session *kgo.GroupTransactSession, worker int, output string, records, maxPoll int,
	tally *chainTally, done <-chan struct{}, stop func()) error {
	if err := session.Begin(); err != nil {
		return err
	}
	for {
		select {
		case <-done:
			// the open transaction holds nothing: ending it sends nothing
			_, err := session.End(ctx, kgo.TryAbort)
			return err
		default:
		}
		pollContext, pollCancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fetches := session.PollRecords(pollContext, maxPoll)
		pollCancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := pollErrors(fetches); err != nil {
			return err
		}
		if fetches.NumRecords() == 0 {
			continue
		}
		var produceFailure atomic.Pointer[error]
		fetches.EachRecord(func(record *kgo.Record) {
			out := &kgo.Record{Topic: output, Partition: record.Partition, Key: record.Key,
				Value: append([]byte("out:"), record.Value...)}
			session.Produce(ctx, out, func(_ *kgo.Record, err error) {
				if err != nil && !errors.Is(err, kgo.ErrAborting) {
					produceFailure.CompareAndSwap(nil, &err)
				}
			})
		})
		committed, err := session.End(ctx, kgo.TryCommit)
		if err != nil {
			return err
		}
		if failure := produceFailure.Load(); failure != nil && committed {
			return fmt.Errorf("a record failed yet the transaction committed: %w", *failure)
		}
		if committed {
			if tally.commit(worker, fetches.NumRecords()) >= records {
				stop()
			}
		} else {
			tally.mu.Lock()
			tally.aborted++
			tally.mu.Unlock()
		}
		if err := session.Begin(); err != nil {
			return err
		}
	}
}

// check reads the output read_committed: every input record must be there exactly once, as
// "out:<value>", on its input partition, in input order; and the group must have committed the
// input's end offsets.
func check(ctx context.Context, c *common, adm *admin, group, input, output string, result *eosResult) error {
	var err error
	if result.InputEndOffsets, err = adm.endOffsets(ctx, input); err != nil {
		return err
	}
	if result.CommittedOffsets, err = adm.committedOffsets(ctx, group, input); err != nil {
		return err
	}
	result.OffsetsCommitted = len(result.CommittedOffsets) == len(result.InputEndOffsets)
	for partition, end := range result.InputEndOffsets {
		result.OffsetsCommitted = result.OffsetsCommitted && result.CommittedOffsets[partition] == end
	}
	outputEnds, err := adm.endOffsets(ctx, output)
	if err != nil {
		return err
	}
	read, err := readAll(ctx, c, output, outputEnds, kgo.ReadCommitted())
	if err != nil {
		return err
	}
	copies := make([]int, c.records)
	result.InOrder = true
	for partition, records := range read {
		previous := -1
		for _, record := range records {
			result.OutputRecords++
			index, err := strconv.Atoi(string(record.Key))
			if err != nil || index < 0 || index >= c.records || index%c.partitions != int(partition) ||
				!bytes.HasPrefix(record.Value, []byte("out:"+string(record.Key)+":")) {
				result.Foreign++
				continue
			}
			copies[index]++
			result.InOrder = result.InOrder && index > previous
			previous = index
		}
	}
	for _, count := range copies {
		if count == 0 {
			result.Missing++
		} else {
			result.Duplicates += count - 1
		}
	}
	return nil
}
