// What the scenarios share: topic creation through kadm, end offsets, a request counter (which
// API keys a client sent, to tell the classic group protocol from KIP-848's), and reading a
// topic back from its start.
package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func splitBrokers(list string) []string {
	var brokers []string
	for _, broker := range strings.Split(list, ",") {
		if broker = strings.TrimSpace(broker); broker != "" {
			brokers = append(brokers, broker)
		}
	}
	return brokers
}

func parseLogLevel(name string) kgo.LogLevel {
	switch strings.ToLower(name) {
	case "error":
		return kgo.LogLevelError
	case "warn":
		return kgo.LogLevelWarn
	case "info":
		return kgo.LogLevelInfo
	case "debug":
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelNone
}

// requestCounter counts the requests a client wrote, by API name.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

var _ kgo.HookBrokerWrite = (*requestCounter)(nil)

func newRequestCounter() *requestCounter { return &requestCounter{counts: map[string]int{}} }

func (r *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	r.mu.Lock()
	r.counts[kmsg.NameForKey(key)]++
	r.mu.Unlock()
}

func (r *requestCounter) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	copied := make(map[string]int, len(r.counts))
	for name, count := range r.counts {
		copied[name] = count
	}
	return copied
}

// admin is a kadm client over its own kgo client; close() closes both.
type admin struct {
	*kadm.Client
	client *kgo.Client
}

func newAdmin(c *common) (*admin, error) {
	client, err := kgo.NewClient(c.clientOptions(nil)...)
	if err != nil {
		return nil, err
	}
	return &admin{kadm.NewClient(client), client}, nil
}

func (a *admin) close() { a.client.Close() }

// createTopics creates each topic and waits until the metadata shows every partition with a
// leader: on a cluster the first produce would otherwise race the leaders' election.
func (a *admin) createTopics(ctx context.Context, c *common, topics ...string) error {
	for _, topic := range topics {
		created, err := a.CreateTopic(ctx, int32(c.partitions), int16(c.replication), nil, topic)
		if err != nil {
			return fmt.Errorf("creating %s: %w", topic, err)
		}
		if created.Err != nil {
			return fmt.Errorf("creating %s: %w", topic, created.Err)
		}
	}
	for {
		// a request of its own: kadm's Metadata answers from a cache up to 5 s old
		request := kmsg.NewPtrMetadataRequest()
		for _, topic := range topics {
			requested := kmsg.NewMetadataRequestTopic()
			requested.Topic = kmsg.StringPtr(topic)
			request.Topics = append(request.Topics, requested)
		}
		response, err := request.RequestWith(ctx, a.client)
		if err == nil && ready(response, len(topics), c.partitions) && a.serving(ctx, topics) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v without a leader for every partition: %w (last error %v)", topics, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serving tells whether every partition's leader answers for it: Kafka names a new
// partition's leader in Metadata a moment before that broker serves it, and the first Produce
// would get NOT_LEADER_OR_FOLLOWER (franz-go then waits for its next metadata refresh, up to 5 s).
func (a *admin) serving(ctx context.Context, topics []string) bool {
	listed, err := a.ListEndOffsets(ctx, topics...)
	return err == nil && listed.Error() == nil
}

func ready(response *kmsg.MetadataResponse, topics, partitions int) bool {
	if len(response.Topics) != topics {
		return false
	}
	for _, topic := range response.Topics {
		if topic.ErrorCode != 0 || len(topic.Partitions) != partitions {
			return false
		}
		for _, partition := range topic.Partitions {
			if partition.ErrorCode != 0 || partition.Leader < 0 {
				return false
			}
		}
	}
	return true
}

// endOffsets returns each partition's high watermark.
func (a *admin) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	listed, err := a.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	ends := map[int32]int64{}
	var failed error
	listed.Each(func(offset kadm.ListedOffset) {
		if offset.Err != nil {
			failed = errors.Join(failed, fmt.Errorf("%s-%d: %w", topic, offset.Partition, offset.Err))
		}
		ends[offset.Partition] = offset.Offset
	})
	return ends, failed
}

// committedOffsets returns the group's committed offset of each partition of topic.
func (a *admin) committedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	fetched, err := a.FetchOffsetsForTopics(ctx, group, topic)
	if err != nil {
		return nil, err
	}
	committed := map[int32]int64{}
	var failed error
	fetched.Each(func(offset kadm.OffsetResponse) {
		if offset.Err != nil {
			failed = errors.Join(failed, fmt.Errorf("%s-%d: %w", topic, offset.Partition, offset.Err))
		}
		if offset.Topic == topic {
			committed[offset.Partition] = offset.At
		}
	})
	return committed, failed
}

// readAll reads topic from its start up to the given end offsets with a client outside any
// group and returns its records by partition, in offset order. With control records kept, the
// position reaches the end offset even when the last batch is a transaction marker. `extra`
// adds options of the reading client (its rack, hooks).
func readAll(ctx context.Context, c *common, topic string, ends map[int32]int64, isolation kgo.IsolationLevel, extra ...kgo.Opt) (map[int32][]*kgo.Record, error) {
	start := map[int32]kgo.Offset{}
	for partition := range ends {
		start[partition] = kgo.NewOffset().AtStart()
	}
	options := append(c.clientOptions(nil),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(isolation),
		kgo.KeepControlRecords(),
	)
	options = append(options, extra...)
	client, err := kgo.NewClient(options...)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	records := map[int32][]*kgo.Record{}
	next := map[int32]int64{}
	reached := func() bool {
		for partition, end := range ends {
			if next[partition] < end {
				return false
			}
		}
		return true
	}
	for !reached() {
		fetches := client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: positions %v, end offsets %v: %w", topic, next, ends, err)
		}
		for _, fetchError := range fetches.Errors() {
			return nil, fmt.Errorf("reading %s-%d: %w", fetchError.Topic, fetchError.Partition, fetchError.Err)
		}
		fetches.EachRecord(func(record *kgo.Record) {
			next[record.Partition] = record.Offset + 1
			if !record.Attrs.IsControl() {
				records[record.Partition] = append(records[record.Partition], record)
			}
		})
	}
	return records, nil
}

// pollErrors returns the errors of a poll other than its context's end.
func pollErrors(fetches kgo.Fetches) error {
	var failed error
	for _, fetchError := range fetches.Errors() {
		if errors.Is(fetchError.Err, context.DeadlineExceeded) || errors.Is(fetchError.Err, context.Canceled) {
			continue
		}
		failed = errors.Join(failed, fmt.Errorf("%s-%d: %w", fetchError.Topic, fetchError.Partition, fetchError.Err))
	}
	return failed
}

// errorList turns errors into strings for the JSON line (never null).
func errorList(errs []error) []string {
	texts := []string{}
	for _, err := range errs {
		texts = append(texts, err.Error())
	}
	return texts
}
