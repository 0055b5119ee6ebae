"""Mixed groups (Kafka 4's online migration): a stable classic group becomes a consumer-protocol
group when a consumer-protocol member joins, classic members (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) take part in a consumer-protocol group, assigned by the server-side assignor and
told to rejoin (REBALANCE_IN_PROGRESS) when their assignment changes, and a group left with
classic members only becomes a classic group again."""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

from lockgate.coordinator.group import consumer_records
from lockgate.coordinator.group.assignors import Assignment
from lockgate.coordinator.group.consumer_group import (
    ClassicMember,
    ConsumerMember,
    ConsumerRecord,
    HeartbeatRequest,
    HeartbeatResponse,
    RecordKind,
)
from lockgate.coordinator.group.embedded import assignment_bytes, parse_assignment
from lockgate.coordinator.group.records import CommittedOffset
from lockgate.coordinator.group.state import GroupState
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.coordinator.group.support import TOPIC, bounded, start_broker, wait_until

GROUP = "mixed"
ALL = frozenset(range(3))


def subscription(owned: Assignment | None = None) -> bytes:
    """A ConsumerProtocolSubscription of TOPIC (v1 with owned partitions when given)."""
    out = struct.pack(">hih", 1 if owned is not None else 0, 1, len(TOPIC)) + TOPIC.encode()
    out += struct.pack(">i", -1)
    if owned is not None:
        out += struct.pack(">i", len(owned))
        for topic, parts in owned.items():
            out += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", len(parts))
            out += b"".join(struct.pack(">i", p) for p in sorted(parts))
    return out


async def classic_join(
    broker: Broker, member_id: str, owned: Assignment | None = None
) -> dict[str, object]:
    protocols = [("cooperative-sticky", subscription(owned))]
    return await bounded(
        broker.groups.join(
            GROUP, member_id, None, "consumer", protocols, 6000, 6000, "c", "h", False
        )
    )


async def consumer_join(broker: Broker, member_id: str) -> HeartbeatResponse:
    return await broker.groups.consumer.heartbeat(
        HeartbeatRequest(
            GROUP,
            member_id,
            0,
            rebalance_timeout_ms=5000,
            subscribed_topic_names=(TOPIC,),
            owned={},
        )
    )


async def stable_classic_group(broker: Broker) -> tuple[str, int]:
    """One classic member owning every partition of TOPIC: (member id, generation)."""
    joined = await classic_join(broker, "")
    member_id = str(joined["member_id"])
    assert joined["error_code"] == 0 and joined["leader"] == member_id
    generation = int(str(joined["generation_id"]))
    synced = await bounded(broker.groups.sync(
        GROUP, generation, member_id, None, "consumer", "cooperative-sticky",
        {member_id: assignment_bytes({TOPIC: ALL})},
    ))  # fmt: skip
    assert synced["error_code"] == 0
    return member_id, generation


async def test_a_classic_group_is_upgraded_and_reconciled(broker: Broker) -> None:
    classic, generation = await stable_classic_group(broker)
    answer = await consumer_join(broker, "new")
    group = broker.groups.groups[GROUP]
    assert group.consumer is not None and not group.members  # converted
    member = group.consumer.members[classic]
    assert member.classic is not None and member.assigned == {TOPIC: ALL}
    assert member.member_epoch == generation
    # the newcomer waits for the partitions the classic member still holds
    assert answer.error == ErrorCode.none and answer.assignment == {}
    # the classic member is told to rejoin, and reports what it still owns (cooperative)
    heartbeat = broker.groups.heartbeat
    assert heartbeat(GROUP, generation, classic, None) == ErrorCode.rebalance_in_progress
    target = group.consumer.target[classic]
    rejoined = await classic_join(broker, classic, owned={TOPIC: ALL})
    assert rejoined["error_code"] == 0 and rejoined["members"] == []
    # still holding partitions to revoke: it keeps its epoch and gets only what it keeps
    assert rejoined["generation_id"] == generation
    synced = await bounded(broker.groups.sync(GROUP, generation, classic, None, None, None, {}))
    assert parse_assignment(synced["assignment"]) == target
    assert heartbeat(GROUP, generation, classic, None) == ErrorCode.rebalance_in_progress
    rejoined = await classic_join(broker, classic, owned=dict(target))
    new_generation = rejoined["generation_id"]
    assert new_generation == group.consumer.assignment_epoch
    assert heartbeat(GROUP, new_generation, classic, None) == ErrorCode.none
    assert heartbeat(GROUP, generation, classic, None) == ErrorCode.illegal_generation
    # the newcomer gets the released partitions
    answer = await broker.groups.consumer.heartbeat(
        HeartbeatRequest(GROUP, "new", answer.member_epoch, owned={})
    )
    assert answer.assignment is not None
    assert answer.assignment[TOPIC] | target[TOPIC] == ALL
    assert not answer.assignment[TOPIC] & target[TOPIC]


