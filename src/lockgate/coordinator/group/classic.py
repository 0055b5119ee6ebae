# The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, session expiry and
# the rebalance barrier) as transitions over plain data. Each takes a Group, the request and
# `now` (wall clock, ms), moves the Group, and returns what to answer the caller, which waiting
# requests to answer (Reply), which session timers to arm or cancel, whether the rebalance
# timer must run and whether the group record must be written. No futures, no timer handles,
# no awaits: classic_runtime.py holds the waiting requests and the timers beside this state and
# does the writes.
#
# Invariants:
# - a member's `joining`/`syncing` flag is set exactly while the runtime holds a JoinGroup or
#   SyncGroup of it; every transition that ends such a wait clears the flag and emits its Reply;
# - a member that waits in a join or a sync is alive: its session timer is rearmed, not fired
#   (the rebalance timeout bounds the join; a new rebalance answers waiting syncs);
# - a generation's JoinGroup answers go out only once its group record is written, and only if
#   no other rebalance began meanwhile (the waiting members then get the next generation).
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any

from lockgate.coordinator.group.group import Group, Member
from lockgate.coordinator.group.records import GroupRecord, MemberRecord
from lockgate.coordinator.group.state import GroupState
from lockgate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Answer = dict[str, Any]

# The rebalance barrier looks again this often (ms) until its deadline: whether everyone has
# rejoined, or (initial delay) whether the delay new joiners extend has run out.
CHECK_INTERVAL_MS = 50


class Wait(enum.Enum):
    """The request of a member that waits for the group: a JoinGroup or a SyncGroup."""

    JOIN = "join"
    SYNC = "sync"


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a member's waiting request."""

    member_id: str
    wait: Wait
    answer: Answer


@dataclass(slots=True)
class Effects:
    replies: list[Reply] = field(default_factory=list)
    # in order: member id → arm its session timer for this many ms (None: cancel it)
    sessions: list[tuple[str, int | None]] = field(default_factory=list)
    rebalance: bool = False  # a rebalance began: the barrier's timer must run
    write: bool = False  # the group record must be written (group_record)


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A JoinGroup, as the coordinator hands it on (classic group, or a classic member of a
    consumer-protocol group)."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool  # (v4+: a new member is first told its id)


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """A SyncGroup, as the coordinator hands it on."""

    group_id: str
    generation: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None  # (v5+: checked against the group's when given)
    protocol_name: str | None
    assignments: dict[str, bytes]  # the leader's: member id → assignment


@dataclass(slots=True)
class JoinOutcome:
    effects: Effects
    member_id: str  # the member's id (a new member's is made here)
    answer: Answer | None  # None: the member waits for the generation (Wait.JOIN)
    # KIP-345: a static member's rejoin of a Stable group keeps its assignment: the group
    # record is written (the new member id must survive a restart), then static_rejoin_answer
    static_rejoin: tuple[Member, str | None] | None = None


@dataclass(slots=True)
class SyncOutcome:
    effects: Effects
    answer: Answer | None  # None: the member waits for the assignments (Wait.SYNC)
    # the leader's assignments: once the group record is written, every waiting member gets
    # this answer with its assignment (assignments_written)
    assigned: Answer | None = None


@dataclass(slots=True)
class Completion:
    effects: Effects
    # the generation whose waiting members are answered once its record is written
    # (join_written); None: the group ended Empty
    generation: int | None


@dataclass(frozen=True, slots=True)
class BarrierWait:
    """One wait of the rebalance barrier, fixed when it begins (and again when a generation's
    write found another rebalance begun): whether it began in Empty (the initial delay) and
    the latest it lasts once everyone has joined."""

    initial: bool
    hard_deadline_ms: int


def _error(code: ErrorCode, member_id: str) -> Answer:
    return {"error_code": code, "member_id": member_id}


def touch(member: Member, now: int, effects: Effects) -> None:
    """A sign of life: the member's session restarts. One timer per member (as Kafka's
    heartbeat purgatory), so an expiry happens at its deadline, not at the next sweep."""
    member.last_heartbeat_ms = now
    effects.sessions.append((member.member_id, member.session_timeout_ms))


