# One share partition (a share group's view of one topic-partition) at its leader: which of its
# records are available, acquired by a member under a time lock, acknowledged or archived
# (Kafka's SharePartition). Pure: no awaits, no I/O, time passed in. The manager (manager.py)
# loads it from the persister, reads the log for it, writes what changed and arms its timer.
#
# Invariants:
# - every offset below `start_offset` (SPSO) is done (acknowledged or archived), except records
#   under an acknowledgement's write when the log start moved past them (move_to_log_start
#   leaves them to their write); the cache holds the in-flight window as batches (log batches,
#   or persisted ranges) in offset order, each a contiguous range of offsets, the first batch
#   possibly starting below SPSO (a batch leaves the cache once wholly below it); offsets the
#   log no longer has may leave holes between batches;
# - a batch holds one state for all its offsets (`InFlightBatch.head`: state, delivery count,
#   member, lock deadline, pending) while they agree, so that the common case, a log batch
#   acquired and then acknowledged, released or expired whole, costs one update per batch, not
#   one per record (as Kafka's InFlightBatch); an operation on part of a batch, or one that
#   treats its offsets differently, splits it into `records`, one state per offset, and a split
#   batch whose offsets agree again becomes whole at the end of the acquisition, commit,
#   rollback, release or log-start move that changed it (an acknowledgement's changes name
#   cached ranges, not state objects, so either form serves them); whole or split is invisible
#   outside this module;
# - a record moves AVAILABLE -> ACQUIRED -> AVAILABLE | ACKNOWLEDGED | ARCHIVED only; the
#   delivery count grows on acquisition, and a record going back to AVAILABLE whose count
#   reached the delivery limit is ARCHIVED instead (a lock expiry, a RELEASE, or its member's
#   session ending alike: Kafka 4.4 hands such records out again with the next count);
# - an acknowledgement is two-phase: its records are `pending` (neither acquirable nor
#   acknowledgeable) until the durable write commits the change, or rolls it back; a lock
#   timeout or a release stands at once (the write that follows may fail: Kafka does the same);
#   only ACQUIRED records are ever pending;
# - acquisitions are never written: after a crash the records come back AVAILABLE with their
#   last written delivery count.
from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from lockgate.coordinator.share.records import StateBatch
from lockgate.protocol.errors import ErrorCode


class RecordState(enum.IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3  # share.version 2 with a dead-letter queue only (not used by lockgate)
    ARCHIVED = 4


TERMINAL = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})

# AcknowledgeTypes on the wire (GAP is never a client API type: the offset had no record)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4

# ShareAcquireMode (ShareFetch v2)
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1


