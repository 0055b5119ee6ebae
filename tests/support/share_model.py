# The reference model of a share partition for tests, NOT product code: a frozen copy of the
# per-offset share partition (one OffsetState per offset) that share/partition.py kept before
# it held its in-flight state per log batch. tests/unit/share/test_partition_model.py runs
# random operation sequences against both and compares everything they show, so the batch-level
# rework is checked against the plain per-offset semantics. Do not change it to follow the
# product: a difference found there is a product bug or a deliberate semantic change to
# discuss.
#
# One share partition (a share group's view of one topic-partition) at its leader: which of its
# records are available, acquired by a member under a time lock, acknowledged or archived
# (Kafka's SharePartition). Pure: no awaits, no I/O, time passed in. The manager (manager.py)
# loads it from the persister, reads the log for it, writes what changed and arms its timer.
#
# Invariants:
# - every offset below `start_offset` (SPSO) is done (acknowledged or archived); the cache
#   holds the in-flight window as batches that cover a contiguous range of offsets, the first
#   batch possibly starting below SPSO (a batch leaves the cache once wholly below it);
# - a record moves AVAILABLE -> ACQUIRED -> AVAILABLE | ACKNOWLEDGED | ARCHIVED only; the
#   delivery count grows on acquisition, and a record going back to AVAILABLE whose count
#   reached the delivery limit is ARCHIVED instead (a lock expiry, a RELEASE, or its member's
#   session ending alike: Kafka 4.4 hands such records out again with the next count);
# - an acknowledgement is two-phase: its records are `pending` (neither acquirable nor
#   acknowledgeable) until the durable write commits the change, or rolls it back; a lock
#   timeout or a release stands at once (the write that follows may fail: Kafka does the same);
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
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member: str = ""  # who holds it while ACQUIRED
    deadline_ms: int = 0  # when its acquisition lock expires, while ACQUIRED
    pending: bool = False  # an acknowledgement waits for its write