async def test_a_classic_member_joins_a_consumer_group(broker: Broker) -> None:
    first = await consumer_join(broker, "c1")
    assert first.assignment == {TOPIC: ALL}
    joined = await classic_join(broker, "")  # (JoinGroup v4+: an id first)
    assert joined["error_code"] == ErrorCode.none  # require_known_member_id is False here
    member_id = str(joined["member_id"])
    generation = int(str(joined["generation_id"]))
    synced = await bounded(broker.groups.sync(GROUP, generation, member_id, None, None, None, {}))
    assert synced["error_code"] == 0 and parse_assignment(synced["assignment"]) == {}
    wrong = await bounded(
        broker.groups.sync(GROUP, generation + 5, member_id, None, None, None, {})
    )
    assert wrong["error_code"] == ErrorCode.illegal_generation
    unknown = await bounded(broker.groups.sync(GROUP, generation, "who", None, None, None, {}))
    assert unknown["error_code"] == ErrorCode.unknown_member_id
    # c1 revokes what the classic member is to get; the classic member rejoins and gets it
    revoked = await broker.groups.consumer.heartbeat(
        HeartbeatRequest(GROUP, "c1", first.member_epoch, owned={TOPIC: ALL})
    )
    kept = revoked.assignment
    assert kept is not None
    await broker.groups.consumer.heartbeat(
        HeartbeatRequest(GROUP, "c1", first.member_epoch, owned=dict(kept))
    )
    rejoined = await classic_join(broker, member_id, owned={})
    generation = int(str(rejoined["generation_id"]))
    synced = await bounded(broker.groups.sync(GROUP, generation, member_id, None, None, None, {}))
    assert parse_assignment(synced["assignment"])[TOPIC] == ALL - kept[TOPIC]
    assert broker.groups.heartbeat(GROUP, generation, member_id, None) == ErrorCode.none
    # it commits as a classic member: any OffsetCommit version, ILLEGAL_GENERATION when stale
    offset = {(TOPIC, 0): CommittedOffset(3, -1, "", 0)}
    commit = broker.groups.commit
    assert set((await commit(GROUP, generation, member_id, None, offset, 7)).values()) == {
        ErrorCode.none
    }
    assert set((await commit(GROUP, generation - 1, member_id, None, offset, 7)).values()) == {
        ErrorCode.illegal_generation
    }
    # LeaveGroup removes it and its partitions go back to c1
    error, answers = broker.groups.leave(GROUP, [(member_id, None)])
    assert error == ErrorCode.none and answers[0]["error_code"] == 0
    assert member_id not in broker.groups.groups[GROUP].consumer.members  # type: ignore[union-attr]


async def test_an_upgraded_group_survives_a_restart(broker: Broker, engine: MemoryEngine) -> None:
    classic, _generation = await stable_classic_group(broker)
    await consumer_join(broker, "new")
    await broker.stop()
    broker = await start_broker(engine)
    try:
        group = broker.groups.groups[GROUP]
        assert group.consumer is not None and not group.members
        member = group.consumer.members[classic]
        assert member.classic is not None and member.classic.session_timeout_ms == 6000
        assert member.classic.protocols[0][0] == "cooperative-sticky"
        assert set(group.consumer.members) == {classic, "new"}
    finally:
        await broker.stop()


async def test_migration_policy_disabled_keeps_classic_groups(engine: MemoryEngine) -> None:
    broker = await start_broker(engine, **{"group.consumer.migration.policy": "disabled"})
    try:
        await stable_classic_group(broker)
        answer = await consumer_join(broker, "new")
        assert answer.error == ErrorCode.group_id_not_found
        assert broker.groups.groups[GROUP].consumer is None
    finally:
        await broker.stop()


def test_classic_member_metadata_round_trips() -> None:
    member = ConsumerMember(
        "m", subscribed_topic_names=("t",), rebalance_timeout_ms=100,
        classic=ClassicMember(6000, (("range", b"\x00\x01"), ("roundrobin", b""))),
    )  # fmt: skip
    record = ConsumerRecord(RecordKind.MEMBER, "g", "m", member)
    key, value = consumer_records.encode(record, {"t": uuid.uuid4()})
    decoded = consumer_records.decode(key, value, {}).value
    assert isinstance(decoded, ConsumerMember) and decoded.classic == member.classic