class AcknowledgeError(Exception):
    """A share partition's acknowledgement refused whole (nothing of it applied)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Limits:
    """The group configs a share partition obeys (their effective values, read at each call:
    they are dynamic)."""

    delivery_count_limit: int = 5
    record_lock_duration_ms: int = 30_000
    max_record_locks: int = 2_000
    renew_enabled: bool = True


@dataclass(slots=True)
class OffsetState:
    """The state of one offset, or of every offset of a whole batch."""

    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member: str = ""  # who holds it while ACQUIRED
    deadline_ms: int = 0  # when its acquisition lock expires, while ACQUIRED
    pending: bool = False  # an acknowledgement waits for its write

    def copy(self) -> OffsetState:
        return OffsetState(
            self.state, self.delivery_count, self.member, self.deadline_ms, self.pending
        )


@dataclass(slots=True, eq=False)
class InFlightBatch:
    """Consecutive cached offsets [first_offset, last_offset] (one log batch, or a persisted
    range). Whole (`records` None): every offset is in `head`'s state, so that a whole-batch
    operation is one update. Split: `records` holds one state per offset; `head` is stale."""

    first_offset: int
    last_offset: int
    head: OffsetState = field(default_factory=OffsetState)
    records: list[OffsetState] | None = None

    def split(self) -> list[OffsetState]:
        """One state per offset from now on (an operation treats the offsets apart)."""
        records = self.records
        if records is None:
            head = self.head
            size = self.last_offset - self.first_offset + 1
            records = self.records = [head.copy() for _ in range(size)]
        return records

    def merge(self) -> None:
        """Whole again once every offset agrees: the next whole-batch operation is one update
        again (a partial acquisition taken up by the next one, say)."""
        records = self.records
        if records is not None:
            head = records[0]
            # (the ends first: a batch split for good mostly differs there, found in O(1))
            if records[-1] == head and all(record == head for record in records):
                self.head = head
                self.records = None

    def parts(self, first: int, last: int) -> Iterator[tuple[int, int, OffsetState]]:
        """The states of [first, last] (inside this batch) as (first, last, state): one part
        if the batch is whole, else one per offset."""
        records = self.records
        if records is None:
            yield first, last, self.head
            return
        base = self.first_offset
        for offset in range(first, last + 1):
            yield offset, offset, records[offset - base]

    def edit(self, first: int, last: int) -> Iterator[tuple[int, int, OffsetState]]:
        """parts() of [first, last] to change: the head only if [first, last] is the whole
        batch (else the batch splits first, so that the other offsets keep their state)."""
        if self.records is None and (first != self.first_offset or last != self.last_offset):
            self.split()
        return self.parts(first, last)


@dataclass(frozen=True, slots=True)
class LogBatch:
    """What acquisition needs of one log batch returned by the read."""

    first_offset: int
    last_offset: int
    producer_id: int = -1
    transactional: bool = False
    control: bool = False


@dataclass(frozen=True, slots=True)
class AbortedRange:
    """An aborted transaction's data: its producer's batches from `first_offset` up to its
    abort marker at `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateWrite:
    """What WriteShareGroupState carries for a change: the start offset after it, the number
    of done offsets at or above it, and the changed ranges in their new states."""

    start_offset: int
    delivery_complete_count: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class Acquisition:
    ranges: tuple[AcquiredRange, ...]
    write: StateWrite | None  # gaps and aborted records archived on the way, to write


@dataclass(slots=True)
class Transition:
    """An acknowledgement waiting for its write: the cached ranges it changes, in offset
    order, each (batch, first, last, the state its offsets move to)."""

    member: str
    changes: list[tuple[InFlightBatch, int, int, RecordState]]
    write: StateWrite | None
    done: bool = False


@dataclass(frozen=True, slots=True)
class AckBatch:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]

    def type_of(self, offset: int) -> int:
        if len(self.types) == 1:
            return self.types[0]
        return self.types[offset - self.first_offset]


_ACK_TARGET = {
    GAP: RecordState.ARCHIVED,
    ACCEPT: RecordState.ACKNOWLEDGED,
    RELEASE: RecordState.AVAILABLE,
    REJECT: RecordState.ARCHIVED,
}


def validate_ack_batches(batches: Sequence[AckBatch], version: int, renew: bool) -> str | None:
    """Kafka's checks of one partition's AcknowledgementBatches, in its order: the message of
    the first that fails (INVALID_REQUEST for the whole partition), or None."""
    previous_last = -1
    highest_type = RENEW if version >= 2 else REJECT
    for batch in batches:
        if batch.first_offset > batch.last_offset:
            return "First offset of the acknowledgement batch is greater than its last offset."
        if batch.first_offset < previous_last:
            return "Acknowledgement batches are not in order or overlap."
        if not batch.types:
            return "Acknowledge types of a batch are empty."
        span = batch.last_offset - batch.first_offset + 1
        if len(batch.types) > 1 and len(batch.types) != span:
            return "Acknowledge types do not match the batch's offsets."
        if any(t < 0 or t > highest_type for t in batch.types):
            return "Invalid acknowledge type."
        if RENEW in batch.types and not renew:
            return "Renew acknowledgement type used while IsRenewAck is false."
        previous_last = batch.last_offset
    return None


@dataclass(slots=True)
class SharePartition:
    """The in-flight state of one share partition; `state_epoch` is the share coordinator's
    epoch for it (the group epoch when it was initialized)."""

    start_offset: int
    state_epoch: int = 0
    batches: list[InFlightBatch] = field(default_factory=list)
    _firsts: list[int] = field(default_factory=list)  # batches' first offsets, for bisect

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def loaded(
        cls, start_offset: int, state_epoch: int, persisted: Iterable[StateBatch]
    ) -> SharePartition:
        """From ReadShareGroupState's answer (start offset already resolved): the persisted
        ranges at or above the start offset become cached batches in their states; offsets
        between them (acquired by a previous leader, never written) are AVAILABLE again, with
        the delivery count of their last write (none: 0)."""
        partition = cls(start_offset, state_epoch)
        cursor = start_offset
        for item in sorted(persisted, key=lambda b: b.first_offset):
            first = max(item.first_offset, cursor)
            if first > item.last_offset:
                continue
            if first > cursor:  # a gap: fetched and acquired again
                partition._append(InFlightBatch(cursor, first - 1))
            state = RecordState(item.delivery_state)
            if state not in (RecordState.AVAILABLE, *TERMINAL):
                state = RecordState.AVAILABLE  # ARCHIVING without a DLQ: deliver again
            head = OffsetState(state, item.delivery_count)
            partition._append(InFlightBatch(first, item.last_offset, head))
            cursor = item.last_offset + 1
        partition._advance()
        return partition

    # -- queries ---------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """SPEO: the last cached offset (an empty cache: the start offset, as Kafka)."""
        return self.batches[-1].last_offset if self.batches else self.start_offset

    @property
    def last_cached(self) -> int:
        return self.batches[-1].last_offset if self.batches else self.start_offset - 1

    def in_flight_count(self) -> int:
        return max(0, self.last_cached - self.start_offset + 1)

    def state_of(self, offset: int) -> OffsetState | None:
        """A copy of the cached offset's state (None: not cached)."""
        i = bisect.bisect_right(self._firsts, offset) - 1
        if i < 0:
            return None
        batch = self.batches[i]
        if offset > batch.last_offset:
            return None
        if batch.records is None:
            return batch.head.copy()
        return batch.records[offset - batch.first_offset].copy()

    def _from(self, first: int) -> Iterator[InFlightBatch]:
        """The cached batches holding offsets at or above `first`, in order (one lookup)."""
        batches = self.batches
        i = max(0, bisect.bisect_right(self._firsts, first) - 1)
        while i < len(batches):  # (acquisition appends behind the walk: len each time)
            batch = batches[i]
            if batch.last_offset >= first:
                yield batch
            i += 1

    def offsets(self) -> Iterable[tuple[int, OffsetState]]:
        """Every cached offset at or above the start offset, in order, with its state (a whole
        batch's offsets all show its head: read them, do not change them)."""
        start = self.start_offset
        for batch in self._from(start):
            low, end = max(start, batch.first_offset), batch.last_offset + 1
            records = batch.records
            if records is None:
                yield from zip(range(low, end), itertools.repeat(batch.head))
            else:
                rest = itertools.islice(records, low - batch.first_offset, None)
                yield from zip(range(low, end), rest, strict=True)

    def next_fetch_offset(self) -> int:
        """Where the next read starts: the first AVAILABLE cached offset, else past the cache."""
        start = self.start_offset
        for batch in self._from(start):
            for first, _last, record in batch.parts(
                max(start, batch.first_offset), batch.last_offset
            ):
                if record.state == RecordState.AVAILABLE and not record.pending:
                    return first
        return self.last_cached + 1

    def can_acquire(self, limits: Limits) -> bool:
        """Whether a fetch may acquire anything: a cached AVAILABLE record, or room for new
        ones under the in-flight limit."""
        if self.in_flight_count() < limits.max_record_locks:
            return True
        return self.next_fetch_offset() <= self.last_cached

    def next_deadline(self) -> int | None:
        """When the earliest acquisition lock expires (None: nothing acquired)."""
        # every batch, the first one's offsets below the start offset too: they are done,
        # except records whose acknowledgement's write is under way when the log start moved
        # past them (their lock still counts). One look per whole batch.
        acquired = RecordState.ACQUIRED
        earliest: int | None = None
        for batch in self.batches:
            records = batch.records
            for record in (batch.head,) if records is None else records:
                if record.state == acquired and (earliest is None or record.deadline_ms < earliest):
                    earliest = record.deadline_ms
        return earliest

    def delivery_complete_count(self) -> int:
        """Done offsets at or above the start offset (what DescribeShareGroupOffsets' lag
        subtracts)."""
        return self._start_and_done(())[1]

    # -- acquisition -----------------------------------------------------------------------

    def acquire(
        self,
        member: str,
        log_batches: Iterable[LogBatch],
        max_records: int,
        now_ms: int,
        limits: Limits,
        *,
        mode: int = BATCH_OPTIMIZED,
        batch_size: int = 0,
        read_from: int | None = None,
        aborted: Sequence[AbortedRange] = (),
    ) -> Acquisition:
        """Acquires for `member` the AVAILABLE records of `log_batches` (read from
        `read_from`, the next fetch offset), at most `max_records` (batch_optimized: whole log
        batches, so possibly more), new ones only under the in-flight limit. Cached AVAILABLE
        offsets the read skipped (gone from the log) and aborted transactions' records
        (`aborted`, read_committed) are archived; control records stay in acquired ranges.
        Records delivered often already are handed out in ever fewer numbers (a poison record
        ends up alone: _delivery_cap)."""
        deadline = now_ms + limits.record_lock_duration_ms
        room = limits.max_record_locks - self.in_flight_count()
        # acquired runs: (first, last, delivery count, a log batch's last acquired offset)
        taken: list[tuple[int, int, int, bool]] = []
        archived = _Runs()
        touched: list[InFlightBatch] = []  # split batches changed: whole again?
        count = 0
        cap = max_records  # lowered by records delivered often already
        exact = mode == RECORD_LIMIT  # the cap holds exactly, not at batch boundaries
        cursor = self.next_fetch_offset() if read_from is None else read_from
        # the next log batch only while the cap allows: the manager reads them lazily
        remaining = iter(log_batches)
        while count < cap and (log_batch := next(remaining, None)) is not None:
            cursor = self._archive_gap(cursor, log_batch.first_offset, archived, touched)
            cursor = max(cursor, log_batch.last_offset + 1)
            first = max(log_batch.first_offset, self.start_offset)
            if first > log_batch.last_offset:
                continue
            is_aborted = _is_aborted(log_batch, aborted)
            before = len(taken)
            # records already cached: re-acquire the AVAILABLE ones
            cached_last = min(log_batch.last_offset, self.last_cached)
            full = False
            for cached in self._from(first):
                if cached.first_offset > cached_last:
                    break
                low, high = max(first, cached.first_offset), min(cached_last, cached.last_offset)
                if cached.records is None:
                    head = cached.head
                    if head.state != RecordState.AVAILABLE or head.pending:
                        continue
                    if not is_aborted:
                        # (the cap is the same for all: looked at here so that a whole
                        # batch the cap allows is taken whole, one that it cuts is split)
                        throttled = _delivery_cap(head.delivery_count, limits, max_records)
                        if throttled is not None:
                            cap, exact = min(cap, throttled), True
                        if exact and count >= cap:
                            break
                        if exact and count + (high - low + 1) > cap:
                            cached.split()
                for part_first, part_last, record in cached.edit(low, high):
                    if record.state != RecordState.AVAILABLE or record.pending:
                        continue
                    if is_aborted:
                        record.state = RecordState.ARCHIVED
                        archived.add(
                            part_first, part_last, RecordState.ARCHIVED, record.delivery_count
                        )
                        continue
                    throttled = _delivery_cap(record.delivery_count, limits, max_records)
                    if throttled is not None:
                        cap, exact = min(cap, throttled), True
                    if exact and count >= cap:
                        full = True
                        break
                    self._take(record, member, deadline)
                    _add_taken(taken, before, part_first, part_last, record.delivery_count)
                    count += part_last - part_first + 1
                if cached.records is not None:
                    touched.append(cached)
                if full:
                    break
            # records new to the cache: the whole log batch is cached, as one batch
            new_first = max(first, self.last_cached + 1)
            if new_first <= log_batch.last_offset:
                if room <= 0 or (exact and count >= cap):
                    break  # at the in-flight limit (or the cap): nothing new
                size = log_batch.last_offset - new_first + 1
                room -= size
                batch = InFlightBatch(new_first, log_batch.last_offset)
                self._append(batch)
                if is_aborted:
                    batch.head.state = RecordState.ARCHIVED
                    archived.add(new_first, batch.last_offset, RecordState.ARCHIVED, 0)
                else:
                    take = min(size, cap - count) if exact else size
                    take_last = new_first + take - 1
                    for _first, _last, record in batch.edit(new_first, take_last):
                        self._take(record, member, deadline)
                    _add_taken(taken, before, new_first, take_last, 1)
                    count += take
            if len(taken) > before and batch_size > 0:
                last_first, last_last, delivery_count, _ = taken[-1]
                taken[-1] = (last_first, last_last, delivery_count, True)  # a log batch's end
        _merge(touched)
        write = None
        if archived:
            write = StateWrite(*self._start_and_done(()), archived.batches())
            self._advance()
        return Acquisition(_ranges(taken, batch_size), write)

    def _archive_gap(
        self, cursor: int, upto: int, archived: _Runs, touched: list[InFlightBatch]
    ) -> int:
        """Cached AVAILABLE offsets in [cursor, upto) that the log no longer has: ARCHIVED."""
        first, last = max(cursor, self.start_offset), upto - 1
        if first <= last:
            for cached in self._from(first):
                if cached.first_offset > last:
                    break
                head = cached.head
                if cached.records is None and (head.state != RecordState.AVAILABLE or head.pending):
                    continue
                low, high = max(first, cached.first_offset), min(last, cached.last_offset)
                for part_first, part_last, record in cached.edit(low, high):
                    if record.state == RecordState.AVAILABLE and not record.pending:
                        record.state = RecordState.ARCHIVED
                        archived.add(
                            part_first, part_last, RecordState.ARCHIVED, record.delivery_count
                        )
                if cached.records is not None:
                    touched.append(cached)
        return max(cursor, upto)

    @staticmethod
    def _take(record: OffsetState, member: str, deadline: int) -> None:
        record.state = RecordState.ACQUIRED
        record.delivery_count += 1
        record.member = member
        record.deadline_ms = deadline

    # -- acknowledgement -------------------------------------------------------------------

    def acknowledge(
        self, member: str, batches: Sequence[AckBatch], now_ms: int, limits: Limits
    ) -> Transition:
        """Checks and starts `member`'s acknowledgement of `batches` (already validated by
        validate_ack_batches): every offset at or above the start offset must be ACQUIRED by
        this member with no transition under way, else AcknowledgeError and nothing changes.
        RENEW restarts the locks at once; the other types wait for `commit` (after the write)
        or `rollback`."""
        wanted: list[tuple[int, AckBatch]] = []  # (first offset at or above SPSO, batch)
        for batch in batches:
            if batch.last_offset < self.start_offset:
                continue  # already done: ignored, as Kafka
            if not self.batches:
                raise AcknowledgeError(
                    ErrorCode.invalid_record_state, "No records found in the cache."
                )
            if batch.first_offset > self.last_cached:
                raise AcknowledgeError(
                    ErrorCode.invalid_request, "The first offset is past the acquired records."
                )
            if batch.last_offset > self.last_cached:
                raise AcknowledgeError(
                    ErrorCode.invalid_request, "Acknowledgement beyond the last fetched offset."
                )
            first = max(batch.first_offset, self.start_offset)
            self._check_acquired(member, first, batch, limits)
            wanted.append((first, batch))
        # every check passed: now the changes
        deadline = now_ms + limits.record_lock_duration_ms
        changes: list[tuple[InFlightBatch, int, int, RecordState]] = []
        runs = _Runs()
        for first, last, kind, renew in _actions(wanted):
            target = _ACK_TARGET.get(kind)  # None: RENEW alone
            for cached in self._from(first):
                if cached.first_offset > last:
                    break
                low, high = max(first, cached.first_offset), min(last, cached.last_offset)
                for part_first, part_last, record in cached.edit(low, high):
                    if renew:
                        record.deadline_ms = deadline
                    if target is None:
                        continue
                    state = target
                    if state == RecordState.AVAILABLE and (
                        record.delivery_count >= limits.delivery_count_limit
                    ):
                        state = RecordState.ARCHIVED
                    record.pending = True
                    runs.add(part_first, part_last, state, record.delivery_count)
                    _add_change(changes, cached, part_first, part_last, state)
        if not changes:
            return Transition(member, changes, None, done=True)
        overlay = [(first, last, state) for _batch, first, last, state in changes]
        write = StateWrite(*self._start_and_done(overlay), runs.batches())
        return Transition(member, changes, write)

    def _check_acquired(self, member: str, first: int, batch: AckBatch, limits: Limits) -> None:
        """AcknowledgeError unless every cached offset of `batch` from `first` is ACQUIRED by
        `member` with no transition under way (the first offset that fails, in Kafka's order:
        its state, then a RENEW while renewal is disabled)."""
        check_renew = not limits.renew_enabled and RENEW in batch.types
        seen = 0
        for cached in self._from(first):
            if cached.first_offset > batch.last_offset:
                break
            low, high = max(first, cached.first_offset), min(batch.last_offset, cached.last_offset)
            for part_first, part_last, record in cached.parts(low, high):
                if (
                    record.state != RecordState.ACQUIRED
                    or record.member != member
                    or record.pending
                ):
                    raise AcknowledgeError(
                        ErrorCode.invalid_record_state,
                        f"The record at offset {part_first} is not acquired by this member.",
                    )
                if check_renew and _renews(batch, part_first, part_last):
                    raise AcknowledgeError(
                        ErrorCode.invalid_record_state, "Renew acknowledgement is disabled."
                    )
                seen += part_last - part_first + 1
        if seen != batch.last_offset - first + 1:  # offsets the log no longer had
            raise AcknowledgeError(ErrorCode.invalid_record_state, "Records not cached.")

    def commit(self, transition: Transition) -> None:
        """The write succeeded: the records take their new states."""
        if transition.done:
            return
        transition.done = True
        touched: list[InFlightBatch] = []
        for batch, first, last, target in transition.changes:
            # (a batch gone from the cache meanwhile: no matter)
            for _first, _last, record in batch.edit(first, last):
                record.pending = False
                self._settle(record, target)
            if batch.records is not None:
                touched.append(batch)
        _merge(touched)
        self._advance()

    def rollback(self, transition: Transition, now_ms: int, limits: Limits) -> None:
        """The write failed: the records are ACQUIRED again, or released if their lock
        expired meanwhile; those the log start moved past meanwhile are ARCHIVED, as
        move_to_log_start archives the others (left ACQUIRED below the start offset, no
        expiry would ever release them, and their deadline would re-arm the timer at once)."""
        if transition.done:
            return
        transition.done = True
        touched: list[InFlightBatch] = []
        start = self.start_offset
        for batch, first, last, _target in transition.changes:
            for lo, hi, gone in (
                (first, min(last, start - 1), True),
                (max(first, start), last, False),
            ):
                if lo > hi:
                    continue
                for _first, _last, record in batch.edit(lo, hi):
                    record.pending = False
                    if gone:
                        self._settle(record, RecordState.ARCHIVED)
                    elif record.deadline_ms <= now_ms:
                        self._settle(record, self._released(record, limits))
            if batch.records is not None:
                touched.append(batch)
        _merge(touched)
        self._advance()

    # -- release ---------------------------------------------------------------------------

    def expire(self, now_ms: int, limits: Limits) -> StateWrite | None:
        """Releases every acquisition whose lock expired by `now_ms` (records under an
        acknowledgement's write wait for it); the write of the change, if any."""
        return self._release_where(lambda r: r.deadline_ms <= now_ms, limits)

    def release_member(self, member: str, limits: Limits) -> StateWrite | None:
        """Releases `member`'s acquisitions (its share session ended) as a lock expiry does:
        their deliveries count (Kafka 4.4 hands them out again with the next delivery count,
        tests/reference/test_share_consumer.py), ARCHIVED at the delivery limit."""
        return self._release_where(lambda r: r.member == member, limits)

    def _release_where(
        self, chosen: Callable[[OffsetState], bool], limits: Limits
    ) -> StateWrite | None:
        runs = _Runs()
        touched: list[InFlightBatch] = []
        start = self.start_offset
        for batch in self._from(start):
            head = batch.head
            if batch.records is None and (
                head.state != RecordState.ACQUIRED or head.pending or not chosen(head)
            ):
                continue
            changed = False
            for first, last, record in batch.edit(
                max(start, batch.first_offset), batch.last_offset
            ):
                if record.state == RecordState.ACQUIRED and not record.pending and chosen(record):
                    target = self._released(record, limits)
                    runs.add(first, last, target, record.delivery_count)
                    self._settle(record, target)
                    changed = True
            if changed and batch.records is not None:
                touched.append(batch)
        if not runs:
            return None
        _merge(touched)
        write = StateWrite(*self._start_and_done(()), runs.batches())
        self._advance()
        return write

    def move_to_log_start(self, log_start: int) -> StateWrite | None:
        """The log start moved past the start offset (retention, DeleteRecords): the records
        below it are gone, the start offset moves to it."""
        if log_start <= self.start_offset:
            return None
        runs = _Runs()
        touched: list[InFlightBatch] = []
        start = self.start_offset
        for batch in self._from(start):
            low = max(start, batch.first_offset)
            if low >= log_start:
                break
            head = batch.head
            if batch.records is None and (head.state in TERMINAL or head.pending):
                continue
            changed = False
            for first, last, record in batch.edit(low, min(batch.last_offset, log_start - 1)):
                if record.state not in TERMINAL and not record.pending:
                    runs.add(first, last, RecordState.ARCHIVED, record.delivery_count)
                    self._settle(record, RecordState.ARCHIVED)
                    changed = True
            if changed and batch.records is not None:
                touched.append(batch)
        _merge(touched)
        self.start_offset = log_start
        self._advance()
        return StateWrite(self.start_offset, self.delivery_complete_count(), runs.batches())

    @staticmethod
    def _released(record: OffsetState, limits: Limits) -> RecordState:
        if record.delivery_count >= limits.delivery_count_limit:
            return RecordState.ARCHIVED
        return RecordState.AVAILABLE

    @staticmethod
    def _settle(record: OffsetState, target: RecordState) -> None:
        record.state = target
        record.member = ""
        record.deadline_ms = 0

    # -- the cache and the start offset ----------------------------------------------------

    def _append(self, batch: InFlightBatch) -> None:
        self.batches.append(batch)
        self._firsts.append(batch.first_offset)

    def _runs(self) -> Iterator[tuple[int, int, RecordState]]:
        """The cached offsets at or above the start offset as (first, last, state) runs: one
        per whole batch, one per run of one state in a split one."""
        start = self.start_offset
        for batch in self._from(start):
            low = max(start, batch.first_offset)
            records = batch.records
            if records is None:
                yield low, batch.last_offset, batch.head.state
            else:
                # a split batch by runs of one state too: its offsets mostly agree in long runs
                offset = low
                rest = itertools.islice(records, low - batch.first_offset, None)
                for state, group in itertools.groupby(rest, key=_state_of):
                    size = len(list(group))
                    yield offset, offset + size - 1, state
                    offset += size

    def _start_and_done(self, changes: Sequence[tuple[int, int, RecordState]]) -> tuple[int, int]:
        """The start offset once `changes` ((first, last, new state), in offset order) are
        applied, and the done offsets at or above it (one walk of the cache, by runs). A
        pending record is ACQUIRED: never done unless `changes` say so."""
        start = self.start_offset
        prefix = True
        done = 0
        runs = _overlaid(self._runs(), changes) if changes else self._runs()
        for first, last, state in runs:
            terminal = state in TERMINAL
            if prefix:
                if terminal:
                    start = last + 1
                    continue
                prefix = False
            if terminal:
                done += last - first + 1
        return start, done

    def _advance(self) -> None:
        """Moves the start offset past the done prefix and drops the batches wholly below."""
        start = self.start_offset
        for _first, last, state in self._runs():
            if state not in TERMINAL:
                break
            start = last + 1
        self.start_offset = start
        keep = 0
        while keep < len(self.batches) and self.batches[keep].last_offset < start:
            keep += 1
        if keep:
            del self.batches[:keep]
            del self._firsts[:keep]


def _delivery_cap(delivery_count: int, limits: Limits, max_records: int) -> int | None:
    """How many records an acquisition may take once it meets a record delivered
    `delivery_count` times already (None: no cap). From half the delivery limit on, each
    further delivery halves the number; a record on its last delivery goes alone, so that a
    record that makes its consumers fail is isolated before it is archived (Kafka's
    throttling of records near the delivery limit)."""
    limit = limits.delivery_count_limit
    threshold = max(2, -(-limit // 2))
    if delivery_count < threshold:
        return None
    if limit > 2 and delivery_count >= limit - 1:
        return 1
    return max(1, max_records >> (delivery_count - threshold + 1))


def _is_aborted(log_batch: LogBatch, aborted: Sequence[AbortedRange]) -> bool:
    if not log_batch.transactional or log_batch.control:
        return False
    return any(
        a.producer_id == log_batch.producer_id
        and a.first_offset <= log_batch.first_offset <= a.last_offset
        for a in aborted
    )


class _Runs:
    """Persisted ranges built in offset order: runs of consecutive offsets with one state and
    delivery count, the open run kept as plain ints (a StateBatch per run, not per offset)."""

    __slots__ = ("_count", "_done", "_first", "_last", "_state")

    def __init__(self) -> None:
        self._done: list[StateBatch] = []
        self._first = self._last = self._state = self._count = -1

    def add(self, first: int, last: int, state: int, count: int) -> None:
        if first == self._last + 1 and state == self._state and count == self._count:
            self._last = last
            return
        if self._first >= 0:
            self._done.append(StateBatch(self._first, self._last, self._state, self._count))
        self._first, self._last, self._state, self._count = first, last, int(state), count

    def __bool__(self) -> bool:
        return self._first >= 0

    def batches(self) -> tuple[StateBatch, ...]:
        if self._first < 0:
            return ()
        return (*self._done, StateBatch(self._first, self._last, self._state, self._count))


def _state_of(record: OffsetState) -> RecordState:
    return record.state


def _merge(touched: list[InFlightBatch]) -> None:
    """The split batches an operation changed: whole again where their offsets agree (each
    once, though listed several times)."""
    seen: set[int] = set()
    for batch in touched:
        if id(batch) not in seen:
            seen.add(id(batch))
            batch.merge()


def _add_taken(
    taken: list[tuple[int, int, int, bool]], before: int, first: int, last: int, count: int
) -> None:
    """Appends an acquired run, extending the previous one of the same log batch (runs of
    one log batch only: its end may cut a range, _ranges)."""
    if len(taken) > before:
        run_first, run_last, run_count, _ = taken[-1]
        if run_last + 1 == first and run_count == count:
            taken[-1] = (run_first, last, count, False)
            return
    taken.append((first, last, count, False))


def _add_change(
    changes: list[tuple[InFlightBatch, int, int, RecordState]],
    batch: InFlightBatch,
    first: int,
    last: int,
    state: RecordState,
) -> None:
    if changes:
        prev_batch, prev_first, prev_last, prev_state = changes[-1]
        if prev_batch is batch and prev_last + 1 == first and prev_state == state:
            changes[-1] = (batch, prev_first, last, state)
            return
    changes.append((batch, first, last, state))


def _renews(batch: AckBatch, first: int, last: int) -> bool:
    """Whether `batch` says RENEW for an offset in [first, last]."""
    types = batch.types
    if len(types) == 1:
        return types[0] == RENEW
    return RENEW in types[first - batch.first_offset : last - batch.first_offset + 1]


def _actions(wanted: list[tuple[int, AckBatch]]) -> list[tuple[int, int, int, bool]]:
    """The acknowledgement as (first, last, type, renew the lock) in offset order, one per run
    of one type. Two batches may share one offset (validation lets a batch start at the
    previous one's last offset): there the later type applies unless it is RENEW, and a RENEW
    of either restarts the lock (as applying them one after the other would)."""
    actions: list[tuple[int, int, int, bool]] = []
    for first, batch in wanted:
        for run_first, run_last, kind in _type_runs(batch, first):
            if actions and actions[-1][1] == run_first:
                prev_first, prev_last, prev_kind, prev_renew = actions[-1]
                if prev_first == prev_last:
                    actions.pop()
                else:
                    actions[-1] = (prev_first, prev_last - 1, prev_kind, prev_renew)
                if kind == RENEW:
                    actions.append((run_first, run_first, prev_kind, True))
                else:
                    actions.append((run_first, run_first, kind, prev_renew))
                run_first += 1
                if run_first > run_last:
                    continue
            actions.append((run_first, run_last, kind, kind == RENEW))
    return actions


def _type_runs(batch: AckBatch, first: int) -> Iterator[tuple[int, int, int]]:
    """`batch`'s offsets from `first` as (first, last, type) runs of one type."""
    types = batch.types
    if len(types) == 1:
        yield first, batch.last_offset, types[0]
        return
    offset = first
    for kind, group in itertools.groupby(types[first - batch.first_offset :]):
        size = sum(1 for _ in group)
        yield offset, offset + size - 1, kind
        offset += size


def _overlaid(
    runs: Iterable[tuple[int, int, RecordState]], changes: Sequence[tuple[int, int, RecordState]]
) -> Iterator[tuple[int, int, RecordState]]:
    """`runs` with `changes` (inside them; both in offset order) laid over them."""
    i = 0
    for first, last, state in runs:
        while first <= last:
            while i < len(changes) and changes[i][1] < first:
                i += 1
            if i == len(changes) or changes[i][0] > last:
                yield first, last, state
                break
            change_first, change_last, change_state = changes[i]
            if change_first > first:
                yield first, change_first - 1, state
                first = change_first
            end = min(change_last, last)
            yield first, end, change_state
            first = end + 1


def _ranges(taken: list[tuple[int, int, int, bool]], batch_size: int) -> tuple[AcquiredRange, ...]:
    """Acquired runs as AcquiredRecords: contiguous offsets with one delivery count merged,
    cut at a log batch's end once a range holds `batch_size` records (batch_optimized)."""
    ranges: list[AcquiredRange] = []
    first = last = count = -1
    cut = True
    for run_first, run_last, delivery_count, boundary in taken:
        if cut or run_first != last + 1 or delivery_count != count:
            if first >= 0:
                ranges.append(AcquiredRange(first, last, count))
            first, count = run_first, delivery_count
        last = run_last
        cut = boundary and batch_size > 0 and last - first + 1 >= batch_size
    if first >= 0:
        ranges.append(AcquiredRange(first, last, count))
    return tuple(ranges)
