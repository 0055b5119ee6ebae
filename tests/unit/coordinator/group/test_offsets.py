"""Committed offsets (OffsetCommit/OffsetFetch/DeleteGroups/OffsetDelete) on the group
coordinator of an in-process broker: standalone and member commits, per-partition errors,
persistence in __consumer_offsets in Kafka's layout and replay after a restart (tombstones
included), damaged records skipped by the replay, and a load's runs of offset commits applied
a run at a time as a replay record by record would."""

from __future__ import annotations

import asyncio
import random
import struct
from typing import Any

import pytest

from lockgate.coordinator.group import service
from lockgate.coordinator.group.records import (
    CommittedOffset,
    GroupRecord,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from lockgate.coordinator.group.service import GroupCoordinator
from lockgate.coordinator.group.state import GroupState
from lockgate.coordinator.runtime import LoopTimers
from lockgate.protocol import fastpath
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import (
    TRANSACTIONAL_BIT,
    build_batch,
    build_control_batch,
    iter_records,
    parse_header,
    validate_produced_batch,
)
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC
from tests.unit.coordinator.group.support import (
    OTHER_TOPIC,
    TOPIC,
    bounded,
    join,
    new_member_id,
    offsets,
    stable_group,
    start_broker,
    sync,
    visible,
)

GROUP = "offsets"


async def restart(broker: Broker, engine: MemoryEngine) -> Broker:
    """A clean restart over the same storage (the caller stops the returned broker)."""
    await broker.stop()
    return await start_broker(engine)


def offsets_records(broker: Broker, group_id: str) -> list[tuple[bytes, bytes | None]]:
    """Every (key, value) in the group's __consumer_offsets partition, in log order."""
    partition = broker.topics.get(CONSUMER_OFFSETS_TOPIC, broker.groups.offsets_partition(group_id))
    assert partition is not None
    found = []
    for segment, position, header in partition.batches_from(partition.log_start_offset):
        if header.is_control:
            continue
        for _offset, _ts, key, value in iter_records(segment.log.read(position, header.size)):
            assert key is not None
            found.append((key, value))
    return found


# -- OffsetCommit rules ------------------------------------------------------------------------


async def test_standalone_commit_creates_the_group(broker: Broker) -> None:
    groups = broker.groups
    results = await groups.commit(GROUP, -1, "", None, offsets((TOPIC, 0, 5), (TOPIC, 2, 9)))
    assert results == {(TOPIC, 0): ErrorCode.none, (TOPIC, 2): ErrorCode.none}
    assert groups.groups[GROUP].state is GroupState.EMPTY
    assert visible(groups, GROUP) == {(TOPIC, 0): 5, (TOPIC, 2): 9}
    error, answers = groups.fetch(GROUP, [(TOPIC, 0), (TOPIC, 1)], True)
    assert error == ErrorCode.none
    assert answers[(TOPIC, 0)] == (CommittedOffset(5, -1, "at 5", 1_000), ErrorCode.none)
    assert answers[(TOPIC, 1)] == (None, ErrorCode.none)  # nothing committed: -1 on the wire
    # a later commit replaces the offset
    await groups.commit(GROUP, -1, "", None, offsets((TOPIC, 0, 7)))
    assert visible(groups, GROUP) == {(TOPIC, 0): 7, (TOPIC, 2): 9}


async def test_fetch_of_an_unknown_group_is_empty(broker: Broker) -> None:
    assert visible(broker.groups, "never-seen") == {}
    error, answers = broker.groups.fetch("never-seen", [(TOPIC, 0)], False)
    assert error == ErrorCode.none and answers == {(TOPIC, 0): (None, ErrorCode.none)}


async def test_standalone_commit_is_refused_while_the_group_has_members(broker: Broker) -> None:
    await stable_group(broker.groups, GROUP, 1)
    results = await broker.groups.commit(GROUP, -1, "", None, offsets((TOPIC, 0, 5)))
    assert results == {(TOPIC, 0): ErrorCode.unknown_member_id}
    assert visible(broker.groups, GROUP) == {}


async def test_member_commit_rules(broker: Broker) -> None:
    groups = broker.groups
    generation, (member,) = await stable_group(groups, GROUP, 1)
    wanted = offsets((TOPIC, 1, 3))

    async def commit(generation: int, member_id: str, instance: str | None = None) -> ErrorCode:
        results = await groups.commit(GROUP, generation, member_id, instance, wanted)
        return results[(TOPIC, 1)]

    assert await commit(generation, member) == ErrorCode.none
    assert await commit(generation - 1, member) == ErrorCode.illegal_generation
    assert await commit(generation + 1, member) == ErrorCode.illegal_generation
    assert await commit(generation, "stranger") == ErrorCode.unknown_member_id
    assert await commit(generation, "") == ErrorCode.unknown_member_id
    # generation -1 with a member id: the generation is compared (a member must name its own)
    assert await commit(-1, member) == ErrorCode.illegal_generation
    assert visible(groups, GROUP) == {(TOPIC, 1): 3}


async def test_a_group_that_does_not_exist(broker: Broker) -> None:
    """As Kafka 4.4: a generation (or member epoch) >= 0 into a group that does not exist
    (never did, expired, deleted) is GROUP_ID_NOT_FOUND from OffsetCommit v9 on and
    ILLEGAL_GENERATION before; generation -1 creates the group whatever member or instance id
    it names, and the group, empty, takes such commits again."""
    groups = broker.groups
    wanted = offsets((TOPIC, 1, 3))
    for version, expected in ((8, ErrorCode.illegal_generation), (9, ErrorCode.group_id_not_found),
                              (10, ErrorCode.group_id_not_found)):  # fmt: skip
        for generation in (0, 4):
            absent = await groups.commit("absent", generation, "someone", None, wanted, version)
            assert absent == {(TOPIC, 1): expected}, (version, generation)
    assert "absent" not in groups.groups
    created = await groups.commit("absent", -1, "someone", None, wanted, 10)
    assert created == {(TOPIC, 1): ErrorCode.none}
    assert groups.groups["absent"].state is GroupState.EMPTY
    assert visible(groups, "absent") == {(TOPIC, 1): 3}
    # an empty classic group: generation -1 from anyone, a generation names a member it lacks
    for member_id, instance in (("someone", None), ("", "instance-1"), ("other", "instance-2")):
        again = await groups.commit("absent", -1, member_id, instance, offsets((TOPIC, 1, 4)), 8)
        assert again == {(TOPIC, 1): ErrorCode.none}
    assert visible(groups, "absent") == {(TOPIC, 1): 4}
    stale = await groups.commit("absent", 1, "someone", None, wanted, 10)
    assert stale == {(TOPIC, 1): ErrorCode.unknown_member_id}


async def test_a_members_commit_restarts_its_session(broker: Broker) -> None:
    """As Kafka 4.4, an accepted OffsetCommit of a member of a Stable (or PreparingRebalance)
    classic group counts as a heartbeat."""
    groups = broker.groups
    generation, (member,) = await stable_group(groups, GROUP, 1)
    group = groups.groups[GROUP]
    sessions = groups.classic.sessions  # the runtime's session timer of each member
    before = group.members[member].last_heartbeat_ms
    timer = sessions[(GROUP, member)]
    await asyncio.sleep(0.01)
    results = await groups.commit(GROUP, generation, member, None, offsets((TOPIC, 0, 1)))
    assert results == {(TOPIC, 0): ErrorCode.none}
    assert group.members[member].last_heartbeat_ms > before
    assert timer.cancelled() and sessions[(GROUP, member)] is not timer
    # a refused commit is no sign of life
    before = group.members[member].last_heartbeat_ms
    timer = sessions[(GROUP, member)]
    await asyncio.sleep(0.01)
    results = await groups.commit(GROUP, generation + 1, member, None, offsets((TOPIC, 0, 2)))
    assert results == {(TOPIC, 0): ErrorCode.illegal_generation}
    assert group.members[member].last_heartbeat_ms == before
    assert not timer.cancelled() and sessions[(GROUP, member)] is timer


async def test_fenced_static_member_cannot_commit(broker: Broker) -> None:
    groups = broker.groups
    old = await bounded(join(groups, GROUP, instance="instance-1"))
    new = await bounded(join(groups, GROUP, instance="instance-1"))
    results = await groups.commit(
        GROUP, old["generation_id"], old["member_id"], "instance-1", offsets((TOPIC, 0, 1))
    )
    assert results == {(TOPIC, 0): ErrorCode.fenced_instance_id}
    await bounded(sync(groups, GROUP, new["generation_id"], new["member_id"], None, "instance-1"))
    results = await groups.commit(
        GROUP, new["generation_id"], new["member_id"], "instance-1", offsets((TOPIC, 0, 2))
    )
    assert results == {(TOPIC, 0): ErrorCode.none}


async def test_commits_during_rebalances(broker: Broker) -> None:
    groups = broker.groups
    generation, (member,) = await stable_group(groups, GROUP, 1)
    newcomer_id = await new_member_id(groups, GROUP, "late")
    rejoin = asyncio.create_task(join(groups, GROUP, newcomer_id))
    await asyncio.sleep(0.02)
    assert groups.groups[GROUP].state is GroupState.PREPARING_REBALANCE
    # consumers commit while revoking: allowed with the generation that is ending
    results = await groups.commit(GROUP, generation, member, None, offsets((TOPIC, 0, 11)))
    assert results == {(TOPIC, 0): ErrorCode.none}
    answer = await bounded(join(groups, GROUP, member))
    await bounded(rejoin)
    assert groups.groups[GROUP].state is GroupState.COMPLETING_REBALANCE
    # between the join and the leader's SyncGroup, no assignment exists yet
    results = await groups.commit(
        GROUP, answer["generation_id"], member, None, offsets((TOPIC, 0, 12))
    )
    assert results == {(TOPIC, 0): ErrorCode.rebalance_in_progress}
    assert visible(groups, GROUP) == {(TOPIC, 0): 11}


async def test_per_partition_errors(broker: Broker) -> None:
    groups = broker.groups
    wanted = {
        (TOPIC, 0): CommittedOffset(1, -1, "", 0),
        (TOPIC, 3): CommittedOffset(1, -1, "", 0),  # the topic has 3 partitions
        ("no-such-topic", 0): CommittedOffset(1, -1, "", 0),
        (TOPIC, 1): CommittedOffset(1, -1, "x" * 4097, 0),  # offset.metadata.max.bytes 4096
        (TOPIC, 2): CommittedOffset(2, 7, "y" * 4096, 0),
    }
    results = await groups.commit(GROUP, -1, "", None, wanted)
    assert results == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 3): ErrorCode.unknown_topic_or_partition,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        (TOPIC, 1): ErrorCode.offset_metadata_too_large,
        (TOPIC, 2): ErrorCode.none,
    }
    assert visible(groups, GROUP) == {(TOPIC, 0): 1, (TOPIC, 2): 2}
    _error, answers = groups.fetch(GROUP, [(TOPIC, 2)], False)
    assert answers[(TOPIC, 2)][0] == CommittedOffset(2, 7, "y" * 4096, 0)


