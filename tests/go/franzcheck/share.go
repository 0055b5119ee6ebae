// share: franz-go's share consumers (KIP-932, kgo.ShareGroup) read one topic together. The
// group's share.auto.offset.reset is set to earliest first (a group config, resource type 32),
// then the records are written, then -consumers members poll until every record has a final
// answer. Each member acknowledges by the record's number: i%10 == 3 is released on its first
// delivery (the broker must hand it out again, with delivery count 2, to any member) and
// accepted after; i%10 == 7 is rejected (never handed out again); the others are accepted.
// The line reports each outcome's count, records accepted twice or delivered after a final
// answer, the delivery counts seen, how many members got records, and the requests sent.
package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const groupResourceType = 32 // ConfigResource GROUP (KIP-848, KIP-932)

type shareTally struct {
	mu         sync.Mutex
	deliveries map[int]int  // record → times handed out
	final      map[int]bool // record → accepted (true) or rejected (false)
	// records handed out again after a final answer, or accepted twice
	afterFinal    int
	acceptedTwice int
	redelivered   int // released records handed out again with delivery count ≥ 2
	maxCount      int32
	wrongCount    int // a record whose delivery count was not its deliveries so far
	memberRecords map[int]int
	ackErrors     []string
}

type shareResult struct {
	Mode          string         `json:"mode"`
	Records       int            `json:"records"`
	Consumers     int            `json:"consumers"`
	Accepted      int            `json:"accepted"`
	Rejected      int            `json:"rejected"`
	Deliveries    int            `json:"deliveries"`
	Redelivered   int            `json:"redelivered"`
	AfterFinal    int            `json:"after_final"`
	AcceptedTwice int            `json:"accepted_twice"`
	WrongCount    int            `json:"wrong_delivery_count"`
	MaxCount      int32          `json:"max_delivery_count"`
	Members       map[string]int `json:"members"`
	AckErrors     []string       `json:"ack_errors"`
	PollErrors    []string       `json:"poll_errors"`
	Requests      map[string]int `json:"requests"`
}

func runShare(ctx context.Context, args []string) (any, error) {
	var c common
	var topic, group string
	var consumers int
	flags := flag.NewFlagSet("share", flag.ContinueOnError)
	c.register(flags, 200)
	flags.StringVar(&topic, "topic", "", "topic to create and use")
	flags.StringVar(&group, "group", "", "the share group")
	flags.IntVar(&consumers, "consumers", 2, "share consumers of the group")
	ctx, cancel, err := withDeadline(ctx, flags, &c, args)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if topic == "" || group == "" || consumers < 1 {
		return nil, fmt.Errorf("-topic and -group are required, -consumers must be positive")
	}
	adm, err := newAdmin(&c)
	if err != nil {
		return nil, err
	}
	defer adm.close()
	if err := adm.createTopics(ctx, &c, topic); err != nil {
		return nil, err
	}
	if err := setGroupConfig(ctx, adm.client, group, "share.auto.offset.reset", "earliest"); err != nil {
		return nil, err
	}
	if err := produceNumbered(ctx, &c, topic); err != nil {
		return nil, err
	}

	tally := &shareTally{deliveries: map[int]int{}, final: map[int]bool{}, memberRecords: map[int]int{}}
	requests := newRequestCounter()
	var pollFailures []error
	var wg sync.WaitGroup
	done := make(chan struct{})
	var doneOnce sync.Once
	for member := 0; member < consumers; member++ {
		client, err := kgo.NewClient(append(c.clientOptions(requests),
			kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
			kgo.ShareAckCallback(tally.acked),
		)...)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func(member int, client *kgo.Client) {
			defer wg.Done()
			defer client.Close()
			for {
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				default:
				}
				polled, stop := context.WithTimeout(ctx, 500*time.Millisecond)
				fetches := client.PollRecords(polled, 100)
				stop()
				if failed := pollErrors(fetches); failed != nil {
					tally.mu.Lock()
					pollFailures = append(pollFailures, failed)
					tally.mu.Unlock()
				}
				fetches.EachRecord(func(record *kgo.Record) {
					record.Ack(tally.decide(member, record))
				})
				if err := client.FlushAcks(ctx); err != nil && ctx.Err() == nil {
					tally.mu.Lock()
					pollFailures = append(pollFailures, fmt.Errorf("flushing acks: %w", err))
					tally.mu.Unlock()
				}
				if tally.finished(c.records) {
					doneOnce.Do(func() { close(done) })
				}
			}
		}(member, client)
	}
	waitErr := waitUntil(ctx, func() bool { return tally.finished(c.records) }, "every record answered")
	doneOnce.Do(func() { close(done) })
	wg.Wait()

	tally.mu.Lock()
	defer tally.mu.Unlock()
	result := &shareResult{Mode: "share", Records: c.records, Consumers: consumers,
		Redelivered: tally.redelivered, AfterFinal: tally.afterFinal, AcceptedTwice: tally.acceptedTwice,
		WrongCount: tally.wrongCount, MaxCount: tally.maxCount, Members: map[string]int{},
		AckErrors: append([]string{}, tally.ackErrors...), PollErrors: errorList(pollFailures),
		Requests: requests.snapshot()}
	for _, accepted := range tally.final {
		if accepted {
			result.Accepted++
		} else {
			result.Rejected++
		}
	}
	for _, count := range tally.deliveries {
		result.Deliveries += count
	}
	for member, count := range tally.memberRecords {
		result.Members[strconv.Itoa(member)] = count
	}
	if waitErr != nil {
		result.PollErrors = append(result.PollErrors, waitErr.Error())
	}
	return result, nil
}