@dataclass(slots=True)
class InFlightBatch:
    """Consecutive cached offsets from `first_offset` (one log batch, or a persisted range)."""

    first_offset: int
    records: list[OffsetState]

    @property
    def last_offset(self) -> int:
        return self.first_offset + len(self.records) - 1


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
    """An acknowledgement waiting for its write: offset -> the state it moves to."""

    member: str
    targets: dict[int, RecordState]
    records: dict[int, OffsetState]  # the records of `targets`
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
                partition._append(cursor, [OffsetState() for _ in range(first - cursor)])
            state = RecordState(item.delivery_state)
            if state not in (RecordState.AVAILABLE, *TERMINAL):
                state = RecordState.AVAILABLE  # ARCHIVING without a DLQ: deliver again
            partition._append(
                first,
                [
                    OffsetState(state, item.delivery_count)
                    for _ in range(item.last_offset - first + 1)
                ],
            )
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
        i = bisect.bisect_right(self._firsts, offset) - 1
        if i < 0:
            return None
        batch = self.batches[i]
        if offset > batch.last_offset:
            return None
        return batch.records[offset - batch.first_offset]

    def _span(self, first: int, last: int) -> Iterator[tuple[int, OffsetState]]:
        """The cached offsets in [first, last], in order (one lookup, then a walk)."""
        batches = self.batches
        i = max(0, bisect.bisect_right(self._firsts, first) - 1)
        while i < len(batches):
            batch = batches[i]
            base = batch.first_offset
            if base > last:
                return
            records = batch.records
            for offset in range(max(first, base), min(last, base + len(records) - 1) + 1):
                yield offset, records[offset - base]
            i += 1

    def offsets(self) -> Iterable[tuple[int, OffsetState]]:
        """Every cached offset at or above the start offset, in order."""
        start = self.start_offset
        for batch in self.batches:
            base, records = batch.first_offset, batch.records
            end = base + len(records)
            if start <= base:  # (only the first batch may start below the start offset)
                yield from zip(range(base, end), records, strict=True)
            elif start < end:
                rest = itertools.islice(records, start - base, None)
                yield from zip(range(start, end), rest, strict=True)

    def next_fetch_offset(self) -> int:
        """Where the next read starts: the first AVAILABLE cached offset, else past the cache."""
        for offset, record in self.offsets():
            if record.state == RecordState.AVAILABLE and not record.pending:
                return offset
        return self.last_cached + 1

    def can_acquire(self, limits: Limits) -> bool:
        """Whether a fetch may acquire anything: a cached AVAILABLE record, or room for new
        ones under the in-flight limit."""
        if self.in_flight_count() < limits.max_record_locks:
            return True
        return self.next_fetch_offset() <= self.last_cached

    def next_deadline(self) -> int | None:
        """When the earliest acquisition lock expires (None: nothing acquired)."""
        # the batches' records directly (no offset arithmetic): below the start offset every
        # record is done, so the walk finds the same acquired records as offsets() would
        acquired = RecordState.ACQUIRED
        return min(
            (r.deadline_ms for b in self.batches for r in b.records if r.state == acquired),
            default=None,
        )

    def delivery_complete_count(self) -> int:
        """Done offsets at or above the start offset (what DescribeShareGroupOffsets' lag
        subtracts)."""
        return self._start_and_done({})[1]

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
        taken: list[tuple[int, int, bool]] = []  # (offset, delivery count, cut after it)
        archived: dict[int, RecordState] = {}
        archived_records: dict[int, OffsetState] = {}
        count = 0
        cap = max_records  # lowered by records delivered often already
        exact = mode == RECORD_LIMIT  # the cap holds exactly, not at batch boundaries
        cursor = self.next_fetch_offset() if read_from is None else read_from
        # the next log batch only while the cap allows: the manager reads them lazily
        remaining = iter(log_batches)
        while count < cap and (log_batch := next(remaining, None)) is not None:
            cursor = self._archive_gap(cursor, log_batch.first_offset, archived, archived_records)
            cursor = max(cursor, log_batch.last_offset + 1)
            first = max(log_batch.first_offset, self.start_offset)
            if first > log_batch.last_offset:
                continue
            is_aborted = _is_aborted(log_batch, aborted)
            before = len(taken)
            # records already cached: re-acquire the AVAILABLE ones
            cached_last = min(log_batch.last_offset, self.last_cached)
            for offset, record in self._span(first, cached_last):
                if record.state != RecordState.AVAILABLE or record.pending:
                    continue
                if is_aborted:
                    record.state = RecordState.ARCHIVED
                    archived[offset] = RecordState.ARCHIVED
                    archived_records[offset] = record
                    continue
                throttled = _delivery_cap(record.delivery_count, limits, max_records)
                if throttled is not None:
                    cap, exact = min(cap, throttled), True
                if exact and count >= cap:
                    break
                self._take(record, member, deadline)
                taken.append((offset, record.delivery_count, False))
                count += 1
            # records new to the cache: the whole log batch is cached
            new_first = max(first, self.last_cached + 1)
            if new_first <= log_batch.last_offset:
                if room <= 0 or (exact and count >= cap):
                    break  # at the in-flight limit (or the cap): nothing new
                records = [OffsetState() for _ in range(log_batch.last_offset - new_first + 1)]
                room -= len(records)
                self._append(new_first, records)
                for i, record in enumerate(records):
                    if is_aborted:
                        record.state = RecordState.ARCHIVED
                        archived[new_first + i] = RecordState.ARCHIVED
                        archived_records[new_first + i] = record
                        continue
                    if exact and count >= cap:
                        break
                    self._take(record, member, deadline)
                    taken.append((new_first + i, record.delivery_count, False))
                    count += 1
            if len(taken) > before and batch_size > 0:
                offset, delivery_count, _ = taken[-1]
                taken[-1] = (offset, delivery_count, True)  # a log-batch boundary
        write = None
        if archived:
            write = self._write_for(archived, archived_records)
            self._advance()
        return Acquisition(_ranges(taken, batch_size), write)

    def _archive_gap(
        self,
        cursor: int,
        upto: int,
        archived: dict[int, RecordState],
        records: dict[int, OffsetState],
    ) -> int:
        """Cached AVAILABLE offsets in [cursor, upto) that the log no longer has: ARCHIVED."""
        for offset, record in self._span(max(cursor, self.start_offset), upto - 1):
            if record.state == RecordState.AVAILABLE and not record.pending:
                record.state = RecordState.ARCHIVED
                archived[offset] = RecordState.ARCHIVED
                records[offset] = record
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
        targets: dict[int, RecordState] = {}
        records: dict[int, OffsetState] = {}
        renewed: list[OffsetState] = []
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
            seen = 0
            for offset, record in self._span(first, batch.last_offset):
                seen += 1
                if (
                    record.state != RecordState.ACQUIRED
                    or record.member != member
                    or record.pending
                ):
                    raise AcknowledgeError(
                        ErrorCode.invalid_record_state,
                        f"The record at offset {offset} is not acquired by this member.",
                    )
                kind = batch.type_of(offset)
                if kind == RENEW:
                    if not limits.renew_enabled:
                        raise AcknowledgeError(
                            ErrorCode.invalid_record_state, "Renew acknowledgement is disabled."
                        )
                    renewed.append(record)
                    continue
                target = _ACK_TARGET[kind]
                if target == RecordState.AVAILABLE and (
                    record.delivery_count >= limits.delivery_count_limit
                ):
                    target = RecordState.ARCHIVED
                targets[offset] = target
                records[offset] = record
            if seen != batch.last_offset - first + 1:  # (the cache is contiguous: never)
                raise AcknowledgeError(ErrorCode.invalid_record_state, "Records not cached.")
        deadline = now_ms + limits.record_lock_duration_ms
        for record in renewed:
            record.deadline_ms = deadline
        for record in records.values():
            record.pending = True
        write = self._write_for(targets, records) if targets else None
        transition = Transition(member, targets, records, write)
        if not targets:
            transition.done = True
        return transition

    def commit(self, transition: Transition) -> None:
        """The write succeeded: the records take their new states."""
        if transition.done:
            return
        transition.done = True
        for offset, target in transition.targets.items():
            record = transition.records[offset]  # (gone from the cache meanwhile: no matter)
            record.pending = False
            self._settle(record, target)
        self._advance()

    def rollback(self, transition: Transition, now_ms: int, limits: Limits) -> None:
        """The write failed: the records are ACQUIRED again, or released if their lock
        expired meanwhile."""
        if transition.done:
            return
        transition.done = True
        for offset, record in transition.records.items():
            record.pending = False
            if offset < self.start_offset:  # the log start moved past it meanwhile
                self._settle(record, RecordState.ARCHIVED)
            elif record.deadline_ms <= now_ms:
                self._settle(record, self._released(record, limits))
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
        changed: dict[int, RecordState] = {}
        records: dict[int, OffsetState] = {}
        for offset, record in self.offsets():
            if record.state == RecordState.ACQUIRED and not record.pending and chosen(record):
                changed[offset] = self._released(record, limits)
                records[offset] = record
        if not changed:
            return None
        write = self._write_for(changed, records)
        for offset, target in changed.items():
            self._settle(records[offset], target)
        self._advance()
        return write

    def move_to_log_start(self, log_start: int) -> StateWrite | None:
        """The log start moved past the start offset (retention, DeleteRecords): the records
        below it are gone, the start offset moves to it."""
        if log_start <= self.start_offset:
            return None
        changed: dict[int, RecordState] = {}
        records: dict[int, OffsetState] = {}
        for offset, record in self.offsets():
            if offset >= log_start:
                break
            if record.state not in TERMINAL and not record.pending:
                changed[offset] = RecordState.ARCHIVED
                records[offset] = record
        write_batches = _state_batches(changed, records)
        for record in records.values():
            self._settle(record, RecordState.ARCHIVED)
        self.start_offset = log_start
        self._advance()
        return StateWrite(self.start_offset, self.delivery_complete_count(), write_batches)

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

    def _append(self, first: int, records: list[OffsetState]) -> None:
        self.batches.append(InFlightBatch(first, records))
        self._firsts.append(first)

    def _start_after(self, targets: dict[int, RecordState]) -> int:
        """The start offset once `targets` are applied: past the longest done prefix."""
        start = self.start_offset
        for offset, record in self.offsets():
            state = targets.get(offset, record.state)
            if state not in TERMINAL or (record.pending and offset not in targets):
                return start
            start = offset + 1
        return start

    def _start_and_done(self, targets: dict[int, RecordState]) -> tuple[int, int]:
        """The start offset once `targets` are applied, and the done offsets at or above it
        (one walk of the cache)."""
        start = self.start_offset
        prefix = True
        done = 0
        for offset, record in self.offsets():
            state = targets.get(offset, record.state)
            if prefix:
                if state in TERMINAL and not (record.pending and offset not in targets):
                    start = offset + 1
                    continue
                prefix = False
            if state in TERMINAL:
                done += 1
        return start, done

    def _advance(self) -> None:
        """Moves the start offset past the done prefix and drops the batches wholly below."""
        self.start_offset = self._start_after({})
        keep = 0
        while keep < len(self.batches) and self.batches[keep].last_offset < self.start_offset:
            keep += 1
        if keep:
            del self.batches[:keep]
            del self._firsts[:keep]

    def _write_for(
        self, targets: dict[int, RecordState], records: dict[int, OffsetState]
    ) -> StateWrite:
        start, done = self._start_and_done(targets)
        return StateWrite(start, done, _state_batches(targets, records))


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