# -- persistence -------------------------------------------------------------------------------


async def test_commits_are_written_in_kafkas_layout(broker: Broker) -> None:
    await broker.groups.commit(GROUP, -1, "", None, offsets((TOPIC, 1, 42)))
    records = offsets_records(broker, GROUP)
    assert (offset_key(GROUP, TOPIC, 1), records[-1][1]) == records[-1]
    value = records[-1][1]
    assert value is not None
    assert decode_key(records[-1][0]) == (GROUP, TOPIC, 1)
    assert decode_offset_value(value) == CommittedOffset(42, -1, "at 42", 1_000)


async def test_commits_and_generations_survive_a_restart(
    broker: Broker, engine: MemoryEngine
) -> None:
    groups = broker.groups
    generation, (leader, follower) = await stable_group(groups, GROUP, 2)
    await groups.commit(GROUP, generation, leader, None, offsets((TOPIC, 0, 10), (TOPIC, 1, 20)))
    await groups.commit(GROUP, generation, follower, None, offsets((TOPIC, 2, 30)))
    await groups.commit(GROUP, generation, follower, None, offsets((TOPIC, 2, 31)))
    await groups.commit("standalone", -1, "", None, offsets((OTHER_TOPIC, 0, 5)))
    # the group record of the generation (written at the leader's SyncGroup) is in the log
    group_records = [
        decode_group_value(v)
        for k, v in offsets_records(broker, GROUP)
        if decode_key(k) == GROUP
        if v is not None
    ]
    assert group_records[-1].generation == generation
    assert {m.member_id: m.assignment for m in group_records[-1].members} == {
        leader: leader.encode(),
        follower: follower.encode(),
    }
    broker = await restart(broker, engine)
    try:
        groups = broker.groups
        assert visible(groups, GROUP) == {(TOPIC, 0): 10, (TOPIC, 1): 20, (TOPIC, 2): 31}
        assert visible(groups, "standalone") == {(OTHER_TOPIC, 0): 5}
        group = groups.groups[GROUP]
        assert group.state is GroupState.STABLE
        assert group.generation == generation and group.leader == leader
        assert {m.member_id: m.assignment for m in group.members.values()} == {
            leader: leader.encode(),
            follower: follower.encode(),
        }
        # the members carry on after the restart as if nothing happened
        assert groups.heartbeat(GROUP, generation, follower, None) == ErrorCode.none
        results = await groups.commit(GROUP, generation, follower, None, offsets((TOPIC, 2, 32)))
        assert results == {(TOPIC, 2): ErrorCode.none}
    finally:
        await broker.stop()


