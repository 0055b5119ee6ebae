// produce-consume: franz-go's idempotent producer (its default: acks=all, one producer id)
// writes -records records round-robin over the partitions, then a consumer outside any group
// reads the topic back from its start. The line reports what the producer was told and what
// the consumer read, partition by partition. With -rack the consumer names that rack
// (client.rack, KIP-392: a leader may send it to a replica in its rack) and the line counts
// the batches it read from each broker.
package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

type partitionReport struct {
	Produced int `json:"produced"`
	Consumed int `json:"consumed"`
	// EndOffset is the high watermark after producing.
	EndOffset int64 `json:"end_offset"`
	// Contiguous: the consumed offsets are 0, 1, 2, ... with no gap or repeat.
	Contiguous bool `json:"contiguous"`
	// InOrder: the records came back in the order they were produced.
	InOrder bool `json:"in_order"`
	// OffsetsMatch: each record was read at the offset its delivery reported.
	OffsetsMatch bool `json:"offsets_match"`
}

type produceConsumeResult struct {
	Mode          string                   `json:"mode"`
	Records       int                      `json:"records"`
	Produced      int                      `json:"produced"`
	Consumed      int                      `json:"consumed"`
	ProducerID    int64                    `json:"producer_id"`
	ProducerEpoch int16                    `json:"producer_epoch"`
	Partitions    map[int]*partitionReport `json:"partitions"`
	BadValues     int                      `json:"bad_values"`
	ProduceErrors []string                 `json:"produce_errors"`
	Requests      map[string]int           `json:"requests"`
	// BatchesFrom counts the batches the consumer read, by the id of the broker that served
	// them (with -rack only).
	BatchesFrom map[int32]int `json:"batches_from,omitempty"`
}

// batchSources counts the batches a consumer reads by the broker they came from.
type batchSources struct {
	mu     sync.Mutex
	counts map[int32]int
}

func (b *batchSources) OnFetchBatchRead(meta kgo.BrokerMetadata, _ string, _ int32, _ kgo.FetchBatchMetrics) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts[meta.NodeID]++
}

func (b *batchSources) snapshot() map[int32]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	counts := map[int32]int{}
	for node, count := range b.counts {
		counts[node] = count
	}
	return counts
}

func runProduceConsume(ctx context.Context, args []string) (any, error) {
	var c common
	var topic, rack string
	flags := flag.NewFlagSet("produce-consume", flag.ContinueOnError)
	c.register(flags, 1000)
	flags.StringVar(&topic, "topic", "", "topic to create and use")
	flags.StringVar(&rack, "rack", "", "the consumer's rack (client.rack); empty: none")
	ctx, cancel, err := withDeadline(ctx, flags, &c, args)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if topic == "" {
		return nil, fmt.Errorf("-topic is required")
	}
	adm, err := newAdmin(&c)
	if err != nil {
		return nil, err
	}
	defer adm.close()
	if err := adm.createTopics(ctx, &c, topic); err != nil {
		return nil, err
	}

	requests := newRequestCounter()
	producer, err := kgo.NewClient(append(c.clientOptions(requests),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)...)
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	result := &produceConsumeResult{Mode: "produce-consume", Records: c.records,
		Partitions: map[int]*partitionReport{}, ProduceErrors: []string{}}
	for partition := 0; partition < c.partitions; partition++ {
		result.Partitions[partition] = &partitionReport{}
	}

	// deliveredAt[i] is the offset the broker gave record i
	deliveredAt := make([]int64, c.records)
	var mu sync.Mutex
	var produceErrors []error
	for i := 0; i < c.records; i++ {
		record := &kgo.Record{Topic: topic, Partition: int32(i % c.partitions),
			Key: []byte(strconv.Itoa(i)), Value: []byte("value-" + strconv.Itoa(i))}
		producer.Produce(ctx, record, func(delivered *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				produceErrors = append(produceErrors, fmt.Errorf("record %s: %w", delivered.Key, err))
				return
			}
			deliveredAt[i] = delivered.Offset
			result.Produced++
			result.Partitions[int(delivered.Partition)].Produced++
		})
	}
	if err := producer.Flush(ctx); err != nil {
		return nil, err
	}
	result.ProduceErrors = errorList(produceErrors)
	if result.ProducerID, result.ProducerEpoch, err = producer.ProducerID(ctx); err != nil {
		return nil, fmt.Errorf("the producer id: %w", err)
	}
	result.Requests = requests.snapshot()

	ends, err := adm.endOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	var reading []kgo.Opt
	sources := &batchSources{counts: map[int32]int{}}
	if rack != "" {
		reading = append(reading, kgo.Rack(rack), kgo.WithHooks(sources))
	}
	read, err := readAll(ctx, &c, topic, ends, kgo.ReadUncommitted(), reading...)
	if err != nil {
		return nil, err
	}
	if rack != "" {
		result.BatchesFrom = sources.snapshot()
	}
	for partition, report := range result.Partitions {
		report.EndOffset = ends[int32(partition)]
		report.Contiguous, report.InOrder, report.OffsetsMatch = true, true, true
		previous := -1
		for position, record := range read[int32(partition)] {
			result.Consumed++
			report.Consumed++
			index, err := strconv.Atoi(string(record.Key))
			if err != nil || index < 0 || index >= c.records || string(record.Value) != "value-"+string(record.Key) {
				result.BadValues++
				continue
			}
			report.Contiguous = report.Contiguous && record.Offset == int64(position)
			report.InOrder = report.InOrder && index > previous
			report.OffsetsMatch = report.OffsetsMatch && deliveredAt[index] == record.Offset
			previous = index
		}
	}
	return result, nil
}
