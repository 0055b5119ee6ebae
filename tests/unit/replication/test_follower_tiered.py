"""A follower of a tiered partition below its leader's local log start, on two cluster brokers
in this process (real sockets, a shared in-memory metadata store and object store): the
leader answers its Fetch with OFFSET_MOVED_TO_TIERED_STORAGE; the follower asks the leader's
local log start (ListOffsets EARLIEST_LOCAL), takes the leader epochs and the producer state
there from the object store, starts its log there and catches up without fetching the
tiered history. Without tiered storage on the follower's broker it backs off, as before."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from lockgate.cluster.metadata import PartitionState
from lockgate.log.partition import Partition
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.storage.object_store import MemoryObjectStore
from lockgate.tiered.manager import RemoteLogManager
from tests.support.memory_cluster import MemoryClusterBroker, MemoryStore, memory_cluster
from tests.unit.coordinator.group.support import wait_until

TOPIC = "tiered"
SETTINGS = {"replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "50"}
# a segment per 3-record batch; one local segment kept past the copied ones
CONFIGS = {"remote.storage.enable": "true", "retention.ms": "-1", "local.retention.ms": "-1",
           "local.retention.bytes": "1", "internal.segment.bytes": "100"}  # fmt: skip
PRODUCER_ID = 77
Cluster = tuple[MemoryStore, list[MemoryClusterBroker], list[RemoteLogManager]]


def log_of(member: MemoryClusterBroker) -> Partition:
    partition = member.broker.topics.get(TOPIC, 0)
    assert partition is not None
    return partition


def produce(leader: Partition, batches: int) -> None:
    for i in range(batches):
        batch = build_batch([(None, b"v%d-%d" % (i, j)) for j in range(3)],
                            producer_id=PRODUCER_ID, producer_epoch=0,
                            base_sequence=3 * i)  # fmt: skip
        leader.append(bytearray(batch), validate_produced_batch(batch), 0)
    leader.flushed_to(leader.log_end_offset)


def with_tiered(member: MemoryClusterBroker, store: MemoryObjectStore) -> RemoteLogManager:
    """The broker with tiered storage on, as the composition root wires it."""
    broker = member.broker
    manager = RemoteLogManager(store, broker.storage, member.node_id, broker.topics.clock_ms)
    broker.tiered = manager
    assert broker.replicas is not None
    broker.replicas.tiered = manager
    broker.services = dataclasses.replace(broker.services, tiered=manager)
    return manager


async def copied_away(store: MemoryStore, brokers: list[MemoryClusterBroker],
                      leader_manager: RemoteLogManager) -> Partition:  # fmt: skip
    """Broker 0 alone leads the topic (epoch 1); 18 offsets written, 15 of them copied to the
    object store and deleted from its disk."""
    store.put_topic(TOPIC, 1, CONFIGS)
    store.put(TOPIC, 0, PartitionState((0,), 0, 1, (0,)))
    await wait_until(lambda: brokers[0].broker.topics.get(TOPIC, 0) is not None)
    leader = log_of(brokers[0])
    produce(leader, 6)
    await wait_until(lambda: leader.high_watermark == 18)
    await leader_manager.run([leader])
    assert (leader.local_log_start_offset, leader.log_start_offset) == (15, 0)
    return leader


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with memory_cluster(2, SETTINGS) as (store, brokers):
        objects = MemoryObjectStore()
        yield store, brokers, [with_tiered(m, objects) for m in brokers]


@pytest.mark.timeout(60)
async def test_a_new_follower_starts_at_the_leaders_local_start(cluster: Cluster) -> None:
    store, brokers, managers = cluster
    leader = await copied_away(store, brokers, managers[0])
    # a new replica on broker 1 (a new leader epoch: the leader's term knows its followers)
    store.put(TOPIC, 0, PartitionState((0, 1), 0, 2, (0,)))
    await wait_until(lambda: store.view.partitions[(TOPIC, 0)].value.isr == (0, 1))
    follower = log_of(brokers[1])
    assert (follower.local_log_start_offset, follower.log_end_offset) == (15, 18)
    assert follower.log_start_floor == 0  # the tiered history is not deleted from its view
    assert follower.read(15, 1 << 20, 18) == leader.read(15, 1 << 20, 18)
    # the epochs of the history it skipped (epoch 2 wrote nothing yet)
    assert (follower.epochs.epochs, follower.epochs.start_offsets) == ([1], [0])
    entry, expected = follower.producers.get(PRODUCER_ID), leader.producers.get(PRODUCER_ID)
    assert entry is not None and expected is not None
    assert entry.last_sequence == expected.last_sequence
    # its own pass only re-reads the manifests: the tiered part readable, nothing copied
    await managers[1].run([follower])
    assert follower.log_start_offset == 0 and managers[1].stats.copied_segments == 0


@pytest.mark.timeout(60)
async def test_without_tiered_storage_the_follower_backs_off(cluster: Cluster) -> None:
    store, brokers, managers = cluster
    replicas = brokers[1].broker.replicas
    assert replicas is not None
    replicas.tiered = None  # tiered storage off on broker 1
    await copied_away(store, brokers, managers[0])
    store.put(TOPIC, 0, PartitionState((0, 1), 0, 2, (0,)))
    await wait_until(lambda: 0 in replicas.fetchers)
    fetcher = replicas.fetchers[0]
    await wait_until(lambda: fetcher.replicas[(TOPIC, 0)].retry_at > 0)  # answered, backing off
    follower = log_of(brokers[1])
    assert follower.log_end_offset == 0 and store.view.partitions[(TOPIC, 0)].value.isr == (0,)