# -- DeleteGroups and OffsetDelete ------------------------------------------------------------


async def test_delete_groups(broker: Broker, engine: MemoryEngine) -> None:
    groups = broker.groups
    assert await groups.delete_group("never-seen") == ErrorCode.group_id_not_found
    generation, (member,) = await stable_group(groups, GROUP, 1)
    await groups.commit(GROUP, generation, member, None, offsets((TOPIC, 0, 3)))
    assert await groups.delete_group(GROUP) == ErrorCode.non_empty_group
    assert visible(groups, GROUP) == {(TOPIC, 0): 3}
    groups.leave(GROUP, [(member, None)])
    await groups.commit("other", -1, "", None, offsets((TOPIC, 0, 4)))
    for _ in range(100):  # the group empties through a (quick) rebalance
        if groups.groups[GROUP].state is GroupState.EMPTY:
            break
        await asyncio.sleep(0.01)
    assert await groups.delete_group(GROUP) == ErrorCode.none
    assert GROUP not in groups.groups and visible(groups, GROUP) == {}
    assert await groups.delete_group(GROUP) == ErrorCode.group_id_not_found
    tombstones = [decode_key(k) for k, v in offsets_records(broker, GROUP)[-2:] if v is None]
    assert tombstones == [(GROUP, TOPIC, 0), GROUP]
    broker = await restart(broker, engine)
    try:
        assert GROUP not in broker.groups.groups
        assert visible(broker.groups, GROUP) == {}
        assert visible(broker.groups, "other") == {(TOPIC, 0): 4}
        # the id can be used again; only the new offsets exist
        await broker.groups.commit(GROUP, -1, "", None, offsets((TOPIC, 1, 1)))
        assert visible(broker.groups, GROUP) == {(TOPIC, 1): 1}
    finally:
        await broker.stop()


