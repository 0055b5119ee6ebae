# The classic group protocol at run time: the I/O beside classic.py's transitions. Holds the
# requests that wait for the group (a member's JoinGroup until its generation is written, its
# SyncGroup until the leader's assignments are), one session timer per member and one
# rebalance barrier per group, and writes the group record to __consumer_offsets when a
# transition asks for it. Everything it decides it asks classic.py; it only answers, arms,
# cancels and writes.
#
# Invariants: a transition's effects are applied before anything else runs on the loop (the
# group record appended synchronously), so no request sees a state that is not about to be
# logged; waits are keyed by (group id, member id) and answered at most once.
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from lockgate.coordinator import writes
from lockgate.coordinator.group import classic
from lockgate.coordinator.group.classic import (
    Answer,
    BarrierWait,
    Effects,
    JoinRequest,
    SyncRequest,
    Wait,
)
from lockgate.coordinator.group.group import Group, Member
from lockgate.coordinator.group.records import group_key, group_value
from lockgate.coordinator.group.state import GroupState
from lockgate.coordinator.runtime import Deadline, Timer, Timers
from lockgate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Records = list[tuple[bytes, bytes | None]]
# appends records to a group's offsets partition; the future of their durability
Append = Callable[[str, Records], "asyncio.Future[None]"]


def append_any(append: Append, group_id: str, encoded: Records) -> asyncio.Future[None]:
    """`append`, or, with nothing to append, a durability already reached (no empty batch)."""
    if not encoded:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done
    return append(group_id, encoded)


@dataclass(slots=True, eq=False)
class _Barrier:
    """A group's running rebalance barrier: a check waiting on the clock (`timer`), or the
    write of the generation it completed."""

    group: Group
    timer: Timer | None = None
    stopped: bool = False  # the group left this runtime: a write under way answers nobody


