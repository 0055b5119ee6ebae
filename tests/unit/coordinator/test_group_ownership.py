"""The group coordinator of a cluster broker coordinates the __consumer_offsets partitions it
leads, one at a time: NOT_COORDINATOR for a partition it does not lead,
COORDINATOR_LOAD_IN_PROGRESS from the leadership until the partition is replayed, and when the
leadership ends the partition's groups are forgotten (their waiting members answered
NOT_COORDINATOR, their timers and pending transactional offsets dropped). Driven here by
calling on_leadership directly, as the ReplicaManager does, on a broker that is not started."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.group.records import CommittedOffset, offset_key, offset_value
from lockgate.coordinator.group.service import GroupCoordinator
from lockgate.coordinator.txn.log import partition_for
from lockgate.handlers import k11_join_group
from lockgate.handlers.registry import HandlerResult, RawBody, RequestContext
from lockgate.protocol.api import ApiKey, build, encode, request_class, response_class
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC
from tests.unit.coordinator.group.support import wait_until

PARTITIONS = 3
TOPIC = "orders"
SETTINGS = {
    "listeners": "127.0.0.1:0",
    "lockgate.durability": "page-cache",
    "offsets.topic.num.partitions": str(PARTITIONS),
    "group.initial.rebalance.delay.ms": "10000",  # a new group's first member waits in its join
    "lockgate.coordinator.snapshot.interval.ms": "-1",
}


def groups_in(index: int, count: int = 1) -> list[str]:
    """Group ids whose __consumer_offsets partition is `index`."""
    found: list[str] = []
    number = 0
    while len(found) < count:
        candidate = f"group-{number}"
        if partition_for(candidate, PARTITIONS) == index:
            found.append(candidate)
        number += 1
    return found


GROUP = groups_in(0)[0]
OTHER_GROUP = groups_in(1)[0]  # another partition


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    """A broker with __consumer_offsets (3 partitions, none led yet) and a topic `orders`."""
    broker = Broker(BrokerConfig(SETTINGS), MemoryEngine())
    broker.topics.create(CONSUMER_OFFSETS_TOPIC, PARTITIONS, 1, {}, internal=True)
    broker.topics.create(TOPIC, 1, 1, {})
    try:
        yield broker
    finally:
        for index in list(broker.groups.runtime.owned):  # cancels the groups' timers and loads
            broker.groups.runtime.on_leadership(index, None)
        broker.topics.close()


async def lead(groups: GroupCoordinator, index: int, epoch: int = 1) -> None:
    groups.runtime.on_leadership(index, epoch)
    await wait_until(lambda: index in groups.runtime.loaded_partitions)


async def commit(groups: GroupCoordinator, group_id: str, offset: int) -> ErrorCode:
    committed = CommittedOffset(offset, -1, "", 1_000)
    answers = await groups.commit(group_id, -1, "", None, {(TOPIC, 0): committed})
    return answers[(TOPIC, 0)]


def committed(groups: GroupCoordinator, group_id: str) -> int | None:
    error, answers = groups.fetch(group_id, None, False)
    assert error == ErrorCode.none
    found = answers.get((TOPIC, 0))
    return None if found is None or found[0] is None else found[0].offset


def join(groups: GroupCoordinator, group_id: str) -> asyncio.Task[dict[str, Any]]:
    """A static member's JoinGroup (no MEMBER_ID_REQUIRED round), still waiting when it
    returns: a new group's join waits group.initial.rebalance.delay.ms."""
    protocols = [("range", b"m")]
    joining = groups.join(
        group_id, "", "instance-1", "consumer", protocols, 6_000, 10_000, "client", "", True
    )
    return asyncio.create_task(joining)


async def test_a_partition_not_led_here_is_not_coordinated(broker: Broker) -> None:
    groups = broker.groups
    assert groups.unavailable(GROUP) == ErrorCode.not_coordinator
    assert await commit(groups, GROUP, 5) == ErrorCode.not_coordinator
    assert groups.heartbeat(GROUP, 1, "member", None) == ErrorCode.not_coordinator


async def test_a_led_partition_is_loading_until_its_replay_ends(broker: Broker) -> None:
    groups = broker.groups
    groups.runtime.on_leadership(0, 4)
    assert groups.runtime.owned == {0: 4}
    assert groups.unavailable(GROUP) == ErrorCode.coordinator_load_in_progress
    assert not groups.loaded
    await wait_until(lambda: groups.loaded)
    assert groups.unavailable(GROUP) == ErrorCode.none
    assert groups.unavailable(OTHER_GROUP) == ErrorCode.not_coordinator  # (partition 1: not led)


async def test_offsets_committed_in_an_earlier_term_are_replayed(broker: Broker) -> None:
    groups = broker.groups
    await lead(groups, 0, epoch=1)
    assert await commit(groups, GROUP, 42) == ErrorCode.none
    groups.runtime.on_leadership(0, None)
    assert groups.unavailable(GROUP) == ErrorCode.not_coordinator
    await lead(groups, 0, epoch=2)
    assert committed(groups, GROUP) == 42


async def test_offsets_written_by_another_coordinator_are_replayed(broker: Broker) -> None:
    """A partition's log as a previous leader left it (replicated here): the new coordinator
    serves what it holds."""
    partition = broker.topics.get(CONSUMER_OFFSETS_TOPIC, 0)
    assert partition is not None
    record = (offset_key(GROUP, TOPIC, 0), offset_value(CommittedOffset(7, 3, "meta", 1_000)))
    batch = build_batch([record], timestamp_ms=1_000)
    partition.append(bytearray(batch), validate_produced_batch(batch), 1_000, internal=True)
    await lead(broker.groups, 0, epoch=5)
    assert committed(broker.groups, GROUP) == 7