def consumer_subscription(*topics: str) -> bytes:
    """A consumer-protocol Subscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


async def test_offset_delete(broker: Broker, engine: MemoryEngine) -> None:
    groups = broker.groups
    assert (await groups.delete_offsets("never-seen", [(TOPIC, 0)]))[0] == (
        ErrorCode.group_id_not_found
    )
    member = await new_member_id(groups, GROUP)
    answer = await bounded(
        join(groups, GROUP, member, protocols=[("range", consumer_subscription(TOPIC))])
    )
    generation = answer["generation_id"]
    await bounded(sync(groups, GROUP, generation, member))
    committed = offsets((TOPIC, 0, 1), (OTHER_TOPIC, 0, 2), (OTHER_TOPIC, 1, 3))
    await groups.commit(GROUP, generation, member, None, committed)
    error, results = await groups.delete_offsets(GROUP, [(TOPIC, 0), (OTHER_TOPIC, 0)])
    assert error == ErrorCode.none
    assert results == {
        (TOPIC, 0): ErrorCode.group_subscribed_to_topic,
        (OTHER_TOPIC, 0): ErrorCode.none,
    }
    assert visible(groups, GROUP) == {(TOPIC, 0): 1, (OTHER_TOPIC, 1): 3}
    broker = await restart(broker, engine)
    try:
        assert visible(broker.groups, GROUP) == {(TOPIC, 0): 1, (OTHER_TOPIC, 1): 3}
    finally:
        await broker.stop()


# -- damaged records ---------------------------------------------------------------------------


async def test_replay_skips_damaged_records(broker: Broker, engine: MemoryEngine) -> None:
    groups = broker.groups
    await groups.commit(GROUP, -1, "", None, offsets((TOPIC, 0, 1)))
    partition = broker.topics.get(CONSUMER_OFFSETS_TOPIC, groups.offsets_partition(GROUP))
    assert partition is not None
    good_value = [v for _k, v in offsets_records(broker, GROUP)][-1]
    assert good_value is not None
    damaged = build_batch(
        [
            (offset_key(GROUP, TOPIC, 1), good_value[:9]),  # value cut short
            (offset_key(GROUP, TOPIC, 2)[:-2], good_value),  # key cut short
            (struct.pack(">h", 7) + b"future", b"?"),  # a key version from the future
            (offset_key(GROUP, TOPIC, 2), good_value),  # fine
        ],
        timestamp_ms=1,
    )
    partition.append(bytearray(damaged), validate_produced_batch(damaged), 1)
    broker.group_commit.appended(partition)
    broker = await restart(broker, engine)
    try:
        assert visible(broker.groups, GROUP) == {(TOPIC, 0): 1, (TOPIC, 2): 1}
    finally:
        await broker.stop()


async def test_offset_keys_in_other_forms_are_held_as_lockgates(
    broker: Broker, engine: MemoryEngine
) -> None:
    """A record whose key is not the one lockgate writes for its partition (version 0, as
    older Kafka wrote; a null topic name; bytes after the partition) is held under lockgate's
    key, so that the partition has one offset whatever form its records took: the latest."""
    groups = broker.groups
    await groups.commit(GROUP, -1, "", None, offsets((TOPIC, 0, 1)))
    partition = broker.topics.get(CONSUMER_OFFSETS_TOPIC, groups.offsets_partition(GROUP))
    assert partition is not None

    def value(offset: int) -> bytes:
        return offset_value(CommittedOffset(offset, -1, "", 1))

    def key(version: int, topic: bytes, partition: int, after: bytes = b"") -> bytes:
        name = struct.pack(">h", len(GROUP)) + GROUP.encode()
        return struct.pack(">h", version) + name + topic + struct.pack(">i", partition) + after

    topic = struct.pack(">h", len(TOPIC)) + TOPIC.encode()
    records: list[tuple[bytes | None, bytes | None]] = [
        (key(0, topic, 0), value(5)),  # version 0 of (TOPIC, 0): the latest so far
        (key(1, topic, 1, b"\x00"), value(6)),  # a byte after the partition
        (key(1, struct.pack(">h", -1), 2), value(7)),  # a null topic: ""
        (key(0, topic, 3), value(8)),
        (offset_key(GROUP, TOPIC, 3), value(9)),  # then lockgate's own: the latest
    ]
    batch = build_batch(records, timestamp_ms=1)
    partition.append(bytearray(batch), validate_produced_batch(batch), 1)
    broker.group_commit.appended(partition)
    broker = await restart(broker, engine)
    try:
        expected = {(TOPIC, 0): 5, (TOPIC, 1): 6, ("", 2): 7, (TOPIC, 3): 9}
        assert visible(broker.groups, GROUP) == expected
        held = broker.groups.groups[GROUP].offsets.records
        assert sorted(held) == sorted(offset_key(GROUP, *tp) for tp in expected)
    finally:
        await broker.stop()


async def test_a_group_tombstone_within_a_batch_of_its_offsets_leaves_them(
    broker: Broker, engine: MemoryEngine
) -> None:
    """Replayed from the log, a group's tombstone between its offset commits in one batch ends
    the classic group, not its offsets: as in Kafka, whose offsets are records of their own,
    and as a snapshot (each key's latest record) replays them."""
    groups = broker.groups
    await groups.commit(GROUP, -1, "", None, offsets((TOPIC, 0, 1)))
    partition = broker.topics.get(CONSUMER_OFFSETS_TOPIC, groups.offsets_partition(GROUP))
    assert partition is not None

    def value(offset: int) -> bytes:
        return offset_value(CommittedOffset(offset, -1, "", 1))

    records: list[tuple[bytes | None, bytes | None]] = [
        (offset_key(GROUP, TOPIC, 1), value(5)),
        (group_key(GROUP), None),  # the group goes, its offsets stay
        (offset_key(GROUP, TOPIC, 2), value(6)),
    ]
    batch = build_batch(records, timestamp_ms=1)
    partition.append(bytearray(batch), validate_produced_batch(batch), 1)
    broker.group_commit.appended(partition)
    await broker.stop()
    for path in [p for p in engine.files if p.endswith(".coordinator")]:
        del engine.files[path]  # (the log, not the snapshot written at the stop)
    broker = await start_broker(engine)
    try:
        assert broker.groups.runtime.replayed_batches > 0
        assert visible(broker.groups, GROUP) == {(TOPIC, 0): 1, (TOPIC, 1): 5, (TOPIC, 2): 6}
    finally:
        await broker.stop()


# -- a load's offset commits a run at a time --------------------------------------------------


def mixed_history(seed: int) -> list[bytes]:
    """Batches of a __consumer_offsets partition as a long life may leave them: offset commits
    of a few groups with tombstones, group metadata and its deletions between them, keys in
    other forms, damaged and keyless records, transactional commits committed, aborted and
    left open."""
    chance = random.Random(seed)
    names = ["g0", "g1", "grüß", ""]

    def record() -> tuple[bytes | None, bytes | None]:
        group = chance.choice(names)
        key = offset_key(group, chance.choice([TOPIC, OTHER_TOPIC]), chance.randrange(3))
        value = offset_value(CommittedOffset(chance.randrange(100), -1, "m", 1))
        kind = chance.randrange(20)
        if kind < 10:
            return key, value
        if kind < 12:
            return key, None
        if kind == 12:
            metadata = GroupRecord("consumer", chance.randrange(5), "range", None, 1, ())
            return group_key(group), group_value(metadata)
        if kind == 13:
            return group_key(group), None
        if kind == 14:
            return b"\x00\x00" + key[2:], value  # key version 0: held in lockgate's form
        if kind == 15:
            return key + b"\x00", value  # bytes after the partition: likewise
        if kind == 16:
            return key[: chance.randrange(len(key))], value  # damaged: skipped
        if kind == 17:
            return key, value[: chance.randrange(len(value))]
        if kind == 18:
            return None, value
        return struct.pack(">h", 9) + b"future", b"?"

    batches = []
    for _ in range(30):
        records = [record() for _ in range(chance.randrange(1, 12))]
        producer = chance.choice([0, 0, 0, 7, 8])
        if not producer:
            batches.append(build_batch(records, timestamp_ms=1))
            continue
        transactional = build_batch(
            records, timestamp_ms=1, attributes=TRANSACTIONAL_BIT, producer_id=producer,
            producer_epoch=0,
        )  # fmt: skip
        batches.append(transactional)
        if chance.randrange(3):  # else left open (maybe ended by a later marker)
            batches.append(build_control_batch(producer, 0, chance.randrange(2) == 0, 0, 1))
    return batches


def replayed(broker: Broker, batches: list[bytes]) -> Any:
    """A fresh group coordinator's state after a load of `batches`."""
    coordinator = GroupCoordinator(
        broker.config, broker.topics, write=lambda _partition, _batch: asyncio.Future(),
        clock=lambda: 1, on_loaded=lambda _seconds: None, snapshots=None, timers=LoopTimers(),
    )  # fmt: skip
    replay = coordinator.replay(0)
    for data in batches:
        header = parse_header(data)
        replay.visit(header, data, [] if header.is_control else iter_records(data))
    loaded = replay.loaded()
    groups = [
        (name, group.protocol_type, group.generation, list(group.offsets.records.items()))
        for name, group in coordinator.groups.items()
    ]
    return loaded, groups, coordinator.offsets.pending


@pytest.mark.parametrize("seed", range(12))
async def test_a_load_a_run_of_commits_at_a_time_is_a_replay_record_by_record(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The offset commits of a batch are checked and moved in by one call (compiled, or its
    pure twin); whatever the mix of records around them, the state after a load is the one a
    replay record by record gives (a walk that applies none: every record through _replay)."""
    batches = mixed_history(seed)
    outcomes = []
    walks = [lambda _records, index, _groups: index, fastpath.load(pure=True).apply_offset_commits]
    walks.append(fastpath.load(pure=False).apply_offset_commits)
    for walk in walks:
        monkeypatch.setattr(service, "apply_offset_commits", walk)
        outcomes.append(replayed(broker, batches))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    assert outcomes[0][1], "the history leaves some groups"