# -- JoinGroup ---------------------------------------------------------------------------------


def join(
    group: Group, request: JoinRequest, *, fresh_id: str, now: int, initial_delay_ms: int
) -> JoinOutcome:
    """A JoinGroup of a classic group (the coordinator's checks before it: availability, group
    id, session timeout). `fresh_id` makes the id of a member that comes without one."""
    effects = Effects()
    member_id, group_instance_id = request.member_id, request.group_instance_id
    protocol_type, protocols = request.protocol_type, request.protocols

    def error(code: ErrorCode, member: str = member_id) -> JoinOutcome:
        return JoinOutcome(effects, member, _error(code, member))

    if not group.supports(protocol_type, protocols):
        return error(ErrorCode.inconsistent_group_protocol)
    named = bool(member_id)
    rejoined_static = False
    previous_leader = group.leader
    if not member_id:
        member_id = f"{group_instance_id or request.client_id}-{fresh_id}"
        if group_instance_id is None and request.require_known_member_id:
            group.pending_members.add(member_id)
            return error(ErrorCode.member_id_required, member_id)
        if group_instance_id is not None:
            rejoined_static = replace_static_member(group, group_instance_id, member_id, effects)
    elif member_id not in group.pending_members and (
        code := group.check_member(member_id, group_instance_id, None)
    ):
        # as Kafka: FENCED_INSTANCE_ID before the unknown-member check, so a replaced
        # incarnation stops instead of rejoining without an id and fencing its replacement
        # in turn; an instance id the group does not know is UNKNOWN_MEMBER_ID
        return error(code)
    group.pending_members.discard(member_id)
    member = group.members.get(member_id)
    if (
        named
        and member is not None
        and member.protocols == protocols
        and (
            group.state == GroupState.COMPLETING_REBALANCE
            or (group.state == GroupState.STABLE and member_id != group.leader)
        )
    ):
        # As Kafka: a member rejoining with unchanged metadata (it may have lost the answer
        # to its JoinGroup) gets the current generation again instead of starting another
        # rebalance; only the leader's rejoin in Stable starts one (it may have seen new
        # topic metadata). Without this, a client that resends JoinGroup after each
        # completed join (kafka-python does when its poll times out mid-join) rebalances
        # the group for ever.
        touch(member, now, effects)
        return JoinOutcome(effects, member_id, join_answer(group, member))
    if member is None:
        if not group.members:
            # the first member of an empty group sets its protocol type (as Kafka): the
            # type of an earlier generation must not refuse the newcomers
            group.protocol_type = protocol_type
        member = group.members[member_id] = Member(
            member_id,
            group_instance_id,
            request.client_id,
            request.client_host,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            protocol_type,
            protocols,
        )
        if group_instance_id is not None:
            group.static_members[group_instance_id] = member_id
    member.protocols = protocols
    member.session_timeout_ms = request.session_timeout_ms
    member.rebalance_timeout_ms = request.rebalance_timeout_ms
    touch(member, now, effects)
    if (
        rejoined_static
        and group.state == GroupState.STABLE
        and group.select_protocol() == group.protocol
    ):
        # KIP-345, as Kafka: a static member that restarted and rejoins a Stable group keeps
        # its assignment and nobody rebalances, unless its protocols change the group's
        # selected protocol (then it rebalances as any join)
        effects.write = True
        return JoinOutcome(effects, member_id, None, static_rejoin=(member, previous_leader))
    if member.joining:  # a JoinGroup it sent again: the one before is answered
        effects.replies.append(
            Reply(member_id, Wait.JOIN, _error(ErrorCode.unknown_member_id, member_id))
        )
    member.joining = True
    if not group.protocol_type:
        group.protocol_type = protocol_type
    if group.state != GroupState.PREPARING_REBALANCE:
        prepare_rebalance(group, f"{member_id} joined", now, initial_delay_ms, effects)
    elif initial_delay_ms and group.generation == 0:
        # a new joiner during the initial delay extends it (bounded by the barrier)
        group.rebalance_deadline_ms = max(group.rebalance_deadline_ms, now + initial_delay_ms)
    return JoinOutcome(effects, member_id, None)