def _state_batches(
    targets: dict[int, RecordState], records: dict[int, OffsetState]
) -> tuple[StateBatch, ...]:
    """The changed offsets (`records` in their new states `targets`) as persisted ranges:
    runs of consecutive offsets with one state and delivery count."""
    runs: list[StateBatch] = []
    # the open run as plain ints: a batch is built once per run, not once per offset (an
    # acknowledgement of a whole log batch is thousands of offsets)
    first = last = state = count = -1
    for offset in sorted(targets):
        offset_count = records[offset].delivery_count
        offset_state = int(targets[offset])
        if offset == last + 1 and offset_state == state and offset_count == count:
            last = offset
            continue
        if first >= 0:
            runs.append(StateBatch(first, last, state, count))
        first = last = offset
        state, count = offset_state, offset_count
    if first >= 0:
        runs.append(StateBatch(first, last, state, count))
    return tuple(runs)


def _ranges(taken: list[tuple[int, int, bool]], batch_size: int) -> tuple[AcquiredRange, ...]:
    """Acquired offsets as AcquiredRecords: contiguous offsets with one delivery count merged,
    cut at a log-batch boundary once a range holds `batch_size` records (batch_optimized)."""
    ranges: list[AcquiredRange] = []
    # the open range as plain ints: a range is built once, not once per offset
    first = last = count = -1
    cut = True
    for offset, delivery_count, boundary in taken:
        if cut or offset != last + 1 or delivery_count != count:
            if first >= 0:
                ranges.append(AcquiredRange(first, last, count))
            first, count = offset, delivery_count
        last = offset
        cut = boundary and batch_size > 0 and last - first + 1 >= batch_size
    if first >= 0:
        ranges.append(AcquiredRange(first, last, count))
    return tuple(ranges)
