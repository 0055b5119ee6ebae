"""A follower and its leader's log start, on two cluster brokers in this process (real
sockets, a shared in-memory metadata store): DeleteRecords on the leader moves the follower's
log start too, and a follower that was away while the leader's log start passed its log end
starts anew there, catches up and rejoins the ISR (it used to back off forever)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lockgate.cluster.metadata import PartitionState
from lockgate.log.partition import Partition
from lockgate.protocol.records import build_batch, parse_header
from tests.support.broker import free_port
from tests.support.memory_cluster import MemoryClusterBroker, MemoryStore, memory_cluster
from tests.unit.coordinator.group.support import wait_until

TOPIC = "t"
Cluster = tuple[MemoryStore, list[MemoryClusterBroker]]
SETTINGS = {"replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "50"}


def log_of(member: MemoryClusterBroker) -> Partition:
    partition = member.broker.topics.get(TOPIC, 0)
    assert partition is not None
    return partition


def append(leader: Partition, count: int) -> int:
    for _ in range(count):
        batch = bytearray(build_batch([(None, b"v")]))
        leader.append(batch, parse_header(batch), 0)
    leader.flushed_to(leader.log_end_offset)
    return leader.log_end_offset


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """Broker 0 leads t-0 (epoch 1), broker 1 follows it, both in the ISR."""
    async with memory_cluster(2, SETTINGS) as (store, brokers):
        store.put_topic(TOPIC, 1)
        store.put(TOPIC, 0, PartitionState((0, 1), 0, 1, (0, 1)))
        await wait_until(lambda: brokers[0].broker.topics.get(TOPIC, 0) is not None)
        yield store, brokers


@pytest.mark.timeout(60)
async def test_the_leaders_log_start_reaches_its_follower(cluster: Cluster) -> None:
    _store, brokers = cluster
    leader = log_of(brokers[0])
    end = append(leader, 10)
    await wait_until(lambda: leader.high_watermark == end)
    leader.delete_records(4, 1_000)
    await wait_until(lambda: log_of(brokers[1]).log_start_offset == 4)
    assert log_of(brokers[1]).log_end_offset == end


@pytest.mark.timeout(60)
async def test_a_follower_left_behind_the_leaders_log_start_catches_up(cluster: Cluster) -> None:
    store, brokers = cluster
    leader = log_of(brokers[0])
    first = append(leader, 3)
    await wait_until(lambda: log_of(brokers[1]).log_end_offset == first)
    # broker 1 cannot reach its leader; the leader goes on without it
    brokers[0].register(free_port())
    brokers[0].drop_connections()
    await wait_until(lambda: brokers[0].connection_count == 0)  # answers in flight sent
    store.put(TOPIC, 0, PartitionState((0, 1), 0, 1, (0,)))
    end = append(leader, 10)
    await wait_until(lambda: leader.high_watermark == end)
    leader.delete_records(8, 1_000)
    # reachable again: broker 1 asks from offset 3, below the leader's log start
    brokers[0].register(brokers[0].broker.port)
    await wait_until(lambda: store.view.partitions[(TOPIC, 0)].value.isr == (0, 1))
    follower = log_of(brokers[1])
    assert (follower.log_start_offset, follower.log_end_offset) == (8, end)
    assert follower.read(8, 1 << 20, end) == leader.read(8, 1 << 20, end)