def static_rejoin_answer(group: Group, member: Member, previous_leader: str | None) -> Answer:
    """The answer to a static member's rejoin of a Stable group (after its record's write):
    it names the leader from before the rejoin, so a rejoining leader does not compute
    assignments that a stable group would never hand out."""
    log.info(
        "group %s: static member %s rejoined as %s and keeps its assignment (no rebalance)",
        group.group_id,
        member.group_instance_id,
        member.member_id,
    )
    return {**join_answer(group, member), "leader": previous_leader, "members": []}


def replace_static_member(
    group: Group, instance_id: str, new_member_id: str, effects: Effects
) -> bool:
    """A static member that restarts takes its place back and fences its old incarnation.
    True if it had a place to take back."""
    old_id = group.static_members.get(instance_id)
    old = group.members.pop(old_id, None) if old_id else None
    if old is None:
        return False
    for waits, wait in ((old.joining, Wait.JOIN), (old.syncing, Wait.SYNC)):
        if waits:
            effects.replies.append(
                Reply(old.member_id, wait, _error(ErrorCode.fenced_instance_id, old.member_id))
            )
    effects.sessions.append((old.member_id, None))  # (the new id's session is armed next)
    old.member_id = new_member_id
    old.joining = old.syncing = False
    group.members[new_member_id] = old
    group.static_members[instance_id] = new_member_id
    if group.leader == old_id:
        group.leader = new_member_id
    return True


def join_answer(group: Group, member: Member) -> Answer:
    """The JoinGroup answer of the current generation; the leader gets every member."""
    everyone = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "metadata": m.metadata_for(group.protocol),
        }
        for m in group.members.values()
    ]
    return {
        "error_code": 0,
        "generation_id": group.generation,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol,
        "leader": group.leader,
        "member_id": member.member_id,
        "skip_assignment": False,
        "members": everyone if member.member_id == group.leader else [],
    }


# -- the rebalance barrier ---------------------------------------------------------------------


def prepare_rebalance(
    group: Group, reason: str, now: int, initial_delay_ms: int, effects: Effects
) -> None:
    """A rebalance begins: waiting syncs are answered REBALANCE_IN_PROGRESS and the barrier
    waits for the members to rejoin (the initial delay for a group that was Empty, else the
    longest rebalance timeout)."""
    initial = group.state == GroupState.EMPTY
    for member in group.members.values():
        if member.syncing:
            effects.replies.append(
                Reply(member.member_id, Wait.SYNC, {"error_code": ErrorCode.rebalance_in_progress})
            )
        member.syncing = False
    group.transition(GroupState.PREPARING_REBALANCE)
    log.info("group %s rebalancing (generation %d): %s", group.group_id, group.generation, reason)
    delay = initial_delay_ms if initial else group.max_rebalance_timeout_ms
    group.rebalance_deadline_ms = now + delay
    group.rebalance_initial = initial
    effects.rebalance = True


def begin_wait(group: Group, now: int, initial_delay_ms: int) -> BarrierWait:
    return BarrierWait(
        group.rebalance_initial,
        now + max(group.max_rebalance_timeout_ms, initial_delay_ms),
    )


def barrier_check(
    group: Group, wait: BarrierWait, now: int, waited_all_joined: bool
) -> tuple[int, bool] | None:
    """None: the join completes now. Else (ms until the next check, whether everyone had
    joined): a rebalance completes when everyone has rejoined, an initial one at the end of
    its delay (new joiners extend it, up to the hard deadline once everyone has joined), any
    one at its deadline. `waited_all_joined`: the check before found everyone joined."""
    deadline = group.rebalance_deadline_ms
    if waited_all_joined and now >= min(deadline, wait.hard_deadline_ms):
        return None
    remaining = deadline - now
    all_joined = group.all_joined()
    if remaining <= 0 or (not wait.initial and all_joined):
        return None
    return min(remaining, CHECK_INTERVAL_MS), wait.initial and all_joined


