"""Share groups at run time on the group coordinator (share_runtime.py): session expiry with the
broker's and a group's own share.session.timeout.ms, the initialize step when the persister
fails (the partitions leave the initializing state and the next heartbeat asks again), and a
share group's records replayed by a restart."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.coordinator.group.records import CommittedOffset
from lockgate.coordinator.group.share_group import (
    ShareGroup,
    ShareHeartbeatRequest,
    ShareHeartbeatResponse,
)
from lockgate.coordinator.share.results import StateResult
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.coordinator.group.support import TOPIC, start_broker, wait_until

COMMITTED = CommittedOffset(1, -1, "", 0)
FAST = {
    "group.share.min.session.timeout.ms": "200",
    "group.share.session.timeout.ms": "300",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "100",
    "group.share.assignment.interval.ms": "0",
}


@pytest.fixture
async def fast(engine: MemoryEngine) -> AsyncIterator[Broker]:
    broker = await start_broker(engine, **FAST)
    try:
        yield broker
    finally:
        await broker.stop()


def described(broker: Broker, group_id: str) -> ShareGroup:
    group = broker.groups.describe_share(group_id)
    assert isinstance(group, ShareGroup), group
    return group


async def beat(
    broker: Broker, member: str, epoch: int, topics: tuple[str, ...] | None = None,
    group: str = "g",
) -> ShareHeartbeatResponse:  # fmt: skip
    request = ShareHeartbeatRequest(group, member, epoch, subscribed_topic_names=topics)
    return await broker.groups.share.heartbeat(request)


async def test_session_expiry_removes_the_member_a_group_config_wins(fast: Broker) -> None:
    configs = fast.group_configs
    await configs.alter("patient", changes=[("share.session.timeout.ms", 0, "30000")])
    assert (await beat(fast, "m1", 0, (TOPIC,))).error == ErrorCode.none
    assert (await beat(fast, "p1", 0, (TOPIC,), group="patient")).error == ErrorCode.none
    await wait_until(lambda: fast.groups.share.sessions_expired >= 1, timeout=3)
    group = described(fast, "g")
    assert group.members == {} and group.state == "Empty"
    assert group.group_epoch == 3  # (join 2, expiry 3)
    assert set(described(fast, "patient").members) == {"p1"}  # its 30 s session lasts
    assert fast.groups.share.sessions_expired == 1
    assert (await beat(fast, "m1", 2)).error == ErrorCode.unknown_member_id


class FailingPersister:
    """Answers every initialize with an error (a share coordinator not available)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, uuid.UUID, int, int, int]] = []

    async def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
        start_offset: int,
    ) -> StateResult:  # fmt: skip
        self.asked.append((group_id, topic_id, partition, state_epoch, start_offset))
        return StateResult(ErrorCode.coordinator_not_available, "not now")

    async def read(self, *args: Any) -> Any:
        raise AssertionError("not used by the group coordinator")

    write = read
    delete = read
    read_summary = read


async def test_failed_initialization_is_asked_again(fast: Broker) -> None:
    share = fast.groups.share
    real = share.persister
    failing = FailingPersister()
    share.persister = failing
    first = await beat(fast, "m", 0, (TOPIC,))
    await share.settled()
    tid = fast.topics.topics[TOPIC].topic_id
    assert sorted(failing.asked) == [("g", tid, p, 2, -1) for p in range(3)]
    partitions = described(fast, "g").partitions
    assert partitions is not None and not partitions.initializing
    share.persister = real
    again = await beat(fast, "m", first.member_epoch)
    assert again.assignment is None and again.member_epoch == 2  # nothing initialized yet
    await share.settled()
    assigned = await beat(fast, "m", again.member_epoch)
    assert assigned.member_epoch == 3 and assigned.assignment == {TOPIC: frozenset({0, 1, 2})}


async def test_restart_replays_the_share_group(engine: MemoryEngine) -> None:
    broker = await start_broker(engine, **FAST)
    try:
        await beat(broker, "a", 0, (TOPIC,))
        await broker.groups.share.settled()
        await beat(broker, "a", 2)
        await beat(broker, "b", 0, (TOPIC,))
        before = described(broker, "g")
    finally:
        await broker.stop()
    again = await start_broker(engine, **FAST)
    try:
        after = described(again, "g")
        # (initializing entries' clocks restart at load: none are left here)
        assert after == before
        assert {k[1] for k in again.groups.share.sessions} == {"a", "b"}
    finally:
        await again.stop()


async def test_classic_apis_and_offsets_on_a_share_group(fast: Broker) -> None:
    """As Kafka 4.4: SyncGroup, Heartbeat and LeaveGroup on a share group answer
    UNKNOWN_MEMBER_ID; OffsetDelete and TxnOffsetCommit GROUP_ID_NOT_FOUND; the group is
    listed with type share."""
    await beat(fast, "m", 0, (TOPIC,))
    groups = fast.groups
    synced = await groups.sync("g", 1, "m", None, "consumer", "range", {})
    assert synced["error_code"] == ErrorCode.unknown_member_id
    assert groups.heartbeat("g", 1, "m", None) == ErrorCode.unknown_member_id
    assert groups.leave("g", [("m", None)]) == (ErrorCode.unknown_member_id, [])
    assert (await groups.delete_offsets("g", [(TOPIC, 0)]))[0] == ErrorCode.group_id_not_found
    committed = await groups.txn_commit("g", 1, 0, -1, "", None, {(TOPIC, 0): COMMITTED})
    assert committed == {(TOPIC, 0): ErrorCode.group_id_not_found}
    listed = groups.list_groups({"stable"}, {"share"})
    assert not isinstance(listed, ErrorCode)
    assert [(g.group_id, g.protocol_type, g.state, g.group_type) for g in listed] == [
        ("g", "share", "Stable", "share")
    ]
    assert groups.list_groups(set(), {"consumer", "classic"}) == []
