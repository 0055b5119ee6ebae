# The leader's side of Kafka's replication for one partition, pure: each follower's log end
# offset (what its Fetch asked for), when it was last caught up, the high watermark (the ISR's
# minimum log end offset, never moving back), which followers to drop from the ISR (behind
# for longer than replica.lag.time.max.ms) or to add (caught up to the high watermark within
# this leader's epoch), which followers may serve a consumer at an offset (KIP-392), and when
# an acks=all write is answered. Time is passed in; the broker feeds Fetch requests in and
# proposes ISR changes to the metadata store.
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lockgate.protocol.errors import ErrorCode

UNKNOWN = -1


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = UNKNOWN  # unknown until its first fetch under this leader
    last_caught_up_ms: int = 0
    # the leader's log end offset and the time of the follower's previous fetch: a fetch that
    # reaches what the leader had then proves the follower was caught up then
    last_fetch_leader_end: int = UNKNOWN
    last_fetch_ms: int = 0
    # the follower's log start, as its last fetch said (a consumer sent to it must find the
    # offset it reads from there: KIP-392)
    log_start_offset: int = UNKNOWN


class LeaderReplication:
    def __init__(
        self,
        leader: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        epoch_start_offset: int,
        high_watermark: int,
        now_ms: int,
    ) -> None:
        """A new term of leadership. Followers count as caught up at its start (as in Kafka),
        so that none is dropped before it had the chance to fetch."""
        self.leader = leader
        self.isr = frozenset(isr) | {leader}
        # the leader's log end offset when it took over: a follower is in sync only once it
        # has everything up to there (KIP-101: nothing of an older epoch is left unsettled)
        self.epoch_start_offset = epoch_start_offset
        self.high_watermark = high_watermark
        self.followers = {
            r: FollowerState(last_caught_up_ms=now_ms) for r in replicas if r != leader
        }

    def on_fetch(
        self,
        replica: int,
        fetch_offset: int,
        leader_end: int,
        now_ms: int,
        log_start_offset: int = UNKNOWN,
    ) -> None:
        """A follower's Fetch at `fetch_offset`: everything below is on its log, from
        `log_start_offset` on. Kafka's rule for being caught up: the fetch reaches the
        leader's current end, or the end the leader had at the follower's previous fetch (then
        it was caught up at that time)."""
        state = self.followers.get(replica)
        if state is None:
            return
        state.log_start_offset = log_start_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_end >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.last_fetch_leader_end = leader_end
        state.last_fetch_ms = now_ms

    def update_high_watermark(self, leader_end: int) -> bool:
        """The ISR's minimum log end offset (the leader's included); True if it moved. A member
        that has not fetched yet holds it where it is."""
        ends = [leader_end]
        for replica in self.isr - {self.leader}:
            state = self.followers.get(replica)
            ends.append(UNKNOWN if state is None else state.log_end_offset)
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def lagging(self, now_ms: int, lag_time_max_ms: int) -> set[int]:
        """ISR followers not caught up for longer than replica.lag.time.max.ms."""
        return {
            r
            for r in self.isr - {self.leader}
            if (state := self.followers.get(r)) is not None
            and now_ms - state.last_caught_up_ms > lag_time_max_ms
        }

    def caught_up(self, alive: Iterable[int]) -> set[int]:
        """Live followers outside the ISR that may join it: their log reaches the high
        watermark and the start of this leader's epoch."""
        floor = max(self.high_watermark, self.epoch_start_offset)
        return {
            r
            for r in set(alive) - self.isr
            if (state := self.followers.get(r)) is not None and state.log_end_offset >= floor
        }

    def may_serve(self, fetch_offset: int) -> list[int]:
        """The followers a consumer reading at `fetch_offset` may be sent to (KIP-392, as
        Kafka's leader picks them): in the ISR (a lagging follower could keep a consumer
        behind for good), their log holding the offset (log start at or below it, log end at
        or past it)."""
        return sorted(
            r
            for r in self.isr - {self.leader}
            if (state := self.followers.get(r)) is not None
            and state.log_start_offset <= fetch_offset <= state.log_end_offset
        )

    def set_isr(self, isr: Iterable[int]) -> None:
        """The ISR as the metadata store now has it (after this leader's change or another)."""
        self.isr = frozenset(isr) | {self.leader}


def check_before_append(acks: int, isr_size: int, min_insync_replicas: int) -> ErrorCode:
    """acks=all into an ISR smaller than min.insync.replicas is refused before the append."""
    if acks == -1 and isr_size < min_insync_replicas:
        return ErrorCode.not_enough_replicas
    return ErrorCode.none


def acks_all_answer(
    required_offset: int, high_watermark: int, isr_size: int, min_insync_replicas: int
) -> ErrorCode | None:
    """The answer to an acks=all write whose last offset is `required_offset - 1`, or None
    while it must still wait: answered when the high watermark passes it, with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas meanwhile
    (the records are on the log but not as safe as asked)."""
    if high_watermark < required_offset:
        return None
    if isr_size < min_insync_replicas:
        return ErrorCode.not_enough_replicas_after_append
    return ErrorCode.none