def complete_join(group: Group) -> Completion:
    """The barrier is over: members that did not rejoin are removed and the next generation
    begins (Empty without members); its record is to be written before anyone is answered."""
    effects = Effects(write=True)
    for member_id in [m for m, member in group.members.items() if not member.joining]:
        log.info("group %s: %s did not rejoin in time and is removed", group.group_id, member_id)
        remove_member(group, member_id, effects)
    group.generation += 1
    if not group.members:
        group.transition(GroupState.EMPTY)
        group.protocol = None
        group.leader = None
        return Completion(effects, None)
    group.protocol = group.select_protocol()
    if group.leader not in group.members:
        group.leader = next(iter(group.members))
    group.transition(GroupState.COMPLETING_REBALANCE)
    return Completion(effects, group.generation)


def join_written(group: Group, generation: int, now: int) -> Effects:
    """The generation's record is written: its waiting members get their JoinGroup answers
    and a new session, unless a member joined or left during the write and another
    rebalance began (they count as rejoined and get the next generation instead)."""
    effects = Effects()
    if group.state != GroupState.COMPLETING_REBALANCE or group.generation != generation:
        return effects
    for member in group.members.values():
        joining, member.joining = member.joining, False
        touch(member, now, effects)
        if joining:
            effects.replies.append(Reply(member.member_id, Wait.JOIN, join_answer(group, member)))
    log.info(
        "group %s generation %d: %d members, protocol %s, leader %s",
        group.group_id,
        group.generation,
        len(group.members),
        group.protocol,
        group.leader,
    )
    return effects


# -- SyncGroup, Heartbeat, LeaveGroup, sessions ------------------------------------------------


def sync(group: Group, request: SyncRequest, now: int) -> SyncOutcome:
    effects = Effects()
    member_id = request.member_id
    error = group.check_member(member_id, request.group_instance_id, request.generation)
    if error:
        return SyncOutcome(effects, {"error_code": error})
    if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
        request.protocol_name is not None and request.protocol_name != group.protocol
    ):
        return SyncOutcome(effects, {"error_code": ErrorCode.inconsistent_group_protocol})
    member = group.members[member_id]
    touch(member, now, effects)
    answer: Answer = {
        "error_code": 0,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol,
    }
    if group.state == GroupState.PREPARING_REBALANCE:
        return SyncOutcome(effects, {"error_code": ErrorCode.rebalance_in_progress})
    if group.state == GroupState.STABLE:
        return SyncOutcome(effects, {**answer, "assignment": member.assignment})
    member.syncing = True
    if member_id != group.leader:
        return SyncOutcome(effects, None)
    for m in group.members.values():
        m.assignment = request.assignments.get(m.member_id, b"")
    group.transition(GroupState.STABLE)
    effects.write = True
    return SyncOutcome(effects, None, answer)


def assignments_written(group: Group, answer: Answer) -> Effects:
    """The leader's assignments are written: every waiting SyncGroup gets its member's."""
    effects = Effects()
    for m in group.members.values():
        if m.syncing:
            m.syncing = False
            effects.replies.append(
                Reply(m.member_id, Wait.SYNC, {**answer, "assignment": m.assignment})
            )
    return effects


def heartbeat(
    group: Group, generation: int, member_id: str, group_instance_id: str | None, now: int
) -> tuple[ErrorCode, Effects]:
    effects = Effects()
    error = group.check_member(member_id, group_instance_id, generation)
    if error:
        return error, effects
    touch(group.members[member_id], now, effects)
    if group.state == GroupState.PREPARING_REBALANCE:
        return ErrorCode.rebalance_in_progress, effects
    return ErrorCode.none, effects