class ClassicRuntime:
    def __init__(
        self,
        groups: dict[str, Group],
        append: Append,
        clock: Callable[[], int],
        timers: Timers,
        initial_delay_ms: int,
    ) -> None:
        self.groups = groups  # the coordinator's groups (shared: the timers check identity)
        self._append = append
        self._clock = clock
        self._timers = timers
        self.initial_delay_ms = initial_delay_ms
        self.joins: dict[tuple[str, str], asyncio.Future[Answer]] = {}
        self.syncs: dict[tuple[str, str], asyncio.Future[Answer]] = {}
        self.sessions: dict[tuple[str, str], Deadline] = {}
        self.barriers: dict[str, _Barrier] = {}
        self.sessions_expired = 0
        self.expiry_lateness_ms = 0.0  # the latest a session timer fired after its deadline

    # -- the APIs ----------------------------------------------------------------------------

    async def join(self, group: Group, request: JoinRequest) -> Answer:
        outcome = classic.join(
            group,
            request,
            fresh_id=str(uuid.uuid4()),
            now=self._clock(),
            initial_delay_ms=self.initial_delay_ms,
        )
        if outcome.static_rejoin is not None:
            durable = self._apply(group, outcome.effects)
            assert durable is not None  # (the new member id must survive a restart)
            member, previous_leader = outcome.static_rejoin
            try:
                await durable
            except writes.WriteFailure as exc:
                log.error("group %s: could not persist static member %s: %s", group.group_id,
                          member.member_id, exc)  # fmt: skip
            return classic.static_rejoin_answer(group, member, previous_leader)
        if outcome.answer is not None:
            self._apply(group, outcome.effects)
            return outcome.answer
        waiter, _ = self._wait(self.joins, group, outcome.member_id, outcome.effects)
        return await waiter

    async def sync(self, group: Group, request: SyncRequest) -> Answer:
        outcome = classic.sync(group, request, self._clock())
        if outcome.answer is not None:
            self._apply(group, outcome.effects)
            return outcome.answer
        waiter, durable = self._wait(self.syncs, group, request.member_id, outcome.effects)
        if outcome.assigned is not None:
            assert durable is not None
            try:
                await durable
            except writes.WriteFailure as exc:
                log.error("group %s: could not persist assignments: %s", group.group_id, exc)
            self._apply(group, classic.assignments_written(group, outcome.assigned))
        return await waiter

    def heartbeat(
        self, group: Group, generation: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        code, effects = classic.heartbeat(
            group, generation, member_id, group_instance_id, self._clock()
        )
        self._apply(group, effects)
        return code

    def leave(self, group: Group, members: list[tuple[str, str | None]]) -> list[Answer]:
        answers, effects = classic.leave(group, members, self._clock(), self.initial_delay_ms)
        self._apply(group, effects)
        return answers

    def touch(self, group: Group, member: Member) -> None:
        """A sign of life outside the group APIs (an offset commit, a load)."""
        effects = Effects()
        classic.touch(member, self._clock(), effects)
        self._apply(group, effects)

    # -- the group leaves this runtime -------------------------------------------------------

    def forget(self, group: Group, code: ErrorCode) -> None:
        """The group is no longer run as a classic group here (its partition unloaded, or it
        converts to the consumer protocol): its barrier and timers stop, and its members'
        waiting requests are answered `code` (they look for the coordinator, or rejoin)."""
        barrier = self.barriers.get(group.group_id)
        if barrier is not None and barrier.group is group:
            self._stop(barrier)
        for member in group.members.values():
            self._arm(group, member.member_id, None)
            for waits in (self.joins, self.syncs):
                waiter = waits.pop((group.group_id, member.member_id), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result({"error_code": code, "member_id": member.member_id})

    def adopt(self, group: Group, reason: str) -> asyncio.Future[None]:
        """A group converted to a classic one (Stable, its members with their assignments):
        its record is written, its members get sessions and it rebalances so they rejoin
        and elect a leader. Returns the record's durability."""
        durable = self._persist(group)
        effects = Effects()
        now = self._clock()
        for member in group.members.values():
            classic.touch(member, now, effects)
        classic.prepare_rebalance(group, reason, now, self.initial_delay_ms, effects)
        self._apply(group, effects)
        return durable

    # -- effects -----------------------------------------------------------------------------

    def _apply(self, group: Group, effects: Effects) -> asyncio.Future[None] | None:
        """Answers, timers and the group record's write (the future of its durability)."""
        self._answer(group, effects)
        for member_id, timeout_ms in effects.sessions:
            self._arm(group, member_id, timeout_ms)
        if effects.rebalance:
            self._start_barrier(group)
        return self._persist(group) if effects.write else None

    def _answer(self, group: Group, effects: Effects) -> None:
        for reply in effects.replies:
            waits = self.joins if reply.wait is Wait.JOIN else self.syncs
            waiter = waits.pop((group.group_id, reply.member_id), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(reply.answer)

    def _wait(
        self,
        waits: dict[tuple[str, str], asyncio.Future[Answer]],
        group: Group,
        member_id: str,
        effects: Effects,
    ) -> tuple[asyncio.Future[Answer], asyncio.Future[None] | None]:
        """The caller's request waits; the transition's replies are to requests from before
        it (a JoinGroup sent again is answered; a SyncGroup sent twice is replaced, as Kafka
        does). Returns the wait and the durability of the group record's write, if any."""
        self._answer(group, effects)
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        waits[(group.group_id, member_id)] = waiter
        rest = Effects([], effects.sessions, effects.rebalance, effects.write)
        return waiter, self._apply(group, rest)

    def _persist(self, group: Group) -> asyncio.Future[None]:
        record = classic.group_record(group, self._clock())
        return self._append(group.group_id, [(group_key(group.group_id), group_value(record))])

    # -- session timers ----------------------------------------------------------------------

    def _arm(self, group: Group, member_id: str, timeout_ms: int | None) -> None:
        key = (group.group_id, member_id)
        timer = self.sessions.pop(key, None)
        if timer is not None:
            timer.cancel()
        if timeout_ms is not None:
            self.sessions[key] = Deadline(
                self._timers, self._clock, timeout_ms / 1000, self._session_timer, group, member_id
            )

    def _session_timer(self, group: Group, member_id: str) -> None:
        deadline = self.sessions.pop((group.group_id, member_id), None)
        if deadline is None or self.groups.get(group.group_id) is not group:
            return
        member = group.members.get(member_id)
        if member is None:
            return
        effects, late_ms = classic.session_expired(
            group, member, self._clock(), self.initial_delay_ms
        )
        if late_ms is not None:
            self.sessions_expired += 1
            self.expiry_lateness_ms = max(self.expiry_lateness_ms, deadline.late_ms or 0.0)
        self._apply(group, effects)

    # -- the rebalance barrier ---------------------------------------------------------------

    def _start_barrier(self, group: Group) -> None:
        """A barrier that runs already (waiting, or writing the previous generation) notices
        the new rebalance itself and runs it too."""
        barrier = self.barriers.get(group.group_id)
        if barrier is not None and barrier.group is group:
            return
        barrier = self.barriers[group.group_id] = _Barrier(group)
        barrier.timer = self._timers.call_soon(self._check, barrier, None, False)

    def _check(self, barrier: _Barrier, wait: BarrierWait | None, all_joined: bool) -> None:
        barrier.timer = None
        group = barrier.group
        if group.state != GroupState.PREPARING_REBALANCE:
            self._end(barrier)
            return
        now = self._clock()
        if wait is None:
            wait = classic.begin_wait(group, now, self.initial_delay_ms)
        step = classic.barrier_check(group, wait, now, all_joined)
        if step is not None:
            delay_ms, everyone = step
            barrier.timer = self._timers.call_later(
                delay_ms / 1000, self._check, barrier, wait, everyone
            )
            return
        completion = classic.complete_join(group)
        durable = self._apply(group, completion.effects)
        assert durable is not None  # (a generation is written before anyone is answered)
        if durable.done():  # (as an await of a done future: no turn of the loop between)
            self._written(barrier, completion.generation, durable)
            return
        durable.add_done_callback(lambda done: self._written(barrier, completion.generation, done))

    def _written(
        self, barrier: _Barrier, generation: int | None, durable: asyncio.Future[None]
    ) -> None:
        """The generation's record is written (or failed: logged, the group goes on)."""
        exc = None if durable.cancelled() else durable.exception()
        if barrier.stopped:
            return
        group = barrier.group
        if exc is not None:
            if generation is None:
                log.error("group %s: could not persist it empty: %s", group.group_id, exc)
            else:
                log.error("group %s: could not persist generation %d: %s", group.group_id,
                          group.generation, exc)  # fmt: skip
        if generation is not None:
            self._apply(group, classic.join_written(group, generation, self._clock()))
        self._check(barrier, None, False)  # another rebalance may have begun during the write

    def _stop(self, barrier: _Barrier) -> None:
        if barrier.timer is not None:
            barrier.timer.cancel()
        barrier.timer = None
        barrier.stopped = True
        self._end(barrier)

    def _end(self, barrier: _Barrier) -> None:
        if self.barriers.get(barrier.group.group_id) is barrier:
            del self.barriers[barrier.group.group_id]
