"""The classic group protocol's transitions (classic.py) driven by hand, without an event loop:
what each answers, which waiting JoinGroup/SyncGroup requests it answers, which session timers
it arms or cancels, when the rebalance barrier completes and when the group record is written.
The same rules run end to end through classic_runtime.py in test_membership.py,
test_static_rejoin_and_sessions.py and the client tests."""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.group import classic
from lockgate.coordinator.group.classic import Effects, JoinRequest, Reply, SyncRequest, Wait
from lockgate.coordinator.group.group import Group
from lockgate.coordinator.group.state import GroupState
from lockgate.protocol.errors import ErrorCode

PROTOCOLS = [("range", b"meta")]
SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000  # group.initial.rebalance.delay.ms
NOW = 1_000_000


def join(
    group: Group,
    member_id: str = "",
    *,
    now: int = NOW,
    instance: str | None = None,
    fresh: str = "fresh",
    delay_ms: int = DELAY_MS,
    protocols: list[tuple[str, bytes]] | None = None,
) -> classic.JoinOutcome:
    request = JoinRequest(
        group.group_id, member_id, instance, "consumer", protocols or PROTOCOLS, SESSION_MS,
        REBALANCE_MS, "client", "127.0.0.1", True,
    )  # fmt: skip
    return classic.join(group, request, fresh_id=fresh, now=now, initial_delay_ms=delay_ms)


def sync(
    group: Group,
    member_id: str,
    assignments: dict[str, bytes] | None = None,
    *,
    generation: int = 1,
    instance: str | None = None,
    protocol: tuple[str | None, str | None] = (None, None),
    now: int = NOW,
) -> classic.SyncOutcome:
    request = SyncRequest(
        group.group_id, generation, member_id, instance, *protocol, assignments or {}
    )
    return classic.sync(group, request, now)


def joined_group(*member_ids: str, now: int = NOW) -> Group:
    """Members waiting in their joins of a new group's first rebalance."""
    group = Group("g")
    for member_id in member_ids:
        group.pending_members.add(member_id)  # (told MEMBER_ID_REQUIRED before)
        assert join(group, member_id, now=now).answer is None
    return group


def stable_group(*member_ids: str) -> Group:
    """A Stable generation 1 whose leader is the first member, every member synced."""
    group = joined_group(*member_ids)
    completion = classic.complete_join(group)
    classic.join_written(group, completion.generation or 0, NOW)
    for member_id in reversed(member_ids):  # followers first, the leader last
        assignments = {m: m.encode() for m in member_ids}
        sync(group, member_id, assignments)
    classic.assignments_written(group, {"error_code": 0})
    assert group.state is GroupState.STABLE
    return group


def replies(effects: Effects) -> list[tuple[str, Wait, Any]]:
    return [(r.member_id, r.wait, r.answer["error_code"]) for r in effects.replies]


# -- JoinGroup ---------------------------------------------------------------------------------


def test_a_new_member_without_an_id_is_told_the_id_to_join_with() -> None:
    group = Group("g")
    outcome = join(group, fresh="1234")
    required = {"error_code": ErrorCode.member_id_required, "member_id": "client-1234"}
    assert outcome.answer == required
    assert group.pending_members == {"client-1234"} and not group.members
    assert outcome.effects == Effects()  # nothing waits, no timer, nothing written


def test_the_first_join_waits_and_starts_the_initial_delay() -> None:
    group = joined_group("m1")
    member = group.members["m1"]
    assert member.joining and member.last_heartbeat_ms == NOW
    assert group.state is GroupState.PREPARING_REBALANCE and group.rebalance_initial
    assert group.rebalance_deadline_ms == NOW + DELAY_MS


def test_a_join_arms_the_session_and_asks_for_the_barrier() -> None:
    group = Group("g")
    group.pending_members.add("m1")
    outcome = join(group, "m1")
    assert outcome.answer is None and outcome.member_id == "m1"
    assert outcome.effects.sessions == [("m1", SESSION_MS)]
    assert outcome.effects.rebalance and not outcome.effects.write


def test_a_joiner_during_the_initial_delay_extends_it() -> None:
    group = joined_group("m1")
    group.pending_members.add("m2")
    outcome = join(group, "m2", now=NOW + 1_000)
    assert not outcome.effects.rebalance  # the barrier that runs already goes on
    assert group.rebalance_deadline_ms == NOW + 1_000 + DELAY_MS


def test_a_join_sent_again_answers_the_one_before() -> None:
    group = joined_group("m1")
    outcome = join(group, "m1", now=NOW + 5)
    assert outcome.answer is None  # the new request waits
    assert replies(outcome.effects) == [("m1", Wait.JOIN, ErrorCode.unknown_member_id)]


