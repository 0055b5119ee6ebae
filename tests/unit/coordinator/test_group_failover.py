"""Group coordination moving with the leadership of a __consumer_offsets partition, on two
cluster brokers in this process (real sockets, replicated logs, a shared in-memory metadata
store): offsets committed on the first leader (acks=all: broker 1 has them when the commit
is answered) are served by broker 1's coordinator once it leads the partition, and broker 0
stops coordinating the partition's groups."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockgate.cluster.metadata import PartitionState
from lockgate.coordinator.group.records import CommittedOffset
from lockgate.coordinator.group.service import GroupCoordinator
from lockgate.coordinator.txn.log import partition_for
from lockgate.protocol.errors import ErrorCode
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC
from tests.support.memory_cluster import MemoryClusterBroker, MemoryStore, memory_cluster
from tests.unit.coordinator.group.support import wait_until

PARTITIONS = 3
GROUP = "payments-consumers"
INDEX = partition_for(GROUP, PARTITIONS)
TOPIC = "orders"
SETTINGS = {"offsets.topic.num.partitions": str(PARTITIONS)}

Cluster = tuple[MemoryStore, list[MemoryClusterBroker]]


def led_by(leader: int, epoch: int) -> PartitionState:
    """A partition on both brokers, both in sync."""
    return PartitionState((0, 1), leader, epoch, (0, 1))


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """Brokers 0 and 1 running their coordinators; the group's __consumer_offsets partition
    and orders-0 on both, led by broker 0 in epoch 1; broker 0 coordinates the group."""
    async with memory_cluster(2, SETTINGS) as (store, brokers):
        for member in brokers:
            member.run_coordinators()
        store.put_topic(CONSUMER_OFFSETS_TOPIC, PARTITIONS)
        store.put_topic(TOPIC, 1)
        store.put(CONSUMER_OFFSETS_TOPIC, INDEX, led_by(0, 1))
        store.put(TOPIC, 0, led_by(0, 1))
        groups = brokers[0].broker.groups
        await wait_until(lambda: groups.unavailable(GROUP) == ErrorCode.none)
        yield store, brokers


async def commit(groups: GroupCoordinator, offset: int, topic: str = TOPIC) -> ErrorCode:
    committed = CommittedOffset(offset, -1, "", 1_000)
    answers = await asyncio.wait_for(
        groups.commit(GROUP, -1, "", None, {(topic, 0): committed}), 10
    )
    return answers[(topic, 0)]


def committed(groups: GroupCoordinator) -> int | None:
    error, answers = groups.fetch(GROUP, None, False)
    assert error == ErrorCode.none
    found = answers.get((TOPIC, 0))
    return None if found is None or found[0] is None else found[0].offset


async def test_a_commit_is_answered_once_the_follower_has_it(cluster: Cluster) -> None:
    _store, brokers = cluster
    assert await commit(brokers[0].broker.groups, 42) == ErrorCode.none
    leader = brokers[0].broker.topics.get(CONSUMER_OFFSETS_TOPIC, INDEX)
    follower = brokers[1].broker.topics.get(CONSUMER_OFFSETS_TOPIC, INDEX)
    assert leader is not None and follower is not None
    assert follower.log_end_offset == leader.log_end_offset == leader.high_watermark == 1


async def test_the_next_leader_serves_the_offsets_committed_on_the_first(
    cluster: Cluster,
) -> None:
    store, brokers = cluster
    assert await commit(brokers[0].broker.groups, 42) == ErrorCode.none
    successor = brokers[1].broker.groups
    assert successor.unavailable(GROUP) == ErrorCode.not_coordinator
    store.put(CONSUMER_OFFSETS_TOPIC, INDEX, led_by(1, 2))
    await wait_until(lambda: successor.unavailable(GROUP) == ErrorCode.none)
    assert successor.runtime.owned == {INDEX: 2}
    assert committed(successor) == 42


async def test_the_previous_leader_stops_coordinating_the_group(cluster: Cluster) -> None:
    store, brokers = cluster
    groups = brokers[0].broker.groups
    assert await commit(groups, 42) == ErrorCode.none
    store.put(CONSUMER_OFFSETS_TOPIC, INDEX, led_by(1, 2))
    await wait_until(lambda: groups.unavailable(GROUP) == ErrorCode.not_coordinator)
    assert GROUP not in groups.groups and groups.runtime.owned == {}
    assert await commit(groups, 43) == ErrorCode.not_coordinator


async def test_offsets_of_a_partition_hosted_elsewhere_are_committed(cluster: Cluster) -> None:
    store, brokers = cluster
    store.put_topic("elsewhere", 1)
    store.put("elsewhere", 0, PartitionState((1,), 1, 1, (1,)))  # broker 1 only
    await wait_until(lambda: brokers[1].broker.topics.get("elsewhere", 0) is not None)
    assert "elsewhere" in brokers[0].broker.topics.topics  # a topic broker 0 knows of
    assert await commit(brokers[0].broker.groups, 5, topic="elsewhere") == ErrorCode.none


async def test_a_topic_deleted_from_the_metadata_loses_its_offsets_on_the_coordinator(
    cluster: Cluster,
) -> None:
    """Every broker learns the deletion from the metadata store; the one coordinating the
    group tombstones its offsets of the topic (replicated like any write), so the next
    coordinator has none either."""
    store, brokers = cluster
    groups = brokers[0].broker.groups
    assert await commit(groups, 42) == ErrorCode.none
    store.put_topic("kept", 1)
    store.put("kept", 0, led_by(0, 1))
    await wait_until(lambda: "kept" in brokers[0].broker.topics.topics)
    assert await commit(groups, 7, topic="kept") == ErrorCode.none
    store.delete_topic(TOPIC)
    await wait_until(lambda: committed(groups) is None)
    leader = brokers[0].broker.topics.get(CONSUMER_OFFSETS_TOPIC, INDEX)
    follower = brokers[1].broker.topics.get(CONSUMER_OFFSETS_TOPIC, INDEX)
    assert leader is not None and follower is not None
    await wait_until(lambda: follower.log_end_offset == leader.log_end_offset == 3)
    store.put(CONSUMER_OFFSETS_TOPIC, INDEX, led_by(1, 2))
    successor = brokers[1].broker.groups
    await wait_until(lambda: successor.unavailable(GROUP) == ErrorCode.none)
    error, answers = successor.fetch(GROUP, None, False)
    assert error == ErrorCode.none
    assert {tp: c.offset for tp, (c, _e) in answers.items() if c is not None} == {("kept", 0): 7}
