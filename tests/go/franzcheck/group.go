// group: two franz-go members of one consumer group share a topic, with the classic protocol
// (JoinGroup/SyncGroup, franz-go's default cooperative-sticky balancer) or with KIP-848's
// (ConsumerGroupHeartbeat, the broker's "uniform" assignor: kgo.ServerSideBalancer with the
// sticky balancer). Half the records are written and consumed by the first member alone; the
// second joins and the run waits until the partitions are split between them; then the other
// half is written and consumed by both. Each member commits what it consumed after every poll,
// and rebalances wait for that commit (kgo.BlockRebalanceOnPoll), so no record may be consumed
// twice. The line reports each record's deliveries, the members' assignments, the group as
// the broker describes it, the committed offsets against the end offsets, and the requests the
// members sent (proof of the protocol actually spoken).
package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// groupMember is one consumer of the group and what it saw.
type groupMember struct {
	client   *kgo.Client
	mu       sync.Mutex
	assigned map[int32]bool
	consumed int
	failures []error
	stopped  chan struct{}
}

func (m *groupMember) assign(partitions map[string][]int32, owned bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, list := range partitions {
		for _, partition := range list {
			if owned {
				m.assigned[partition] = true
			} else {
				delete(m.assigned, partition)
			}
		}
	}
}

func (m *groupMember) partitions() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var owned []int32
	for partition := range m.assigned {
		owned = append(owned, partition)
	}
	slices.Sort(owned)
	return owned
}

type memberReport struct {
	Consumed   int     `json:"consumed"`
	Partitions []int32 `json:"partitions"`
}

type groupResult struct {
	Mode     string `json:"mode"`
	Protocol string `json:"protocol"`
	Records  int    `json:"records"`
	// Deliveries counts every record handed to a member, Distinct the different ones.
	Deliveries int                      `json:"deliveries"`
	Distinct   int                      `json:"distinct"`
	Duplicates int                      `json:"duplicates"`
	Members    map[string]*memberReport `json:"members"`
	// SplitAssignment: once both had joined, their partitions were disjoint and covered all.
	SplitAssignment bool `json:"split_assignment"`
	// The group as ListGroups and DescribeGroups (classic) or ConsumerGroupDescribe (KIP-848)
	// answered while both members were in it.
	GroupType        string          `json:"group_type"`
	GroupState       string          `json:"group_state"`
	Assignor         string          `json:"assignor"`
	DescribedMembers int             `json:"described_members"`
	CommittedOffsets map[int32]int64 `json:"committed_offsets"`
	EndOffsets       map[int32]int64 `json:"end_offsets"`
	Failures         []string        `json:"failures"`
	Requests         map[string]int  `json:"requests"`
}