def test_an_unchanged_follower_rejoining_a_stable_group_gets_its_generation_again() -> None:
    group = stable_group("m1", "m2")
    outcome = join(group, "m2", now=NOW + 10)
    assert outcome.answer is not None and outcome.answer["generation_id"] == 1
    assert group.state is GroupState.STABLE and not group.members["m2"].joining
    assert outcome.effects.sessions == [("m2", SESSION_MS)]


def test_the_leaders_rejoin_rebalances_and_answers_waiting_syncs() -> None:
    group = joined_group("m1", "m2")
    classic.join_written(group, classic.complete_join(group).generation or 0, NOW)
    assert sync(group, "m2").answer is None  # waits
    outcome = join(group, "m1", now=NOW + 10, protocols=[("range", b"new")])
    assert outcome.answer is None and outcome.effects.rebalance
    assert replies(outcome.effects) == [("m2", Wait.SYNC, ErrorCode.rebalance_in_progress)]
    assert not group.members["m2"].syncing
    assert group.rebalance_deadline_ms == NOW + 10 + REBALANCE_MS  # not an initial rebalance


def test_a_restarted_static_member_fences_its_old_incarnation() -> None:
    group = joined_group()
    group.pending_members.add("old")
    assert join(group, "old", instance="i1").answer is None
    outcome = join(group, "", instance="i1", fresh="new", now=NOW + 5)
    assert outcome.member_id == "i1-new"
    assert replies(outcome.effects) == [("old", Wait.JOIN, ErrorCode.fenced_instance_id)]
    # the old id's session is cancelled, the new id's armed
    assert outcome.effects.sessions[:2] == [("old", None), ("i1-new", SESSION_MS)]
    assert group.static_members == {"i1": "i1-new"} and list(group.members) == ["i1-new"]


def test_a_static_rejoin_of_a_stable_group_keeps_the_assignment_after_a_write() -> None:
    group = Group("g")
    assert join(group, "", instance="i1", fresh="a").answer is None
    classic.join_written(group, classic.complete_join(group).generation or 0, NOW)
    sync(group, "i1-a", {"i1-a": b"x"}, instance="i1")
    outcome = join(group, "", instance="i1", fresh="b", now=NOW + 5)
    assert outcome.answer is None and outcome.static_rejoin is not None
    assert outcome.effects.write and not outcome.effects.rebalance
    member, previous_leader = outcome.static_rejoin
    answer = classic.static_rejoin_answer(group, member, previous_leader)
    assert answer["member_id"] == "i1-b" and answer["leader"] == "i1-a"
    assert answer["generation_id"] == 1 and group.members["i1-b"].assignment == b"x"


# -- the rebalance barrier ---------------------------------------------------------------------


def test_an_initial_rebalance_waits_out_its_delay_in_steps() -> None:
    group = joined_group("m1")
    wait = classic.begin_wait(group, NOW, DELAY_MS)
    assert wait.initial and wait.hard_deadline_ms == NOW + REBALANCE_MS
    assert classic.barrier_check(group, wait, NOW, False) == (classic.CHECK_INTERVAL_MS, True)
    assert classic.barrier_check(group, wait, NOW + DELAY_MS - 10, True) == (10, True)
    assert classic.barrier_check(group, wait, NOW + DELAY_MS, True) is None


def test_new_joiners_extend_the_initial_delay_up_to_the_hard_deadline() -> None:
    group = joined_group("m1")
    wait = classic.begin_wait(group, NOW, DELAY_MS)
    group.rebalance_deadline_ms = NOW + 10 * REBALANCE_MS  # extended again and again
    assert classic.barrier_check(group, wait, NOW + REBALANCE_MS - 1, True) is not None
    assert classic.barrier_check(group, wait, NOW + REBALANCE_MS, True) is None


def test_a_rebalance_completes_once_everyone_rejoined_or_at_its_deadline() -> None:
    group = stable_group("m1", "m2")
    group.pending_members.add("m3")
    join(group, "m3", now=NOW)  # a newcomer: m1 and m2 must rejoin
    wait = classic.begin_wait(group, NOW, DELAY_MS)
    assert not wait.initial
    assert classic.barrier_check(group, wait, NOW, False) == (classic.CHECK_INTERVAL_MS, False)
    join(group, "m1", now=NOW + 1)
    join(group, "m2", now=NOW + 2)
    assert classic.barrier_check(group, wait, NOW + 3, False) is None
    # without m2, only the deadline ends it
    other = stable_group("m1", "m2")
    other.pending_members.add("m3")
    join(other, "m3", now=NOW)
    wait = classic.begin_wait(other, NOW, DELAY_MS)
    assert classic.barrier_check(other, wait, NOW + REBALANCE_MS - 1, False) == (1, False)
    assert classic.barrier_check(other, wait, NOW + REBALANCE_MS, False) is None


