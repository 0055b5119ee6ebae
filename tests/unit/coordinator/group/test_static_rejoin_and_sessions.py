"""KIP-345 static members that restart and rejoin a Stable group keep their assignment without
rebalancing the others (Kafka's rule), and session expiry on a timer per member."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockgate.coordinator.group.service import GroupCoordinator
from lockgate.coordinator.group.state import GroupState
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.coordinator.group.support import bounded, join, start_broker, sync, wait_until

GROUP = "static"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    instance = await start_broker(MemoryEngine())
    try:
        yield instance
    finally:
        await instance.stop()


async def static_pair(groups: GroupCoordinator) -> tuple[int, str, str]:
    """Two static members in one stable generation: (generation, leader id, follower id)."""
    answers = await asyncio.wait_for(
        asyncio.gather(
            join(groups, GROUP, instance="a", client_id="a"),
            join(groups, GROUP, instance="b", client_id="b"),
        ),
        5,
    )
    generation = answers[0]["generation_id"]
    leader = answers[0]["leader"]
    ids = [a["member_id"] for a in answers]
    follower = next(m for m in ids if m != leader)
    plan = {m: f"partitions of {m[0]}".encode() for m in ids}
    synced = await asyncio.wait_for(
        asyncio.gather(
            sync(groups, GROUP, generation, leader, plan, leader[0]),
            sync(groups, GROUP, generation, follower, None, follower[0]),
        ),
        5,
    )
    assert [s["error_code"] for s in synced] == [0, 0]
    return generation, leader, follower


@pytest.mark.parametrize("who", ["follower", "leader"])
async def test_a_restarted_static_member_gets_its_assignment_back_without_a_rebalance(
    broker: Broker, who: str
) -> None:
    groups = broker.groups
    generation, leader, follower = await static_pair(groups)
    old_id = follower if who == "follower" else leader
    other = leader if who == "follower" else follower
    instance = old_id[0]
    again = await bounded(join(groups, GROUP, instance=instance, client_id=instance))
    assert again["error_code"] == 0
    new_id = again["member_id"]
    assert new_id != old_id
    assert again["generation_id"] == generation  # no new generation
    assert again["leader"] == leader  # the leader from before: a rejoining leader assigns nothing
    assert again["members"] == []
    group = broker.groups.groups[GROUP]
    assert group.state is GroupState.STABLE
    assert groups.heartbeat(GROUP, generation, other, other[0]) == ErrorCode.none
    synced = await bounded(sync(groups, GROUP, generation, new_id, None, instance))
    assert synced["assignment"] == f"partitions of {instance}".encode()
    assert groups.heartbeat(GROUP, generation, old_id, instance) == ErrorCode.fenced_instance_id


async def test_the_new_member_id_survives_a_restart() -> None:
    engine = MemoryEngine()
    broker = await start_broker(engine)
    try:
        generation, _leader, follower = await static_pair(broker.groups)
        again = await bounded(join(broker.groups, GROUP, instance=follower[0], client_id="b"))
    finally:
        await broker.stop()
    restarted = await start_broker(engine)
    try:
        group = restarted.groups.groups[GROUP]
        assert group.static_members[follower[0]] == again["member_id"]
        assert group.generation == generation
    finally:
        await restarted.stop()


async def test_a_rejoin_that_changes_the_selected_protocol_rebalances(broker: Broker) -> None:
    groups = broker.groups
    answer = await bounded(join(groups, GROUP, instance="a", client_id="a"))
    generation, member = answer["generation_id"], answer["member_id"]
    await bounded(sync(groups, GROUP, generation, member, {member: b"x"}, "a"))
    protocols = [("roundrobin", b"rr"), ("range", b"range-metadata")]
    again = await bounded(join(groups, GROUP, instance="a", client_id="a", protocols=protocols))
    assert again["generation_id"] == generation + 1
    assert groups.groups[GROUP].protocol == "roundrobin"


async def test_sessions_expire_on_their_own_timer(broker: Broker) -> None:
    groups = broker.groups
    answer = await bounded(join(groups, GROUP, instance="a", client_id="a", session_ms=500))
    generation, member = answer["generation_id"], answer["member_id"]
    await bounded(sync(groups, GROUP, generation, member, {member: b"x"}, "a"))
    await asyncio.sleep(0.3)
    assert groups.heartbeat(GROUP, generation, member, "a") == ErrorCode.none  # restarts it
    await asyncio.sleep(0.3)
    assert member in groups.groups[GROUP].members  # 0.6 s after joining, 0.3 s after the beat
    await wait_until(lambda: member not in groups.groups[GROUP].members, timeout=3)
    assert groups.classic.sessions_expired == 1
    # a correctness bound with room for a loaded machine: the timer fires at the deadline
    assert 0 <= groups.classic.expiry_lateness_ms < 200, groups.classic.expiry_lateness_ms
