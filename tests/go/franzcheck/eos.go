// eos: an exactly-once chain. The input topic is filled with -records records; then -workers
// franz-go GroupTransactSessions (one transactional id each, one consumer group, read_committed)
// each loop: poll (at most -max-poll records), produce "out:<value>" to the same partition of the output topic, end the
// transaction (TxnOffsetCommit of the consumed offsets, then EndTxn), and begin the next one at
// once. A rebalance during a transaction makes franz-go abort it and rewind to the committed
// offsets. The run stops when the committed transactions hold every input record; a checker
// then reads the output read_committed and reports each input record's copies (exactly one
// each), their order per partition, and the group's committed offsets against the input's end.
//
// Throughput: records/s over the whole chain (from the workers' start, so joining the group is
// included) and in its steady part (from the end of the first committed transaction to the
// last, which leaves the join out).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
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
	firstCommit  time.Time
	firstRecords int // records of the first committed transaction
	lastCommit   time.Time
	failures     []error
}

func (t *chainTally) commit(worker, records int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.perWorker[worker]++
	now := time.Now()
	if t.transactions == 0 {
		t.firstCommit, t.firstRecords = now, records
	}
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
	// the chain
	Seconds                float64     `json:"seconds"`
	RecordsPerSecond       float64     `json:"records_per_second"`
	SteadySeconds          float64     `json:"steady_seconds"`
	SteadyRecordsPerSecond float64     `json:"steady_records_per_second"`
	FillSeconds            float64     `json:"fill_seconds"`
	Transactions           int         `json:"transactions"`
	WorkerTransactions     map[int]int `json:"worker_transactions"`
	Aborted                int         `json:"aborted"`
	CommittedRecords       int         `json:"committed_records"`
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
	var input, output, group, protocol, transactionalPrefix string
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
	adm, err := newAdmin(&c)
	if err != nil {
		return nil, err
	}
	defer adm.close()
	if err := adm.createTopics(ctx, &c, input, output); err != nil {
		return nil, err
	}
	result := &eosResult{Mode: "eos", Protocol: protocol, Records: c.records, Workers: workers, MaxPoll: maxPoll}

	filled := time.Now()
	if err := fill(ctx, &c, input, valueSize); err != nil {
		return nil, err
	}
	result.FillSeconds = time.Since(filled).Seconds()

	tally := &chainTally{perWorker: map[int]int{}}
	requests := newRequestCounter()
	done := make(chan struct{})
	var closeDone sync.Once
	var wait sync.WaitGroup
	started := time.Now()
	for n := 0; n < workers; n++ {
		session, err := kgo.NewGroupTransactSession(workerOptions(&c, requests, protocol, group, input,
			fmt.Sprintf("%s-%d", transactionalPrefix, n))...)
		if err != nil {
			return nil, err
		}
		wait.Add(1)
		go func() {
			defer wait.Done()
			defer session.Close()
			err := work(ctx, session, n, output, c.records, maxPoll, tally, done, func() { closeDone.Do(func() { close(done) }) })
			if err != nil {
				tally.fail(fmt.Errorf("worker %d: %w", n, err))
				closeDone.Do(func() { close(done) })
			}
		}()
	}
	wait.Wait()
	result.Transactions, result.Aborted, result.CommittedRecords = tally.transactions, tally.aborted, tally.committed
	result.WorkerTransactions = tally.perWorker
	if tally.transactions > 0 {
		result.Seconds = tally.lastCommit.Sub(started).Seconds()
		result.RecordsPerSecond = float64(tally.committed) / result.Seconds
	}
	if steady := tally.lastCommit.Sub(tally.firstCommit).Seconds(); tally.transactions > 1 && steady > 0 {
		result.SteadySeconds = steady
		result.SteadyRecordsPerSecond = float64(tally.committed-tally.firstRecords) / steady
	}
	failures := tally.failures
	result.Requests = requests.snapshot()
	if err := check(ctx, &c, adm, group, input, output, result); err != nil {
		failures = append(failures, err)
	}
	result.Failures = errorList(failures)
	return result, nil
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