def test_completing_the_join_removes_who_did_not_rejoin_and_writes_first() -> None:
    group = stable_group("m1", "m2")
    join(group, "m1", now=NOW, protocols=[("range", b"new")])
    completion = classic.complete_join(group)
    assert completion.generation == 2 and completion.effects.write
    assert replies(completion.effects) == []  # m2 was not waiting
    assert completion.effects.sessions == [("m2", None)]
    assert list(group.members) == ["m1"] and group.state is GroupState.COMPLETING_REBALANCE
    assert group.members["m1"].joining  # answered only once the generation is written
    written = classic.join_written(group, 2, NOW + 7)
    assert replies(written) == [("m1", Wait.JOIN, 0)]
    assert written.replies[0].answer["members"] != []  # the leader learns every member
    assert written.sessions == [("m1", SESSION_MS)] and not group.members["m1"].joining


def test_a_rebalance_begun_during_the_write_takes_the_waiting_members_along() -> None:
    group = joined_group("m1")
    completion = classic.complete_join(group)
    group.pending_members.add("m2")
    join(group, "m2", now=NOW + 1)  # during the write of generation 1
    assert group.state is GroupState.PREPARING_REBALANCE
    assert classic.join_written(group, completion.generation or 0, NOW + 2) == Effects()
    assert group.members["m1"].joining and group.members["m2"].joining


def test_a_barrier_without_members_leaves_the_group_empty() -> None:
    group = stable_group("m1")
    _, effects = classic.leave(group, [("m1", None)], NOW, DELAY_MS)
    assert effects.rebalance and group.state is GroupState.PREPARING_REBALANCE
    completion = classic.complete_join(group)
    assert completion.generation is None and completion.effects.write
    assert (group.state, group.generation, group.leader) == (GroupState.EMPTY, 2, None)


# -- SyncGroup, Heartbeat, sessions ------------------------------------------------------------


def test_syncs_wait_for_the_leader_whose_assignments_are_written_first() -> None:
    group = joined_group("m1", "m2")
    classic.join_written(group, classic.complete_join(group).generation or 0, NOW)
    follower = sync(group, "m2", protocol=("consumer", "range"))
    assert follower.answer is None and group.members["m2"].syncing
    leader = sync(group, "m1", {"m1": b"a", "m2": b"b"})
    assert leader.answer is None and leader.effects.write and leader.assigned is not None
    assert group.state is GroupState.STABLE
    written = classic.assignments_written(group, leader.assigned)
    assert [(r.member_id, r.answer["assignment"]) for r in written.replies] == [
        ("m1", b"a"),
        ("m2", b"b"),
    ]
    late = sync(group, "m2")  # Stable: at once
    assert late.answer is not None and late.answer["assignment"] == b"b"


def test_heartbeat_restarts_the_session_and_tells_of_a_rebalance() -> None:
    group = stable_group("m1", "m2")
    code, effects = classic.heartbeat(group, 1, "m2", None, NOW + 100)
    assert code is ErrorCode.none and effects.sessions == [("m2", SESSION_MS)]
    assert group.members["m2"].last_heartbeat_ms == NOW + 100
    code, _ = classic.heartbeat(group, 0, "m2", None, NOW + 100)
    assert code is ErrorCode.illegal_generation
    join(group, "m1", protocols=[("range", b"new")])
    code, _ = classic.heartbeat(group, 1, "m2", None, NOW + 200)
    assert code is ErrorCode.rebalance_in_progress


def test_a_waiting_member_is_alive_an_idle_one_expires() -> None:
    group = joined_group("m1")
    effects, late = classic.session_expired(group, group.members["m1"], NOW + SESSION_MS, 0)
    assert late is None and effects.sessions == [("m1", SESSION_MS)]  # rearmed
    assert "m1" in group.members
    group = stable_group("m1", "m2")
    member = group.members["m2"]
    effects, late = classic.session_expired(group, member, NOW + SESSION_MS + 3, DELAY_MS)
    assert late == 3 and "m2" not in group.members
    assert effects.sessions == [("m2", None)] and effects.rebalance


def test_a_removed_member_s_waits_are_answered_unknown_member() -> None:
    group = joined_group("m1", "m2")
    _, effects = classic.leave(group, [("m2", None)], NOW, DELAY_MS)
    assert effects.replies == [
        Reply("m2", Wait.JOIN, {"error_code": ErrorCode.unknown_member_id, "member_id": "m2"})
    ]
    assert not effects.rebalance  # the running barrier goes on with whoever rejoined
