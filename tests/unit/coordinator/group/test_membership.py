"""The classic join/sync/heartbeat/leave protocol, driven directly on an in-process broker's
group coordinator: MEMBER_ID_REQUIRED, the join barrier and its leader, SyncGroup,
REBALANCE_IN_PROGRESS, session expiry, static members and their fencing, LeaveGroup, the
initial rebalance delay, and the errors of each call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

from lockgate.coordinator.group.records import CommittedOffset
from lockgate.coordinator.group.state import GroupState
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.coordinator.group.support import (
    bounded,
    join,
    new_member_id,
    stable_group,
    start_broker,
    sync,
    wait_until,
)

GROUP = "membership"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    instance = await start_broker(MemoryEngine())
    try:
        yield instance
    finally:
        await instance.stop()


# -- JoinGroup ---------------------------------------------------------------------------------


async def test_member_id_required_then_join(broker: Broker) -> None:
    groups = broker.groups
    member_id = await new_member_id(groups, GROUP, "consumer-1")
    assert member_id not in groups.groups[GROUP].members  # not a member until it rejoins
    answer = await bounded(join(groups, GROUP, member_id))
    assert answer["error_code"] == 0
    assert answer["member_id"] == member_id
    assert answer["generation_id"] == 1
    assert answer["leader"] == member_id
    assert answer["protocol_name"] == "range"
    assert answer["members"] == [
        {"member_id": member_id, "group_instance_id": None, "metadata": b"range-metadata"}
    ]
    assert groups.groups[GROUP].state is GroupState.COMPLETING_REBALANCE


async def test_an_invented_member_id_is_unknown(broker: Broker) -> None:
    answer = await bounded(join(broker.groups, GROUP, "made-up"))
    assert answer["error_code"] == ErrorCode.unknown_member_id
    await new_member_id(broker.groups, GROUP)
    answer = await bounded(join(broker.groups, GROUP, "made-up"))
    assert answer["error_code"] == ErrorCode.unknown_member_id


async def test_before_v4_a_member_joins_at_once(broker: Broker) -> None:
    answer = await bounded(join(broker.groups, GROUP, require_known_member_id=False))
    assert answer["error_code"] == 0 and answer["generation_id"] == 1
    assert answer["member_id"] and answer["leader"] == answer["member_id"]


async def test_two_members_one_generation_leader_gets_both(broker: Broker) -> None:
    groups = broker.groups
    first = await new_member_id(groups, GROUP, "a")
    second = await new_member_id(groups, GROUP, "b")
    answers = await asyncio.wait_for(
        asyncio.gather(
            join(groups, GROUP, first, protocols=[("range", b"meta-a"), ("roundrobin", b"ra")]),
            join(groups, GROUP, second, protocols=[("roundrobin", b"rb"), ("range", b"meta-b")]),
        ),
        5,
    )
    assert [a["error_code"] for a in answers] == [0, 0]
    assert {a["generation_id"] for a in answers} == {1}
    leaders = {a["leader"] for a in answers}
    assert len(leaders) == 1
    (leader,) = leaders
    assert leader in (first, second)
    by_member = {a["member_id"]: a for a in answers}
    # a 1-1 vote between range and roundrobin: the same choice for everyone
    assert {a["protocol_name"] for a in answers} == {"range"}
    assert sorted(by_member[leader]["members"], key=lambda m: str(m["member_id"])) == sorted(
        [
            {"member_id": first, "group_instance_id": None, "metadata": b"meta-a"},
            {"member_id": second, "group_instance_id": None, "metadata": b"meta-b"},
        ],
        key=lambda m: str(m["member_id"]),
    )
    follower = second if leader == first else first
    assert by_member[follower]["members"] == []


async def test_join_errors(broker: Broker) -> None:
    groups = broker.groups
    answer = await bounded(join(groups, ""))
    assert answer["error_code"] == ErrorCode.invalid_group_id
    for session_ms in (499, 1_800_001):
        answer = await bounded(join(groups, GROUP, session_ms=session_ms))
        assert answer["error_code"] == ErrorCode.invalid_session_timeout
    answer = await bounded(join(groups, GROUP, protocols=[]))
    assert answer["error_code"] == ErrorCode.inconsistent_group_protocol
    await stable_group(groups, GROUP, 1)
    answer = await bounded(join(groups, GROUP, protocols=[("roundrobin", b"")]))
    assert answer["error_code"] == ErrorCode.inconsistent_group_protocol
    answer = await bounded(
        groups.join(GROUP, "", None, "connect", [("range", b"")], 6000, 6000, "c", "h", True)
    )
    assert answer["error_code"] == ErrorCode.inconsistent_group_protocol


async def test_the_first_member_of_an_empty_group_sets_its_protocol_type(broker: Broker) -> None:
    groups = broker.groups
    _generation, (member,) = await stable_group(groups, GROUP, 1)
    groups.leave(GROUP, [(member, None)])
    await wait_until(lambda: groups.groups[GROUP].state is GroupState.EMPTY)
    assert groups.groups[GROUP].protocol_type == "consumer"  # kept while empty

    def connect() -> Coroutine[Any, Any, dict[str, Any]]:
        return groups.join(GROUP, "", None, "connect", [("v1", b"")], 6000, 6000, "c", "h", False)

    first, second = await asyncio.wait_for(asyncio.gather(connect(), connect()), 5)
    assert first["error_code"] == second["error_code"] == 0
    assert first["protocol_type"] == second["protocol_type"] == "connect"
    assert groups.groups[GROUP].protocol_type == "connect"


# -- SyncGroup ---------------------------------------------------------------------------------


async def test_sync_distributes_the_leaders_assignments(broker: Broker) -> None:
    groups = broker.groups
    ids = [await new_member_id(groups, GROUP, name) for name in ("a", "b", "c")]
    answers = await asyncio.wait_for(asyncio.gather(*(join(groups, GROUP, m) for m in ids)), 5)
    generation, leader = answers[0]["generation_id"], answers[0]["leader"]
    followers = [m for m in ids if m != leader]
    # one follower waits for the leader, the leader syncs, the last follower comes afterwards
    early = asyncio.create_task(sync(groups, GROUP, generation, followers[0]))
    await asyncio.sleep(0.05)
    assert not early.done()
    assignments = {m: f"assignment of {m}".encode() for m in ids}
    assert (await bounded(sync(groups, GROUP, generation, leader, assignments)))[
        "assignment"
    ] == assignments[leader]
    answer = await bounded(early)
    assert answer["error_code"] == 0
    assert answer["assignment"] == assignments[followers[0]]
    assert answer["protocol_type"] == "consumer" and answer["protocol_name"] == "range"
    late = await bounded(sync(groups, GROUP, generation, followers[1]))
    assert late["assignment"] == assignments[followers[1]]
    assert groups.groups[GROUP].state is GroupState.STABLE


async def test_sync_errors(broker: Broker) -> None:
    groups = broker.groups
    generation, (leader,) = await stable_group(groups, GROUP, 1)
    assert (await bounded(sync(groups, "nope", generation, leader)))[
        "error_code"
    ] == ErrorCode.unknown_member_id
    assert (await bounded(sync(groups, GROUP, generation, "stranger")))[
        "error_code"
    ] == ErrorCode.unknown_member_id
    assert (await bounded(sync(groups, GROUP, generation - 1, leader)))[
        "error_code"
    ] == ErrorCode.illegal_generation
    answer = await bounded(
        groups.sync(GROUP, generation, leader, None, "consumer", "roundrobin", {})
    )
    assert answer["error_code"] == ErrorCode.inconsistent_group_protocol


async def test_a_new_rebalance_fails_a_waiting_sync(broker: Broker) -> None:
    groups = broker.groups
    ids = [await new_member_id(groups, GROUP, name) for name in ("a", "b")]
    answers = await asyncio.wait_for(asyncio.gather(*(join(groups, GROUP, m) for m in ids)), 5)
    generation, leader = answers[0]["generation_id"], answers[0]["leader"]
    follower = next(m for m in ids if m != leader)
    waiting = asyncio.create_task(sync(groups, GROUP, generation, follower))
    await asyncio.sleep(0.02)
    newcomer = asyncio.create_task(join(groups, GROUP, require_known_member_id=False))
    assert (await bounded(waiting))["error_code"] == ErrorCode.rebalance_in_progress
    rejoined = await asyncio.wait_for(
        asyncio.gather(join(groups, GROUP, leader), join(groups, GROUP, follower), newcomer), 5
    )
    assert {a["generation_id"] for a in rejoined} == {generation + 1}
    assert len({a["member_id"] for a in rejoined}) == 3


# -- rejoining with unchanged metadata ---------------------------------------------------------


async def test_a_follower_rejoining_unchanged_gets_the_current_generation(broker: Broker) -> None:
    """As Kafka: a member that lost its JoinGroup answer and joins again with the same
    metadata is answered at once with the current generation; no rebalance."""
    groups = broker.groups
    generation, (leader, follower) = await stable_group(groups, GROUP, 2)
    again = await bounded(join(groups, GROUP, follower))
    assert again["error_code"] == 0
    assert again["generation_id"] == generation and again["leader"] == leader
    assert again["members"] == []
    assert groups.groups[GROUP].state is GroupState.STABLE
    assert groups.heartbeat(GROUP, generation, leader, None) == ErrorCode.none
    assert (await bounded(sync(groups, GROUP, generation, follower)))["assignment"] == (
        follower.encode()
    )


async def test_a_rejoin_between_join_and_sync_gets_the_same_generation(broker: Broker) -> None:
    groups = broker.groups
    ids = [await new_member_id(groups, GROUP, name) for name in ("a", "b")]
    answers = await asyncio.wait_for(asyncio.gather(*(join(groups, GROUP, m) for m in ids)), 5)
    generation, leader = answers[0]["generation_id"], answers[0]["leader"]
    assert groups.groups[GROUP].state is GroupState.COMPLETING_REBALANCE
    for member_id in ids:  # the leader too: it gets every member's metadata again
        again = await bounded(join(groups, GROUP, member_id))
        assert again["generation_id"] == generation
        assert len(again["members"]) == (2 if member_id == leader else 0)
    assert groups.groups[GROUP].state is GroupState.COMPLETING_REBALANCE


async def test_a_leader_rejoin_or_new_metadata_starts_a_rebalance(broker: Broker) -> None:
    groups = broker.groups
    generation, (leader, follower) = await stable_group(groups, GROUP, 2)
    changed = asyncio.create_task(
        join(groups, GROUP, follower, protocols=[("range", b"new-subscription")])
    )
    await asyncio.sleep(0.02)
    assert groups.groups[GROUP].state is GroupState.PREPARING_REBALANCE
    answer = await bounded(join(groups, GROUP, leader))
    assert answer["generation_id"] == generation + 1
    assert (await bounded(changed))["generation_id"] == generation + 1
    assert {m["metadata"] for m in answer["members"]} == {b"range-metadata", b"new-subscription"}
    await asyncio.wait_for(
        asyncio.gather(
            sync(groups, GROUP, generation + 1, leader, {leader: b"", follower: b""}),
            sync(groups, GROUP, generation + 1, follower),
        ),
        5,
    )
    rejoin = asyncio.create_task(join(groups, GROUP, leader))  # the leader: a rebalance
    await asyncio.sleep(0.02)
    assert groups.groups[GROUP].state is GroupState.PREPARING_REBALANCE
    await bounded(join(groups, GROUP, follower, protocols=[("range", b"new-subscription")]))
    assert (await bounded(rejoin))["generation_id"] == generation + 2


# -- Heartbeat and rebalances ------------------------------------------------------------------


async def test_heartbeat_during_a_rebalance(broker: Broker) -> None:
    groups = broker.groups
    generation, (first,) = await stable_group(groups, GROUP, 1)
    assert groups.heartbeat(GROUP, generation, first, None) == ErrorCode.none
    second = await new_member_id(groups, GROUP, "b")
    joining = asyncio.create_task(join(groups, GROUP, second))
    await asyncio.sleep(0.05)
    assert groups.groups[GROUP].state is GroupState.PREPARING_REBALANCE
    assert groups.heartbeat(GROUP, generation, first, None) == ErrorCode.rebalance_in_progress
    assert not joining.done()  # the barrier waits for the first member to rejoin
    rejoined = await bounded(join(groups, GROUP, first))
    assert rejoined["generation_id"] == generation + 1
    assert (await bounded(joining))["generation_id"] == generation + 1
    assert groups.heartbeat(GROUP, generation, first, None) == ErrorCode.illegal_generation
    assert groups.heartbeat(GROUP, generation + 1, first, None) == ErrorCode.none
    assert groups.heartbeat(GROUP, generation + 1, "stranger", None) == (
        ErrorCode.unknown_member_id
    )
    assert groups.heartbeat("no-such-group", 1, first, None) == ErrorCode.unknown_member_id


async def test_a_member_that_does_not_rejoin_in_time_is_removed(broker: Broker) -> None:
    groups = broker.groups
    generation, (a, b) = await stable_group(groups, GROUP, 2, rebalance_ms=300)
    started = time.monotonic()
    newcomer = asyncio.create_task(
        join(groups, GROUP, rebalance_ms=300, require_known_member_id=False)
    )
    await asyncio.sleep(0.02)
    answer = await bounded(join(groups, GROUP, a, rebalance_ms=300))  # b never rejoins
    waited = time.monotonic() - started
    assert answer["error_code"] == 0 and answer["generation_id"] == generation + 1
    assert {m["member_id"] for m in answer["members"]} == {a, (await newcomer)["member_id"]}
    assert 0.25 <= waited < 3, waited
    assert groups.heartbeat(GROUP, generation, b, None) == ErrorCode.unknown_member_id


async def test_session_expiry_removes_a_member_and_rebalances(broker: Broker) -> None:
    groups = broker.groups
    generation, (a, b) = await stable_group(groups, GROUP, 2, session_ms=600)
    silent = b
    talker = a
    deadline = time.monotonic() + 5
    answer = ErrorCode.none
    while time.monotonic() < deadline:  # only one of them heartbeats
        answer = groups.heartbeat(GROUP, generation, talker, None)
        if answer != ErrorCode.none:
            break
        await asyncio.sleep(0.1)
    assert answer == ErrorCode.rebalance_in_progress
    assert silent not in groups.groups[GROUP].members
    assert groups.heartbeat(GROUP, generation, silent, None) == ErrorCode.unknown_member_id
    rejoined = await bounded(join(groups, GROUP, talker, session_ms=600))
    assert rejoined["generation_id"] == generation + 1
    assert [m["member_id"] for m in rejoined["members"]] == [talker]


async def test_the_last_session_expiry_empties_the_group(broker: Broker) -> None:
    groups = broker.groups
    generation, _ = await stable_group(groups, GROUP, 1, session_ms=500)
    await wait_until(lambda: groups.groups[GROUP].state is GroupState.EMPTY, timeout=4)
    group = groups.groups[GROUP]
    assert not group.members and group.generation == generation + 1
    assert group.leader is None and group.protocol is None


async def test_initial_rebalance_delay_gathers_the_first_members() -> None:
    broker = await start_broker(MemoryEngine(), **{"group.initial.rebalance.delay.ms": "300"})
    try:
        groups = broker.groups
        started = time.monotonic()
        first = asyncio.create_task(join(groups, GROUP, require_known_member_id=False))
        await asyncio.sleep(0.15)
        second = await bounded(join(groups, GROUP, require_known_member_id=False))
        waited = time.monotonic() - started
        answer = await bounded(first)
        assert answer["generation_id"] == second["generation_id"] == 1
        assert len(groups.groups[GROUP].members) == 2
        # the second member extended the delay (0.15 + 0.3), bounded by the rebalance timeout
        assert 0.4 <= waited < 2, waited
    finally:
        await broker.stop()


# -- static members ----------------------------------------------------------------------------


async def test_static_member_rejoin_fences_the_old_member_id(broker: Broker) -> None:
    groups = broker.groups
    # static members need no MEMBER_ID_REQUIRED round trip
    first = await bounded(join(groups, GROUP, instance="instance-1"))
    assert first["error_code"] == 0
    old_id, generation = first["member_id"], first["generation_id"]
    assert (await bounded(sync(groups, GROUP, generation, old_id, {old_id: b"p0"}, "instance-1")))[
        "assignment"
    ] == b"p0"
    # the process restarts: same instance id, no member id
    again = await bounded(join(groups, GROUP, instance="instance-1"))
    assert again["error_code"] == 0
    new_id = again["member_id"]
    assert new_id != old_id
    group = groups.groups[GROUP]
    assert group.static_members == {"instance-1": new_id}
    assert set(group.members) == {new_id}
    # the old incarnation is a zombie now, whatever it tries
    assert groups.heartbeat(GROUP, generation, old_id, "instance-1") == (
        ErrorCode.fenced_instance_id
    )
    assert (await bounded(sync(groups, GROUP, generation, old_id, None, "instance-1")))[
        "error_code"
    ] == ErrorCode.fenced_instance_id
    assert (await bounded(join(groups, GROUP, old_id, instance="instance-1")))[
        "error_code"
    ] == ErrorCode.fenced_instance_id
    code, answers = groups.leave(GROUP, [(old_id, "instance-1")])
    assert code == ErrorCode.none
    assert answers[0]["error_code"] == ErrorCode.fenced_instance_id
    assert set(group.members) == {new_id}
    # the new incarnation works
    generation = again["generation_id"]
    synced = await bounded(sync(groups, GROUP, generation, new_id, {new_id: b"p0"}, "instance-1"))
    assert synced["assignment"] == b"p0"
    assert groups.heartbeat(GROUP, generation, new_id, "instance-1") == ErrorCode.none


async def test_static_rejoin_fences_an_incarnation_waiting_in_join(broker: Broker) -> None:
    groups = broker.groups
    generation, (dynamic,) = await stable_group(groups, GROUP, 1)
    waiting = asyncio.create_task(join(groups, GROUP, instance="instance-1"))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the dynamic member has not rejoined yet
    replacement = asyncio.create_task(join(groups, GROUP, instance="instance-1"))
    fenced = await bounded(waiting)
    assert fenced["error_code"] == ErrorCode.fenced_instance_id
    await bounded(join(groups, GROUP, dynamic))
    answer = await bounded(replacement)
    assert answer["error_code"] == 0 and answer["generation_id"] == generation + 1
    assert answer["member_id"] != fenced["member_id"]


# -- LeaveGroup --------------------------------------------------------------------------------


async def test_leave_rebalances_the_rest(broker: Broker) -> None:
    groups = broker.groups
    generation, (a, b) = await stable_group(groups, GROUP, 2)
    code, answers = groups.leave(GROUP, [(b, None), ("stranger", None)])
    assert code == ErrorCode.none
    assert [x["error_code"] for x in answers] == [0, ErrorCode.unknown_member_id]
    assert groups.heartbeat(GROUP, generation, a, None) == ErrorCode.rebalance_in_progress
    answer = await bounded(join(groups, GROUP, a))
    assert answer["generation_id"] == generation + 1
    assert [m["member_id"] for m in answer["members"]] == [a]
    code, answers = groups.leave(GROUP, [(a, None)])
    assert answers[0]["error_code"] == 0
    await wait_until(lambda: groups.groups[GROUP].state is GroupState.EMPTY)
    assert groups.leave("no-such-group", [(a, None)])[0] == ErrorCode.unknown_member_id


async def test_static_member_leaves_by_instance_id(broker: Broker) -> None:
    groups = broker.groups
    member_id = (await bounded(join(groups, GROUP, instance="instance-1")))["member_id"]
    code, answers = groups.leave(GROUP, [("", "instance-1"), ("", "instance-2")])
    assert code == ErrorCode.none
    # as Kafka 4.4, the answer echoes the request's (empty) member id
    assert answers[0] == {"member_id": "", "group_instance_id": "instance-1", "error_code": 0}
    assert answers[1]["error_code"] == ErrorCode.unknown_member_id
    assert groups.groups[GROUP].static_members == {}
    assert member_id not in groups.groups[GROUP].members


async def test_a_pending_member_leaves(broker: Broker) -> None:
    """A member id told MEMBER_ID_REQUIRED may leave before it joins (as Kafka 4.4: NONE), and
    is unknown afterwards."""
    groups = broker.groups
    pending = await new_member_id(groups, GROUP)
    code, answers = groups.leave(GROUP, [(pending, None)])
    assert (code, answers[0]["error_code"]) == (ErrorCode.none, ErrorCode.none)
    assert pending not in groups.groups[GROUP].pending_members
    answer = await bounded(join(groups, GROUP, pending))
    assert answer["error_code"] == ErrorCode.unknown_member_id


async def test_an_unknown_instance_id_is_an_unknown_member_for_every_api(broker: Broker) -> None:
    """As Kafka 4.4 (ClassicGroup.validateMember): a request naming a member id the group
    knows with an instance id it does not know is UNKNOWN_MEMBER_ID in JoinGroup, SyncGroup,
    Heartbeat, LeaveGroup, OffsetCommit and TxnOffsetCommit; the instance id of another member
    is FENCED_INSTANCE_ID; neither changes the group."""
    groups = broker.groups
    dynamic = await new_member_id(groups, GROUP)
    joined = await asyncio.wait_for(
        asyncio.gather(join(groups, GROUP, dynamic), join(groups, GROUP, instance="instance-1")),
        5,
    )
    generation = joined[0]["generation_id"]
    static = joined[1]["member_id"]
    instances = {dynamic: None, static: "instance-1"}
    leader_first = sorted(instances, key=lambda m: m != joined[0]["leader"])
    syncs = [sync(groups, GROUP, generation, m, {}, instances[m]) for m in leader_first]
    synced = await asyncio.wait_for(asyncio.gather(*syncs), 5)
    assert [a["error_code"] for a in synced] == [0, 0]
    offsets = {("orders", 0): CommittedOffset(1, -1, "", 0)}
    for member_id, instance, expected in (
        (dynamic, "instance-9", ErrorCode.unknown_member_id),
        (static, "instance-9", ErrorCode.unknown_member_id),
        (dynamic, "instance-1", ErrorCode.fenced_instance_id),
    ):
        answer = await bounded(sync(groups, GROUP, generation, member_id, {}, instance))
        assert answer["error_code"] == expected
        assert groups.heartbeat(GROUP, generation, member_id, instance) == expected
        committed = await groups.commit(GROUP, generation, member_id, instance, offsets)
        assert committed == {("orders", 0): expected}
        transactional = await groups.txn_commit(
            GROUP, 1, 0, generation, member_id, instance, offsets
        )
        assert transactional == {("orders", 0): expected}
        answer = await bounded(join(groups, GROUP, member_id, instance=instance))
        assert answer["error_code"] == expected
        code, answers = groups.leave(GROUP, [(member_id, instance)])
        assert (code, answers[0]["error_code"]) == (ErrorCode.none, expected)
    group = groups.groups[GROUP]
    assert group.state is GroupState.STABLE and set(group.members) == {dynamic, static}
    assert groups.heartbeat(GROUP, generation, static, "instance-1") == ErrorCode.none
    assert groups.heartbeat(GROUP, generation, dynamic, None) == ErrorCode.none


# -- a rebalance that begins while the previous generation is being written -----------------


async def test_a_join_while_the_generation_is_being_persisted(broker: Broker) -> None:
    """With fsync durability the coordinator awaits the write of a new generation; a member
    joining during that await starts the next rebalance, which must still complete."""
    broker.group_commit.durable = True  # MemoryFile.sync is a no-op in a thread
    groups = broker.groups
    first = asyncio.create_task(join(groups, GROUP, require_known_member_id=False))
    deadline = time.monotonic() + 5
    while GROUP not in groups.groups or groups.groups[GROUP].state is not (
        GroupState.COMPLETING_REBALANCE
    ):
        assert time.monotonic() < deadline
        await asyncio.sleep(0)  # look at every turn of the loop: the window is short
    assert not first.done()  # the generation is being persisted
    second = asyncio.create_task(join(groups, GROUP, require_known_member_id=False))
    answer = await bounded(first)
    member = answer["member_id"]
    for _ in range(5):  # the member follows the protocol until both are in one generation
        if answer["error_code"] == 0:
            synced = await bounded(
                sync(groups, GROUP, answer["generation_id"], member, {member: b"x"})
            )
            if synced["error_code"] == 0 and second.done():
                break
        answer = await bounded(join(groups, GROUP, member))
    other = await bounded(second)
    assert other["error_code"] == 0
    assert groups.groups[GROUP].generation == other["generation_id"]
    assert set(groups.groups[GROUP].members) == {member, other["member_id"]}