async def test_a_group_left_with_classic_members_only_is_downgraded(
    broker: Broker, engine: MemoryEngine
) -> None:
    classic, _ = await stable_classic_group(broker)
    joined = await consumer_join(broker, "new")
    epoch = broker.groups.groups[GROUP].consumer.group_epoch  # type: ignore[union-attr]
    left = await broker.groups.consumer.heartbeat(HeartbeatRequest(GROUP, "new", -1))
    assert left.error == ErrorCode.none and joined.error == ErrorCode.none
    group = broker.groups.groups[GROUP]
    assert group.consumer is None and set(group.members) == {classic}
    assert group.state == GroupState.PREPARING_REBALANCE
    assert group.generation == epoch + 1  # the epoch of the departure
    assert broker.groups.heartbeat(GROUP, group.generation, classic, None) == (
        ErrorCode.rebalance_in_progress
    )
    # it rejoins as the leader of a classic group and assigns again
    rejoined = await classic_join(broker, classic)
    assert rejoined["error_code"] == 0 and rejoined["leader"] == classic
    await broker.stop()
    broker = await start_broker(engine)
    try:
        restored = broker.groups.groups[GROUP]
        assert restored.consumer is None and set(restored.members) == {classic}
    finally:
        await broker.stop()


async def test_no_downgrade_with_the_upgrade_policy(engine: MemoryEngine) -> None:
    broker = await start_broker(engine, **{"group.consumer.migration.policy": "upgrade"})
    try:
        classic, _ = await stable_classic_group(broker)
        await consumer_join(broker, "new")
        await broker.groups.consumer.heartbeat(HeartbeatRequest(GROUP, "new", -1))
        group = broker.groups.groups[GROUP].consumer
        assert group is not None and set(group.members) == {classic}
    finally:
        await broker.stop()


async def test_classic_members_must_share_a_protocol(broker: Broker) -> None:
    await consumer_join(broker, "c1")
    assert (await classic_join(broker, ""))["error_code"] == 0  # cooperative-sticky
    other = await bounded(
        broker.groups.join(
            GROUP, "", None, "consumer", [("range", subscription())], 6000, 6000, "c", "h", False
        )
    )
    assert other["error_code"] == ErrorCode.inconsistent_group_protocol


async def test_a_restarted_static_classic_member_replaces_its_old_self(broker: Broker) -> None:
    await consumer_join(broker, "c1")
    protocols = [("cooperative-sticky", subscription())]

    def static_join(member_id: str) -> Any:
        return bounded(broker.groups.join(
            GROUP, member_id, "i1", "consumer", protocols, 6000, 6000, "c", "h", True
        ))  # fmt: skip

    first = await static_join("")
    assert first["error_code"] == 0
    second = await static_join("")  # the process restarted: a new member id, same instance
    assert second["error_code"] == 0 and second["member_id"] != first["member_id"]
    group = broker.groups.groups[GROUP].consumer
    assert group is not None and group.static_members == {"i1": second["member_id"]}
    assert first["member_id"] not in group.members
    old = broker.groups.heartbeat(GROUP, int(first["generation_id"]), first["member_id"], "i1")
    assert old == ErrorCode.fenced_instance_id
    # as Kafka 4.4, an instance id the group does not know is an unknown member, even with the
    # member id of a classic member; LeaveGroup answers with the request's member id
    generation, member_id = int(second["generation_id"]), str(second["member_id"])
    assert broker.groups.heartbeat(GROUP, generation, member_id, "i9") == (
        ErrorCode.unknown_member_id
    )
    synced = await bounded(broker.groups.sync(
        GROUP, generation, member_id, "i9", "consumer", "cooperative-sticky", {}
    ))  # fmt: skip
    assert synced["error_code"] == ErrorCode.unknown_member_id
    assert broker.groups.heartbeat(GROUP, generation, member_id, "i1") in (
        ErrorCode.none, ErrorCode.rebalance_in_progress,
    )  # fmt: skip
    code, answers = broker.groups.leave(GROUP, [("", "i1")])
    assert code == ErrorCode.none
    assert answers == [{"member_id": "", "group_instance_id": "i1", "error_code": 0}]
    group = broker.groups.groups[GROUP].consumer
    assert group is not None and set(group.members) == {"c1"}


async def test_a_rebalancing_classic_group_is_upgraded_too(broker: Broker) -> None:
    classic, generation = await stable_classic_group(broker)
    waiting = asyncio.create_task(classic_join(broker, ""))  # starts a rebalance; waits for A
    await wait_until(lambda: broker.groups.groups[GROUP].state == GroupState.PREPARING_REBALANCE)
    answer = await consumer_join(broker, "new")
    assert answer.error == ErrorCode.none
    assert (await asyncio.wait_for(waiting, 5))["error_code"] == ErrorCode.rebalance_in_progress
    group = broker.groups.groups[GROUP].consumer
    assert group is not None and group.members[classic].assigned == {TOPIC: ALL}
    assert group.members[classic].member_epoch == generation