func runGroup(ctx context.Context, args []string) (any, error) {
	var c common
	var topic, group, protocol string
	flags := flag.NewFlagSet("group", flag.ContinueOnError)
	c.register(flags, 600)
	flags.StringVar(&topic, "topic", "", "topic to create and consume")
	flags.StringVar(&group, "group", "", "consumer group id")
	flags.StringVar(&protocol, "protocol", "classic", "group protocol: classic or consumer (KIP-848)")
	ctx, cancel, err := withDeadline(ctx, flags, &c, args)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if topic == "" || group == "" || (protocol != "classic" && protocol != "consumer") {
		return nil, fmt.Errorf("-topic, -group and -protocol classic|consumer are required")
	}
	adm, err := newAdmin(&c)
	if err != nil {
		return nil, err
	}
	defer adm.close()
	if err := adm.createTopics(ctx, &c, topic); err != nil {
		return nil, err
	}
	producer, err := kgo.NewClient(append(c.clientOptions(nil), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return nil, err
	}
	defer producer.Close()
	produce := func(from, to int) error {
		for i := from; i < to; i++ {
			producer.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % c.partitions), Value: []byte(strconv.Itoa(i))}, nil)
		}
		return producer.Flush(ctx)
	}

	var tallyMu sync.Mutex
	deliveries := map[string]int{}
	distinct := func() int {
		tallyMu.Lock()
		defer tallyMu.Unlock()
		return len(deliveries)
	}
	requests := newRequestCounter()
	stop := make(chan struct{})
	members := map[string]*groupMember{}
	var failures []error

	start := func(name string) error {
		member := &groupMember{assigned: map[int32]bool{}, stopped: make(chan struct{})}
		options := append(c.clientOptions(requests),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.DisableAutoCommit(),
			kgo.BlockRebalanceOnPoll(),
			kgo.SessionTimeout(10*time.Second),
			kgo.HeartbeatInterval(300*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, added map[string][]int32) { member.assign(added, true) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, removed map[string][]int32) { member.assign(removed, false) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { member.assign(lost, false) }),
		)
		if protocol == "consumer" {
			// franz-go speaks KIP-848 only with a balancer the broker implements: its sticky
			// balancer maps to the broker's "uniform" assignor
			options = append(options, kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
		}
		client, err := kgo.NewClient(options...)
		if err != nil {
			return err
		}
		member.client = client
		members[name] = member
		go func() {
			defer close(member.stopped)
			for {
				select {
				case <-stop:
					client.AllowRebalance()
					return
				default:
				}
				pollContext, pollCancel := context.WithTimeout(ctx, 200*time.Millisecond)
				fetches := client.PollFetches(pollContext)
				pollCancel()
				if err := pollErrors(fetches); err != nil {
					member.mu.Lock()
					member.failures = append(member.failures, fmt.Errorf("%s poll: %w", name, err))
					member.mu.Unlock()
				}
				count := 0
				fetches.EachRecord(func(record *kgo.Record) {
					tallyMu.Lock()
					deliveries[fmt.Sprintf("%d/%s", record.Partition, record.Value)]++
					tallyMu.Unlock()
					count++
				})
				if count > 0 {
					member.mu.Lock()
					member.consumed += count
					member.mu.Unlock()
					if err := client.CommitUncommittedOffsets(ctx); err != nil {
						member.mu.Lock()
						member.failures = append(member.failures, fmt.Errorf("%s commit: %w", name, err))
						member.mu.Unlock()
					}
				}
				client.AllowRebalance()
			}
		}()
		return nil
	}
	defer func() {
		for _, member := range members {
			member.client.Close()
		}
	}()

	half := c.records / 2
	result := &groupResult{Mode: "group", Protocol: protocol, Records: c.records, Members: map[string]*memberReport{}}
	if err := produce(0, half); err != nil {
		return nil, err
	}
	if err := start("a"); err != nil {
		return nil, err
	}
	if err := waitUntil(ctx, func() bool { return distinct() >= half }, "the first member consumes the first half"); err != nil {
		return nil, err
	}
	if err := start("b"); err != nil {
		return nil, err
	}
	split := func() bool {
		a, b := members["a"].partitions(), members["b"].partitions()
		if len(a) == 0 || len(b) == 0 || len(a)+len(b) != c.partitions {
			return false
		}
		all := append(slices.Clone(a), b...)
		slices.Sort(all)
		return len(slices.Compact(all)) == c.partitions
	}
	if err := waitUntil(ctx, split, "the partitions split between both members"); err != nil {
		return nil, err
	}
	result.SplitAssignment = true
	if err := describeGroup(ctx, adm, group, protocol, result); err != nil {
		failures = append(failures, err)
	}
	if err := produce(half, c.records); err != nil {
		return nil, err
	}
	if err := waitUntil(ctx, func() bool { return distinct() >= c.records }, "every record consumed"); err != nil {
		return nil, err
	}
	close(stop)
	for _, member := range members {
		<-member.stopped
	}
	// the members are still in the group (not closed) but commit nothing more
	if result.CommittedOffsets, err = adm.committedOffsets(ctx, group, topic); err != nil {
		failures = append(failures, fmt.Errorf("committed offsets: %w", err))
	}
	if result.EndOffsets, err = adm.endOffsets(ctx, topic); err != nil {
		return nil, err
	}

	tallyMu.Lock()
	for _, count := range deliveries {
		result.Deliveries += count
		result.Duplicates += count - 1
	}
	result.Distinct = len(deliveries)
	tallyMu.Unlock()
	for name, member := range members {
		member.mu.Lock()
		result.Members[name] = &memberReport{Consumed: member.consumed}
		failures = append(failures, member.failures...)
		member.mu.Unlock()
		result.Members[name].Partitions = member.partitions()
	}
	result.Failures = errorList(failures)
	result.Requests = requests.snapshot()
	return result, nil
}

// describeGroup asks the broker about the group until it lists both members.
func describeGroup(ctx context.Context, adm *admin, group, protocol string, result *groupResult) error {
	return waitUntil(ctx, func() bool {
		listed, err := adm.ListGroups(ctx)
		if err != nil {
			return false
		}
		result.GroupType = listed[group].GroupType
		if protocol == "consumer" {
			described, err := adm.DescribeConsumerGroups(ctx, group)
			if err != nil || described[group].Err != nil {
				return false
			}
			found := described[group]
			result.GroupState, result.Assignor, result.DescribedMembers = found.State, found.AssignorName, len(found.Members)
		} else {
			described, err := adm.DescribeGroups(ctx, group)
			if err != nil || described[group].Err != nil {
				return false
			}
			found := described[group]
			result.GroupState, result.Assignor, result.DescribedMembers = found.State, found.Protocol, len(found.Members)
		}
		return result.DescribedMembers == 2 && result.GroupState == "Stable"
	}, "the group described with both members, stable")
}

// waitUntil polls condition every 20 ms until it holds or ctx ends.
func waitUntil(ctx context.Context, condition func() bool, what string) error {
	for !condition() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