// decide records a delivery and answers it by the record's number.
func (t *shareTally) decide(member int, record *kgo.Record) kgo.AckStatus {
	number, err := strconv.Atoi(string(record.Value))
	if err != nil {
		t.mu.Lock()
		t.ackErrors = append(t.ackErrors, fmt.Sprintf("a record that is not a number: %q", record.Value))
		t.mu.Unlock()
		return kgo.AckReject
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.memberRecords[member]++
	t.deliveries[number]++
	count := record.DeliveryCount()
	if count > t.maxCount {
		t.maxCount = count
	}
	if int(count) != t.deliveries[number] {
		t.wrongCount++
	}
	if _, answered := t.final[number]; answered {
		t.afterFinal++
		if number%10 != 7 {
			t.acceptedTwice++
		}
		return kgo.AckAccept
	}
	switch {
	case number%10 == 7:
		t.final[number] = false
		return kgo.AckReject
	case number%10 == 3 && count == 1:
		return kgo.AckRelease
	}
	if number%10 == 3 {
		t.redelivered++
	}
	t.final[number] = true
	return kgo.AckAccept
}

func (t *shareTally) finished(records int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.final) >= records
}

func (t *shareTally) acked(_ *kgo.Client, results kgo.ShareAckResults) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, result := range results {
		if result.Err != nil {
			t.ackErrors = append(t.ackErrors, fmt.Sprintf("%s-%d: %v", result.Topic, result.Partition, result.Err))
		}
	}
}

// setGroupConfig sets one config of a group (IncrementalAlterConfigs, resource type GROUP).
func setGroupConfig(ctx context.Context, client *kgo.Client, group, name, value string) error {
	request := kmsg.NewPtrIncrementalAlterConfigsRequest()
	resource := kmsg.NewIncrementalAlterConfigsRequestResource()
	resource.ResourceType = groupResourceType
	resource.ResourceName = group
	config := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	config.Name = name
	config.Value = kmsg.StringPtr(value)
	resource.Configs = append(resource.Configs, config)
	request.Resources = append(request.Resources, resource)
	response, err := request.RequestWith(ctx, client)
	if err != nil {
		return fmt.Errorf("setting %s of group %s: %w", name, group, err)
	}
	for _, answered := range response.Resources {
		if answered.ErrorCode != 0 {
			return fmt.Errorf("setting %s of group %s: error code %d", name, group, answered.ErrorCode)
		}
	}
	return nil
}

// produceNumbered writes records whose values are 0 .. records-1, spread over the partitions.
func produceNumbered(ctx context.Context, c *common, topic string) error {
	producer, err := kgo.NewClient(append(c.clientOptions(nil), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return err
	}
	defer producer.Close()
	records := make([]*kgo.Record, 0, c.records)
	for i := 0; i < c.records; i++ {
		records = append(records, &kgo.Record{Topic: topic, Partition: int32(i % c.partitions), Value: []byte(strconv.Itoa(i))})
	}
	return producer.ProduceSync(ctx, records...).FirstErr()
}
