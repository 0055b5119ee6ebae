"""The consumer group protocol (KIP-848) in the group coordinator of an in-process broker: records
in Kafka's layout and their replay (also after a restart), session expiry, offsets with member
epochs (OffsetCommit, OffsetFetch, TxnOffsetCommit), and its coexistence with classic groups."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from lockgate.coordinator.group import consumer_records
from lockgate.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerMember,
    ConsumerRecord,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberState,
    RecordKind,
    heartbeat,
    replay,
)
from lockgate.coordinator.group.records import CommittedOffset
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.coordinator.group.support import PROTOCOLS, TOPIC, start_broker, wait_until

GROUP = "kip848"
FAST = {
    "group.consumer.min.session.timeout.ms": "200",
    "group.consumer.session.timeout.ms": "400",
    "group.consumer.min.heartbeat.interval.ms": "50",
    "group.consumer.heartbeat.interval.ms": "100",
}


@pytest.fixture
async def broker(engine: MemoryEngine) -> AsyncIterator[Broker]:
    instance = await start_broker(engine, **FAST)
    try:
        yield instance
    finally:
        await instance.stop()


async def beat(
    broker: Broker, member: str, epoch: int, owned: dict[str, frozenset[int]] | None = None,
    *, join: bool = False, group: str = GROUP, instance: str | None = None,
) -> HeartbeatResponse:  # fmt: skip
    request = HeartbeatRequest(
        group, member, epoch, instance_id=instance,
        rebalance_timeout_ms=5000 if join else -1,
        subscribed_topic_names=(TOPIC,) if join else None,
        owned={} if join else owned,
    )  # fmt: skip
    return await broker.groups.consumer.heartbeat(request)


def one(code: dict[tuple[str, int], ErrorCode]) -> ErrorCode:
    assert len(set(code.values())) == 1, code
    return next(iter(code.values()))


# -- records ---------------------------------------------------------------------------------


def test_records_round_trip_in_kafkas_layout() -> None:
    topic_id = uuid.uuid4()
    ids, names = {"t": topic_id}, {topic_id: "t"}
    member = ConsumerMember(
        "m1", "i1", "rack", "client", "host", member_epoch=4, previous_member_epoch=3,
        state=MemberState.UNREVOKED_PARTITIONS, rebalance_timeout_ms=9000,
        subscribed_topic_names=("t",), subscribed_topic_regex="x.*", server_assignor="range",
        assigned={"t": frozenset({0, 2})}, pending_revocation={"t": frozenset({1})},
    )  # fmt: skip
    for record in (
        ConsumerRecord(RecordKind.GROUP_EPOCH, "g", None, 7),
        ConsumerRecord(RecordKind.TARGET_EPOCH, "g", None, 7),
        ConsumerRecord(RecordKind.PARTITION_METADATA, "g", None, {"t": 3}),
        ConsumerRecord(RecordKind.TARGET_MEMBER, "g", "m1", {"t": frozenset({0, 2})}),
        ConsumerRecord(RecordKind.MEMBER, "g", "m1", None),
    ):
        key, value = consumer_records.encode(record, ids)
        assert consumer_records.decode(key, value, names) == record
    key, value = consumer_records.encode(ConsumerRecord(RecordKind.MEMBER, "g", "m1", member), ids)
    assert key == struct.pack(">hh", 5, 1) + b"g" + struct.pack(">h", 2) + b"m1"
    assert value is not None and value[:2] == b"\x00\x00"  # value version 0, flexible
    decoded = consumer_records.decode(key, value, names).value
    assert isinstance(decoded, ConsumerMember)
    assert decoded.subscribed_topic_regex == "x.*" and decoded.rebalance_timeout_ms == 9000
    record = ConsumerRecord(RecordKind.CURRENT_ASSIGNMENT, "g", "m1", member)
    key, value = consumer_records.encode(record, ids)
    decoded = consumer_records.decode(key, value, names).value
    assert isinstance(decoded, ConsumerMember)
    assert (decoded.member_epoch, decoded.previous_member_epoch, decoded.state) == (
        4, 3, MemberState.UNREVOKED_PARTITIONS,
    )  # fmt: skip
    assert decoded.pending_revocation == {"t": frozenset({1})}
    # a topic deleted since is left out when read back
    forgotten = consumer_records.decode(key, value, {}).value
    assert isinstance(forgotten, ConsumerMember) and forgotten.assigned == {}
    assert value is not None
    with pytest.raises(ValueError):
        consumer_records.decode(key, value[:7], names)


def test_replaying_the_records_rebuilds_the_group() -> None:
    config = ConsumerGroupConfig()
    topics = {"t": 5}
    group: ConsumerGroup | None = None
    records: list[ConsumerRecord] = []
    for member, epoch, owned in (
        ("m1", 0, {}), ("m2", 0, {}), ("m1", 2, {"t": frozenset(range(5))}), ("m2", 3, {}),
        ("m3", 0, {}), ("m2", -1, None),
    ):  # fmt: skip
        request = HeartbeatRequest(
            "g", member, epoch, rebalance_timeout_ms=100 if epoch == 0 else -1,
            subscribed_topic_names=("t",) if epoch == 0 else None, owned=owned,
        )  # fmt: skip
        outcome = heartbeat(group, request, topics, config, 0)
        assert outcome.response.error == ErrorCode.none, outcome.response
        group = outcome.group or group
        records += outcome.records
    assert group is not None
    rebuilt: ConsumerGroup | None = None
    for record in records:
        rebuilt = replay(rebuilt, record)
    assert rebuilt is not None

    def comparable(g: ConsumerGroup) -> object:
        members = {m: replace(v, revocation_deadline_ms=-1) for m, v in g.members.items()}
        return (g.group_epoch, g.assignment_epoch, members, g.target, g.partition_counts)

    assert comparable(rebuilt) == comparable(group)
    assert replay(rebuilt, ConsumerRecord(RecordKind.GROUP_EPOCH, "g", None, None)) is None


# -- the coordinator ---------------------------------------------------------------------------


async def test_group_survives_a_restart(broker: Broker, engine: MemoryEngine) -> None:
    first = await beat(broker, "m1", 0, join=True)
    second = await beat(broker, "m2", 0, join=True)
    assert first.member_epoch == 2 and second.member_epoch == 3
    before = broker.groups.groups[GROUP].consumer
    await broker.stop()
    broker = await start_broker(engine, **FAST)
    try:
        after = broker.groups.groups[GROUP].consumer
        assert after is not None and before is not None
        assert (after.group_epoch, after.assignment_epoch, after.target) == (
            before.group_epoch, before.assignment_epoch, before.target,
        )  # fmt: skip
        assert after.members["m1"].assigned == before.members["m1"].assigned
        # the members carry on with their epochs
        answer = await beat(broker, "m1", 2, dict(before.members["m1"].assigned))
        assert answer.error == ErrorCode.none
    finally:
        await broker.stop()


async def test_a_restart_rearms_the_revocation_timeout(engine: MemoryEngine) -> None:
    """The revocation deadline is not in the records: after a restart a member still revoking
    gets its full rebalance timeout again from the load (as Kafka 4.4) and is fenced when it
    passes, long before its session would end."""
    settings = {**FAST, "group.consumer.max.session.timeout.ms": "60000",
                "group.consumer.session.timeout.ms": "30000"}  # fmt: skip
    broker = await start_broker(engine, **settings)
    try:
        for member in ("m1", "m2"):
            request = HeartbeatRequest(
                GROUP, member, 0, rebalance_timeout_ms=300, subscribed_topic_names=(TOPIC,),
                owned={},
            )  # fmt: skip
            assert (await broker.groups.consumer.heartbeat(request)).error == ErrorCode.none
        container = broker.groups.groups[GROUP]
        assert container.consumer is not None
        everything = dict(container.consumer.members["m1"].assigned)
        await beat(broker, "m1", 2, everything)
        assert container.consumer.members["m1"].state == MemberState.UNREVOKED_PARTITIONS
    finally:
        await broker.stop()
    broker = await start_broker(engine, **settings)
    try:
        restored = broker.groups.groups[GROUP].consumer
        assert restored is not None
        assert restored.members["m1"].state == MemberState.UNREVOKED_PARTITIONS
        assert restored.members["m1"].revocation_deadline_ms > 0
        assert (GROUP, "m1") in broker.groups.consumer.revocations
        assert (GROUP, "m2") not in broker.groups.consumer.revocations

        def fenced() -> bool:
            group = broker.groups.groups[GROUP].consumer
            return group is not None and "m1" not in group.members

        await wait_until(fenced, timeout=5)
        assert broker.groups.consumer.sessions_expired == 0
        group = broker.groups.groups[GROUP].consumer
        assert group is not None and set(group.members) == {"m2"}
    finally:
        await broker.stop()


async def test_session_expiry_removes_the_member(broker: Broker) -> None:
    await beat(broker, "m1", 0, join=True)
    await beat(broker, "m2", 0, join=True)
    await wait_until(lambda: broker.groups.consumer.sessions_expired >= 2, timeout=3)
    group = broker.groups.groups[GROUP].consumer
    assert group is not None and not group.members and group.group_epoch == 5


async def test_a_static_member_leaving_while_revoking_is_not_timed_out(broker: Broker) -> None:
    """Its pending partitions go to the member waiting for them and no revocation timer is
    left for it (its deadline is gone; one armed anyway would fire and rearm at once)."""
    await beat(broker, "m1", 0, join=True, instance="i1")
    await beat(broker, "m2", 0, join=True)
    container = broker.groups.groups[GROUP]
    assert container.consumer is not None
    everything = dict(container.consumer.members["m1"].assigned)
    await beat(broker, "m1", 2, everything, instance="i1")
    assert container.consumer is not None
    pending = container.consumer.members["m1"].pending_revocation
    assert pending and (GROUP, "m1") in broker.groups.consumer.revocations
    assert (await beat(broker, "m1", -2, instance="i1")).member_epoch == -2
    assert (GROUP, "m1") not in broker.groups.consumer.revocations
    assert (await beat(broker, "m2", 3, {})).assignment == pending


async def test_offsets_with_member_epochs(broker: Broker) -> None:
    answer = await beat(broker, "m1", 0, join=True)
    offset = {(TOPIC, 0): CommittedOffset(5, -1, "", 0)}
    commit = broker.groups.commit
    assert one(await commit(GROUP, answer.member_epoch, "m1", None, offset)) == ErrorCode.none
    assert one(await commit(GROUP, 8, "m1", None, offset)) == ErrorCode.stale_member_epoch
    assert one(await commit(GROUP, 2, "nobody", None, offset)) == ErrorCode.unknown_member_id
    assert one(await commit(GROUP, -1, "", None, offset)) == ErrorCode.unknown_member_id
    assert one(await commit(GROUP, 2, "m1", None, offset, 8)) == ErrorCode.unsupported_version
    fetch = broker.groups.fetch
    assert fetch(GROUP, None, False, "m1", 2)[0] == ErrorCode.none
    assert fetch(GROUP, None, False, "m1", 4)[0] == ErrorCode.stale_member_epoch
    assert fetch(GROUP, None, False, "zz", 2)[0] == ErrorCode.unknown_member_id
    error, found = fetch(GROUP, None, False)  # the admin client
    assert error == ErrorCode.none and found[(TOPIC, 0)][0] == offset[(TOPIC, 0)]
    txn = broker.groups.txn_commit
    assert one(await txn(GROUP, 9, 0, 5, "m1", None, offset)) == ErrorCode.illegal_generation
    assert one(await txn(GROUP, 9, 0, 2, "zz", None, offset)) == ErrorCode.unknown_member_id
    assert await broker.groups.delete_group(GROUP) == ErrorCode.non_empty_group
    await beat(broker, "m1", -1)
    # an empty group takes the admin's commits and can be deleted
    assert one(await commit(GROUP, -1, "", None, offset)) == ErrorCode.none
    assert await broker.groups.delete_group(GROUP) == ErrorCode.none
    assert GROUP not in broker.groups.groups
    # the member, or a consumer whose group expired, commits with its epoch: as Kafka 4.4,
    # GROUP_ID_NOT_FOUND (OffsetCommit v9+), so it rejoins; -1 creates the group again
    assert one(await commit(GROUP, 2, "m1", None, offset, 10)) == ErrorCode.group_id_not_found
    assert one(await commit(GROUP, -1, "m1", None, offset, 10)) == ErrorCode.none
    assert broker.groups.groups[GROUP].consumer is None


async def test_groups_change_protocol_when_empty_or_convertible(broker: Broker) -> None:
    await beat(broker, "m1", 0, join=True)
    # a classic member whose metadata is no consumer protocol subscription cannot be assigned
    answer = await broker.groups.join(
        GROUP, "", None, "consumer", PROTOCOLS, 6000, 6000, "c", "h", False
    )
    assert answer["error_code"] == ErrorCode.inconsistent_group_protocol
    await beat(broker, "m1", -1)
    # empty: a classic member converts it back, keeping its offsets
    answer = await broker.groups.join(
        GROUP, "", None, "consumer", PROTOCOLS, 6000, 6000, "c", "h", False
    )
    assert answer["error_code"] == ErrorCode.none
    assert broker.groups.groups[GROUP].consumer is None
    # a classic group with members that cannot be converted (its metadata again)
    refused = await beat(broker, "m2", 0, join=True)
    assert refused.error == ErrorCode.group_id_not_found


async def test_offset_delete_refuses_subscribed_topics(broker: Broker) -> None:
    answer = await beat(broker, "m1", 0, join=True)
    offset = {
        (TOPIC, 0): CommittedOffset(5, -1, "", 0),
        ("other", 0): CommittedOffset(1, -1, "", 0),
    }
    broker.topics.create("other", 1, 1, {})
    await broker.groups.commit(GROUP, answer.member_epoch, "m1", None, offset)
    error, results = await broker.groups.delete_offsets(GROUP, [(TOPIC, 0), ("other", 0)])
    assert error == ErrorCode.none
    assert results == {(TOPIC, 0): ErrorCode.group_subscribed_to_topic, ("other", 0): 0}


async def test_assignors_may_be_configured_by_kafkas_class_names(engine: MemoryEngine) -> None:
    names = "org.apache.kafka.coordinator.group.assignor.RangeAssignor,uniform"
    broker = await start_broker(engine, **{"group.consumer.assignors": names})
    try:
        assert broker.groups.consumer.config.assignors == ("range", "uniform")
    finally:
        await broker.stop()


async def test_a_groups_own_timeouts_apply_from_its_next_heartbeat(broker: Broker) -> None:
    """consumer.heartbeat.interval.ms and consumer.session.timeout.ms set on the group (its
    group configs) win over the broker's for that group alone, as in Kafka 4.4."""
    configs = broker.group_configs
    await configs.alter("patient", changes=[("consumer.session.timeout.ms", 0, "30000")])
    assert (await beat(broker, "m1", 0, join=True)).heartbeat_interval_ms == 100
    patient = await beat(broker, "p1", 0, join=True, group="patient")
    assert patient.heartbeat_interval_ms == 100  # the broker's: only the session is the group's
    await configs.alter("patient", changes=[("consumer.heartbeat.interval.ms", 0, "250")])
    again = await beat(broker, "p1", patient.member_epoch, {}, group="patient")
    assert again.error == ErrorCode.none and again.heartbeat_interval_ms == 250
    last_beat = time.monotonic()
    # the broker's 400 ms session ends m1's; p1's lasts the group's 30 s, so it is still
    # there well past 400 ms after its last heartbeat
    await wait_until(lambda: broker.groups.consumer.sessions_expired >= 1, timeout=3)
    await asyncio.sleep(max(0.0, last_beat + 1.0 - time.monotonic()))
    group = broker.groups.groups[GROUP].consumer
    assert group is not None and not group.members
    patient_group = broker.groups.groups["patient"].consumer
    assert patient_group is not None and set(patient_group.members) == {"p1"}
    assert broker.groups.consumer.sessions_expired == 1