def leave(
    group: Group, members: list[tuple[str, str | None]], now: int, initial_delay_ms: int
) -> tuple[list[Answer], Effects]:
    effects = Effects()
    answers = []
    left = 0
    for member_id, instance_id in members:
        # as Kafka 4.4: without a member id, the static member of the instance id leaves
        # (an administrator's removal); a member id still pending (told
        # MEMBER_ID_REQUIRED) just goes; any other is checked as Heartbeat checks it. The
        # answer echoes the member id of the request; every departure rebalances.
        leaving: str | None = None
        if not member_id:
            if instance_id is not None:
                leaving = group.static_members.get(instance_id)
            code = ErrorCode.none if leaving is not None else ErrorCode.unknown_member_id
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            code = ErrorCode.none
        else:
            code = group.check_member(member_id, instance_id, None)
            leaving = member_id
        answers.append(
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
        )
        if code:
            continue
        if leaving is not None:
            remove_member(group, leaving, effects)
        left += 1
    if left:
        after_departure(group, f"{left} member(s) left", now, initial_delay_ms, effects)
    return answers, effects


def session_expired(
    group: Group, member: Member, now: int, initial_delay_ms: int
) -> tuple[Effects, int | None]:
    """The member's session timer fired. A member waiting in a join or a sync is alive (its
    timer is rearmed: None); else it is removed and the group rebalances: the effects and
    how late (ms) it expired after its deadline."""
    effects = Effects()
    if member.joining or member.syncing:
        effects.sessions.append((member.member_id, member.session_timeout_ms))
        return effects, None
    late_ms = now - member.last_heartbeat_ms - member.session_timeout_ms
    log.info(
        "group %s: session of %s expired (%d ms after its %d ms timeout)",
        group.group_id,
        member.member_id,
        late_ms,
        member.session_timeout_ms,
    )
    remove_member(group, member.member_id, effects)
    after_departure(group, f"session of {member.member_id} expired", now, initial_delay_ms, effects)
    return effects, late_ms


def remove_member(group: Group, member_id: str, effects: Effects) -> None:
    member = group.members.pop(member_id, None)
    if member is None:
        return
    effects.sessions.append((member_id, None))
    if member.group_instance_id and group.static_members.get(member.group_instance_id) == member_id:
        del group.static_members[member.group_instance_id]
    for waits, wait in ((member.joining, Wait.JOIN), (member.syncing, Wait.SYNC)):
        if waits:
            effects.replies.append(
                Reply(member_id, wait, _error(ErrorCode.unknown_member_id, member_id))
            )
    member.joining = member.syncing = False


def after_departure(
    group: Group, reason: str, now: int, initial_delay_ms: int, effects: Effects
) -> None:
    if group.state == GroupState.PREPARING_REBALANCE:
        return  # the running barrier completes the join with whoever rejoined
    if not group.members and group.state != GroupState.EMPTY:
        prepare_rebalance(group, reason, now, initial_delay_ms, effects)
        return
    if group.members:
        prepare_rebalance(group, reason, now, initial_delay_ms, effects)


# -- the group record --------------------------------------------------------------------------


def group_record(group: Group, now: int) -> GroupRecord:
    """The group's record in __consumer_offsets (Kafka's GroupMetadataValue) as of `now`,
    which becomes the time the group entered its state."""
    group.state_timestamp = now
    return GroupRecord(
        group.protocol_type,
        group.generation,
        group.protocol,
        group.leader,
        now,
        tuple(
            MemberRecord(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(group.protocol),
                m.assignment,
            )
            for m in group.members.values()
        ),
    )


def restore_group(group: Group, record: GroupRecord, now: int) -> None:
    """Replay: the group as its latest record left it (members get a session at load)."""
    group.protocol_type = record.protocol_type
    group.generation = record.generation
    group.protocol = record.protocol
    group.leader = record.leader
    group.members = {}
    group.static_members = {}
    for m in record.members:
        member = Member(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            record.protocol_type,
            [(record.protocol or "", m.subscription)],
            m.assignment,
            now,
        )
        group.members[m.member_id] = member
        if m.group_instance_id:
            group.static_members[m.group_instance_id] = m.member_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    group.state_timestamp = record.state_timestamp