async def test_losing_the_leadership_forgets_that_partitions_groups_only(broker: Broker) -> None:
    groups = broker.groups
    await lead(groups, 0)
    await lead(groups, 1)
    assert await commit(groups, GROUP, 1) == ErrorCode.none
    assert await commit(groups, OTHER_GROUP, 2) == ErrorCode.none
    groups.runtime.on_leadership(0, None)
    assert GROUP not in groups.groups
    assert groups.unavailable(GROUP) == ErrorCode.not_coordinator
    assert groups.fetch(GROUP, None, False) == (ErrorCode.not_coordinator, {})
    assert committed(groups, OTHER_GROUP) == 2
    assert groups.runtime.owned == {1: 1} and groups.loaded


async def test_a_member_waiting_in_a_join_is_answered_not_coordinator(broker: Broker) -> None:
    groups = broker.groups
    await lead(groups, 0)
    joining = join(groups, GROUP)
    await wait_until(lambda: GROUP in groups.groups and bool(groups.groups[GROUP].members))
    (member,) = groups.groups[GROUP].members.values()
    session = groups.classic.sessions.get((GROUP, member.member_id))
    assert not joining.done() and session is not None
    groups.runtime.on_leadership(0, None)
    answer = await asyncio.wait_for(joining, 5)
    assert answer["error_code"] == ErrorCode.not_coordinator
    assert session.cancelled()  # no session timer left behind
    assert not groups.classic.sessions and not groups.classic.joins


async def test_the_rebalance_timer_of_a_forgotten_group_is_cancelled(broker: Broker) -> None:
    groups = broker.groups
    await lead(groups, 0)
    joining = join(groups, GROUP)
    await wait_until(lambda: GROUP in groups.classic.barriers)
    timer = groups.classic.barriers[GROUP].timer  # the rebalance barrier's next check
    assert timer is not None
    groups.runtime.on_leadership(0, None)
    await asyncio.wait_for(joining, 5)
    await asyncio.sleep(0)
    assert timer.cancelled() and GROUP not in groups.classic.barriers


async def test_pending_transactional_offsets_of_the_partition_are_dropped(broker: Broker) -> None:
    groups = broker.groups
    await lead(groups, 0)
    await lead(groups, 1)
    offsets = {(TOPIC, 0): CommittedOffset(9, -1, "", 1_000)}
    assert await groups.txn_commit(GROUP, 77, 0, -1, "", None, offsets) == {
        (TOPIC, 0): ErrorCode.none
    }
    assert await groups.txn_commit(OTHER_GROUP, 77, 0, -1, "", None, offsets) == {
        (TOPIC, 0): ErrorCode.none
    }
    groups.runtime.on_leadership(0, None)
    assert list(groups.offsets.pending[77]) == [OTHER_GROUP]


async def test_a_new_epoch_while_loading_restarts_the_load(broker: Broker) -> None:
    """A long partition (its replay yields to the loop): the leadership moves on to a newer
    epoch before the first load ends; the partition ends loaded in the newer one."""
    partition = broker.topics.get(CONSUMER_OFFSETS_TOPIC, 0)
    assert partition is not None
    for offset in range(2_000):
        record = (offset_key(GROUP, TOPIC, 0), offset_value(CommittedOffset(offset, -1, "", 1)))
        batch = build_batch([record], timestamp_ms=1)
        partition.append(bytearray(batch), validate_produced_batch(batch), 1, internal=True)
    groups = broker.groups
    groups.runtime.on_leadership(0, 1)
    for _ in range(3):
        await asyncio.sleep(0)
    assert groups.unavailable(GROUP) == ErrorCode.coordinator_load_in_progress
    groups.runtime.on_leadership(0, 2)
    assert groups.unavailable(GROUP) == ErrorCode.coordinator_load_in_progress
    await wait_until(lambda: groups.loaded)
    assert groups.runtime.owned == {0: 2}
    assert committed(groups, GROUP) == 1_999


async def test_a_waiting_join_group_request_is_answered_not_coordinator(broker: Broker) -> None:
    groups = broker.groups
    await lead(groups, 0)
    version = 5
    request_type = request_class(ApiKey.JOIN_GROUP, version)
    assert request_type is not None
    request = build(
        request_type,
        {"group_id": GROUP, "session_timeout": 6_000, "rebalance_timeout": 10_000,
         "member_id": "", "group_instance_id": "instance-1", "protocol_type": "consumer",
         "protocols": [{"name": "range", "metadata": b"m"}]},
    )  # fmt: skip
    context = RequestContext(
        broker.services, ApiKey.JOIN_GROUP, version, 1, "client", "127.0.0.1:5000"
    )

    async def handle() -> HandlerResult:
        return await k11_join_group.handle(context, request)

    handled = asyncio.create_task(handle())
    await wait_until(lambda: GROUP in groups.groups and bool(groups.groups[GROUP].members))
    groups.runtime.on_leadership(0, None)
    result = await asyncio.wait_for(handled, 5)
    assert result is not None and not isinstance(result, RawBody)
    response = build(response_class(ApiKey.JOIN_GROUP, version), result)  # as the connection
    encode(response)
    assert response.error_code == ErrorCode.not_coordinator
