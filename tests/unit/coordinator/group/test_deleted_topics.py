"""A deleted topic's committed offsets on the group coordinator of an in-process broker, as
Kafka 4.4's onTopicsDeleted: every group's offsets of the topic are tombstoned (by name), the
pending transactional ones too (their transaction's commit brings none back, also across a
restart and in a snapshot's image), nothing is written where nothing matches or where the
group's offsets partition is not served here, and the other offset tombstones (OffsetDelete,
DeleteGroups) follow the same rule for pending offsets while expiry passes over them."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from lockgate.coordinator.group.offsets import topic_offset_keys
from lockgate.coordinator.group.records import offset_key, offset_value
from lockgate.coordinator.group.share_group import (
    ShareGroup,
    ShareHeartbeatRequest,
    StatePartitions,
)
from lockgate.coordinator.share.records import ShareKey
from lockgate.coordinator.share.results import StateResult
from lockgate.coordinator.snapshots import PartitionImage
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import (
    TRANSACTIONAL_BIT,
    build_batch,
    build_control_batch,
    iter_records,
    parse_header,
)
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC
from tests.unit.coordinator.group.support import (
    OTHER_TOPIC,
    TOPIC,
    offsets,
    start_broker,
    visible,
    wait_until,
)

PRODUCER, EPOCH = 7000, 0
# a restart replays the log itself, or a snapshot's image taken at the clean stop
REPLAYS = pytest.mark.parametrize(
    "snapshots", [{"lockgate.coordinator.snapshot.interval.ms": "-1"}, {}], ids=["log", "image"]
)


def log_ends(broker: Broker) -> list[int]:
    """The log end offset of every __consumer_offsets partition."""
    ends = []
    for index in range(broker.groups.runtime.num_partitions):
        partition = broker.topics.get(CONSUMER_OFFSETS_TOPIC, index)
        assert partition is not None
        ends.append(partition.log_end_offset)
    return ends


def marker(broker: Broker, group_id: str, commit: bool) -> None:
    """The transaction coordinator's marker for PRODUCER on the group's offsets partition."""
    partition = broker.topics.get(CONSUMER_OFFSETS_TOPIC, broker.groups.offsets_partition(group_id))
    assert partition is not None
    partition.write_marker(PRODUCER, EPOCH, commit, 0, int(time.time() * 1000), False)


def groups_on_two_partitions(broker: Broker) -> tuple[str, str]:
    """Two group ids whose offsets partitions differ."""
    first = "g-0"
    for n in range(1, 100):
        other = f"g-{n}"
        if broker.groups.offsets_partition(other) != broker.groups.offsets_partition(first):
            return first, other
    raise AssertionError("no two partitions")


def test_a_topics_keys_are_found_by_their_prefix() -> None:
    held = [offset_key("g", t, p) for t in ("a", "ab", "b") for p in (0, 7, 300)]
    held.append(offset_key("g2", "a", 1))
    assert topic_offset_keys(held, "g", "a") == [offset_key("g", "a", p) for p in (0, 7, 300)]
    assert topic_offset_keys(held, "g", "c") == []


async def test_every_groups_offsets_of_the_topic_are_tombstoned(engine: MemoryEngine) -> None:
    broker = await start_broker(engine)
    try:
        groups = broker.groups
        both = offsets((TOPIC, 0, 5), (TOPIC, 2, 9), (OTHER_TOPIC, 1, 3))
        assert set((await groups.commit("mixed", -1, "", None, both)).values()) == {0}
        assert set((await groups.commit("only", -1, "", None, offsets((TOPIC, 1, 4)))).values())
        assert visible(groups, "only") == {(TOPIC, 1): 4}
        await broker.admin.delete(TOPIC)
        assert visible(groups, "mixed") == {(OTHER_TOPIC, 1): 3}
        assert visible(groups, "only") == {}
    finally:
        await broker.stop()
    # the tombstones are in the log: a restart (which makes TOPIC again) has none of them
    again = await start_broker(engine)
    try:
        assert TOPIC in again.topics.topics
        assert visible(again.groups, "mixed") == {(OTHER_TOPIC, 1): 3}
        assert visible(again.groups, "only") == {}
    finally:
        await again.stop()


async def test_nothing_is_written_when_no_group_has_offsets_of_it(broker: Broker) -> None:
    await broker.groups.commit("g", -1, "", None, offsets((OTHER_TOPIC, 0, 1)))
    before = log_ends(broker)
    await broker.admin.delete(TOPIC)
    assert log_ends(broker) == before
    assert visible(broker.groups, "g") == {(OTHER_TOPIC, 0): 1}


async def test_a_partition_not_served_here_is_left_to_its_coordinator(broker: Broker) -> None:
    groups = broker.groups
    served, moved = groups_on_two_partitions(broker)
    for group_id in (served, moved):
        await groups.commit(group_id, -1, "", None, offsets((TOPIC, 0, 1)))
    moved_index = groups.offsets_partition(moved)
    groups.runtime.unload(moved_index)  # (led elsewhere now)
    before = log_ends(broker)
    await broker.admin.delete(TOPIC)
    after = log_ends(broker)
    assert after[moved_index] == before[moved_index]
    assert after[groups.offsets_partition(served)] == before[groups.offsets_partition(served)] + 1
    assert visible(groups, served) == {}


@REPLAYS
async def test_pending_transactional_offsets_of_the_topic_go_too(
    engine: MemoryEngine, snapshots: dict[str, str]
) -> None:
    broker = await start_broker(engine, **snapshots)
    try:
        groups = broker.groups
        entries = offsets((TOPIC, 0, 11), (OTHER_TOPIC, 0, 12))
        results = await groups.txn_commit("txn", PRODUCER, EPOCH, -1, "", None, entries)
        assert set(results.values()) == {0}
        assert groups.offsets.pending_partitions("txn") == {(TOPIC, 0), (OTHER_TOPIC, 0)}
        await broker.admin.delete(TOPIC)
        assert groups.offsets.pending_partitions("txn") == {(OTHER_TOPIC, 0)}
        marker(broker, "txn", commit=True)
        assert visible(groups, "txn") == {(OTHER_TOPIC, 0): 12}
    finally:
        await broker.stop()
    # the replay reads: transactional offsets, the tombstone, the commit marker
    again = await start_broker(engine, **snapshots)
    try:
        assert visible(again.groups, "txn") == {(OTHER_TOPIC, 0): 12}
    finally:
        await again.stop()


@REPLAYS
async def test_a_restart_before_the_marker_has_the_pending_offset_deleted(
    engine: MemoryEngine, snapshots: dict[str, str]
) -> None:
    broker = await start_broker(engine, **snapshots)
    try:
        entries = offsets((TOPIC, 1, 21), (OTHER_TOPIC, 1, 22))
        await broker.groups.txn_commit("open", PRODUCER, EPOCH, -1, "", None, entries)
        await broker.admin.delete(TOPIC)
    finally:
        await broker.stop()
    again = await start_broker(engine, **snapshots)
    try:
        assert again.groups.offsets.pending_partitions("open") == {(OTHER_TOPIC, 1)}
        marker(again, "open", commit=True)
        assert visible(again.groups, "open") == {(OTHER_TOPIC, 1): 22}
    finally:
        await again.stop()


def test_a_snapshot_image_drops_pending_records_a_tombstone_deletes() -> None:
    """The image a coordinator snapshot keeps replays as the log does."""
    image = PartitionImage()
    kept, doomed = offset_key("g", OTHER_TOPIC, 0), offset_key("g", TOPIC, 0)
    value = offset_value(offsets((TOPIC, 0, 1))[(TOPIC, 0)])

    def follow(batch: bytes) -> None:
        header = parse_header(batch)
        image.follow(header, batch, [] if header.is_control else iter_records(batch))

    follow(build_batch([(kept, value), (doomed, value)], attributes=TRANSACTIONAL_BIT,
                       producer_id=PRODUCER, producer_epoch=EPOCH))  # fmt: skip
    follow(build_batch([(doomed, None)]))
    assert image.pending == {PRODUCER: (EPOCH, [(kept, value)])}
    follow(build_control_batch(PRODUCER, EPOCH, True, 0, 0))
    assert image.committed == {kept: value}
    # a transaction left with nothing has no entry (as one that wrote nothing)
    follow(build_batch([(doomed, value)], attributes=TRANSACTIONAL_BIT, producer_id=PRODUCER,
                       producer_epoch=EPOCH))  # fmt: skip
    follow(build_batch([(doomed, None)]))
    assert image.pending == {}


async def test_offset_delete_and_delete_groups_delete_pending_offsets(broker: Broker) -> None:
    """As Kafka: a tombstone where an offset is committed or pending in a transaction."""
    groups = broker.groups
    entries = offsets((TOPIC, 0, 1), (TOPIC, 1, 2))
    await groups.txn_commit("od", PRODUCER, EPOCH, -1, "", None, entries)
    error, results = await groups.delete_offsets("od", [(TOPIC, 0)])
    assert error == ErrorCode.none and results == {(TOPIC, 0): ErrorCode.none}
    assert groups.offsets.pending_partitions("od") == {(TOPIC, 1)}
    assert await groups.delete_group("od") == ErrorCode.none
    assert groups.offsets.pending_partitions("od") == set()
    marker(broker, "od", commit=True)
    assert visible(groups, "od") == {}


async def test_expiry_passes_over_pending_partitions_and_drops_an_empty_group() -> None:
    broker = await start_broker(MemoryEngine(), **{"offsets.retention.ms": "1000"})
    try:
        groups = broker.groups
        old = offsets((TOPIC, 0, 1), (TOPIC, 1, 2))  # (committed at 1,000: long expired)
        await groups.commit("exp", -1, "", None, old)
        await groups.txn_commit("exp", PRODUCER, EPOCH, -1, "", None, offsets((TOPIC, 1, 3)))
        now = int(time.time() * 1000)
        assert groups.expire_offsets(now) == 1  # (TOPIC, 1) waits for its transaction
        assert visible(groups, "exp") == {(TOPIC, 1): 2}
        assert "exp" in groups.groups
        # a group of no offsets and no generation (here: its topic deleted) goes at expiry
        await groups.commit("bare", -1, "", None, offsets((OTHER_TOPIC, 0, 1)))
        await broker.admin.delete(OTHER_TOPIC)
        assert visible(groups, "bare") == {} and "bare" in groups.groups
        before = log_ends(broker)
        groups.expire_offsets(now)
        assert "bare" not in groups.groups
        assert log_ends(broker) == before  # (nothing of it is in the log)
    finally:
        await broker.stop()


# -- share groups: record 15 and the share coordinator's state -----------------------------------

SHARE_FAST = {
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "100",
    "group.share.assignment.interval.ms": "0",
}


async def share_group_on(broker: Broker, group_id: str, *topics: str) -> None:
    """A share group whose member subscribes to `topics`, their share partitions initialized
    (state at the share coordinator, record 15's initialized topics)."""
    share = broker.groups.share
    join = ShareHeartbeatRequest(group_id, "m", 0, subscribed_topic_names=topics)
    assert (await share.heartbeat(join)).error == ErrorCode.none
    await share.settled()
    # (the member leaves: an empty share group can be deleted)
    await share.heartbeat(ShareHeartbeatRequest(group_id, "m", -1))


def share_state(broker: Broker, topic_id: uuid.UUID) -> set[ShareKey]:
    return {key for key in broker.shares.states.offsets if key.topic_id == topic_id}


def record_15(broker: Broker, group_id: str) -> StatePartitions | None:
    group = broker.groups.describe_share(group_id)
    assert isinstance(group, ShareGroup)
    return group.partitions


@REPLAYS
async def test_a_deleted_topic_leaves_share_groups_and_their_state(
    engine: MemoryEngine, snapshots: dict[str, str]
) -> None:
    broker = await start_broker(engine, **SHARE_FAST, **snapshots)
    try:
        deleted = broker.topics.topics[TOPIC].topic_id
        kept = broker.topics.topics[OTHER_TOPIC].topic_id
        await share_group_on(broker, "s1", TOPIC, OTHER_TOPIC)
        await share_group_on(broker, "s2", TOPIC)
        assert {k.group_id for k in share_state(broker, deleted)} == {"s1", "s2"}
        assert len(share_state(broker, deleted)) == 6
        partitions = record_15(broker, "s1")
        assert partitions is not None and set(partitions.initialized) == {deleted, kept}
        await broker.admin.delete(TOPIC)
        await broker.shares.settled()
        assert share_state(broker, deleted) == set()
        assert len(share_state(broker, kept)) == 3
        s1, s2 = record_15(broker, "s1"), record_15(broker, "s2")
        assert s1 is not None and set(s1.initialized) == {kept}
        assert s2 == StatePartitions()
    finally:
        await broker.stop()
    again = await start_broker(engine, **SHARE_FAST, **snapshots)
    try:
        await wait_until(lambda: again.shares.runtime.loaded)
        assert share_state(again, deleted) == set()
        assert len(share_state(again, kept)) == 3
        s1 = record_15(again, "s1")
        assert s1 is not None and set(s1.initialized) == {kept}
        # its state deleted with the topic, the empty group can be deleted (before, the
        # persister's delete of the deleted topic's state failed: UNKNOWN_TOPIC_OR_PARTITION)
        assert await again.groups.delete_group("s2") == ErrorCode.none
    finally:
        await again.stop()


async def test_share_state_of_an_unloaded_state_partition_is_left(broker: Broker) -> None:
    await share_group_on(broker, "s", TOPIC)
    deleted = broker.topics.topics[TOPIC].topic_id
    held = share_state(broker, deleted)
    indexes = {broker.shares._index(key) for key in held}
    for index in indexes:
        broker.shares.runtime.unload(index)  # (led elsewhere now: that coordinator does it)
    ends = {i: broker.shares.runtime.partition_at(i).log_end_offset for i in indexes}
    await broker.admin.delete(TOPIC)
    await broker.shares.settled()
    assert {i: broker.shares.runtime.partition_at(i).log_end_offset for i in indexes} == ends


class HeldPersister:
    """Answers initializations (success) only once released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.asked = 0

    async def initialize(self, *args: Any) -> StateResult:
        self.asked += 1
        await self.release.wait()
        return StateResult()

    async def read(self, *args: Any) -> Any:
        raise AssertionError("not used by the group coordinator")

    write = delete = read_summary = read


async def test_an_initialization_answered_after_the_deletion_leaves_the_topic_out(
    broker: Broker,
) -> None:
    share = broker.groups.share
    held = HeldPersister()
    share.persister = held
    request = ShareHeartbeatRequest("s", "m", 0, subscribed_topic_names=(TOPIC, OTHER_TOPIC))
    assert (await share.heartbeat(request)).error == ErrorCode.none
    await wait_until(lambda: held.asked == 6)  # (the initialization runs after the answer)
    deleted = broker.topics.topics[TOPIC].topic_id
    await broker.admin.delete(TOPIC)
    held.release.set()
    await share.settled()
    partitions = record_15(broker, "s")
    assert partitions is not None
    assert set(partitions.initialized) == {broker.topics.topics[OTHER_TOPIC].topic_id}
    assert deleted not in partitions.initializing
