# Log compaction (cleanup.policy=compact), with Kafka's semantics.
#
# A pass over one partition: the cleanable range is the whole segments below the first
# uncleanable offset (the active segment, the last stable offset, min.compaction.lag.ms); its
# dirty part starts at the checkpoint the previous pass left. A partition is due a pass at
# min.cleanable.dirty.ratio, or below it once a dirty segment's first batch is older than
# max.compaction.lag.ms (the active segment of a compacted topic rolls by then: LogConfig).
# The dirty part is read into an offset map (key → its latest offset; control batches and
# aborted data skipped), then every cleanable segment is rewritten in groups of up to
# segment.bytes, keeping a record only if it is the latest for its key. Tombstones and the
# markers of transactions with no data left get a delete horizon (KIP-534) the first time
# they are cleaned and are removed by the first pass after it; aborted data goes at once, its
# marker once no batch of it is left. A producer's last data batch stays (emptied if need be),
# so its sequence survives a replay of the log.
#
# Threading: `plan` and `install` run on the event loop; `execute` (the reading and writing)
# runs in a worker thread and touches only the planned segments, which nothing else changes
# meanwhile: the partition's `cleaning` flag holds retention and DeleteRecords off them, and
# the swap waits until no coordinator replay is reading the partition.
from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lockgate.log import swap
from lockgate.log.partition import Partition
from lockgate.log.segment import Segment
from lockgate.log.txn_index import AbortedTxn, encode_entry
from lockgate.protocol.records import (
    CONTROL_ABORT,
    BatchHeader,
    control_type,
    parse_header,
)
from lockgate.protocol.rewrite import has_delete_horizon, rebuild_batch, split_records

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
# What one offset map entry costs in this process (a 16-byte key, an int, the dict slot):
# log.cleaner.dedupe.buffer.size is divided by it to bound the keys of one pass.
MAP_ENTRY_BYTES = 112
_INSTALL_WAIT_S = 30.0
_WRITE_CHUNK = 1 << 20


def key_digest(key: bytes) -> bytes:
    """Short keys stand for themselves; longer ones by a 16-byte hash (as Kafka's MD5 map)."""
    if len(key) < 16:
        return key
    return hashlib.blake2b(key, digest_size=16).digest()


class CleanAborted(Exception):
    """The broker is stopping: the pass gives up and leaves only ".cleaned" files behind."""


@dataclass
class Plan:
    partition: Partition
    segments: list[Segment]  # the cleanable segments
    dirty_start: int  # first offset not cleaned before
    end: int  # first uncleanable offset (a segment base)
    now_ms: int
    delete_retention_ms: int
    last_data_offset: dict[int, int]  # producer id → offset of its last data batch
    aborted: dict[int, list[AbortedTxn]]  # producer id → its aborted transactions
    map_entries: int


@dataclass
class Output:
    group: list[Segment]
    segment: Segment | None  # None: nothing left of the group
    aborted_kept: list[AbortedTxn]


@dataclass
class Result:
    plan: Plan
    outputs: list[Output]
    end: int  # the checkpoint after this pass: where the offset map stopped
    records_read: int = 0
    records_kept: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    horizon: int | None = None  # earliest delete horizon still pending in the output
    seconds: float = 0.0


@dataclass
class _Txns:
    """Kafka's cleaner bookkeeping of transactions met during a pass, in offset order."""

    aborted: dict[int, list[AbortedTxn]]
    committed_open: set[int] = field(default_factory=set)  # producers with data not ended yet
    aborted_seen: set[int] = field(default_factory=set)  # ... whose aborted data was met

    def on_data(self, header: BatchHeader) -> bool:
        """Returns whether the batch is aborted data (to be removed)."""
        if not header.is_transactional:
            return False
        if aborted_at(self.aborted, header.producer_id, header.base_offset) is not None:
            self.aborted_seen.add(header.producer_id)
            return True
        self.committed_open.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, abort: bool) -> bool:
        """Returns whether the transaction this marker ends has no data left in the log."""
        producer = header.producer_id
        if abort:
            seen = producer in self.aborted_seen
            self.aborted_seen.discard(producer)
            return not seen
        seen = producer in self.committed_open
        self.committed_open.discard(producer)
        return not seen


def aborted_at(
    aborted: dict[int, list[AbortedTxn]], producer: int, offset: int
) -> AbortedTxn | None:
    """The producer's aborted transaction whose range (first offset to marker) holds
    `offset`; each producer's list is in marker order, its transactions never overlap."""
    entries = aborted.get(producer)
    if not entries:
        return None
    i = bisect.bisect_left(entries, offset, key=lambda t: t.last_offset)
    if i < len(entries) and entries[i].first_offset <= offset:
        return entries[i]
    return None


# -- choosing ----------------------------------------------------------------------------------


def read_checkpoint(partition: Partition) -> int:
    raw = partition.storage.read_all(f"{partition.directory}/{CHECKPOINT_FILE}")
    if raw is not None and raw.strip().isdigit():
        return int(raw)
    return 0


def cleanable_segments(partition: Partition, now_ms: int) -> list[Segment]:
    """The sealed segments entirely below the last stable offset and older than
    min.compaction.lag.ms, from the first one on."""
    config = partition.config
    stable = partition.last_stable_offset
    found: list[Segment] = []
    for segment in partition.segments[:-1]:
        if segment.next_offset > stable:
            break
        lag = config.min_compaction_lag_ms
        if lag > 0 and (segment.max_timestamp < 0 or now_ms - segment.max_timestamp < lag):
            break
        found.append(segment)
    return found


def compaction_overdue(partition: Partition, checkpoint: int, now_ms: int) -> bool:
    """max.compaction.lag.ms, as Kafka's cleaner manager: whether a sealed segment holding
    dirty offsets starts with a batch (its max timestamp) older than the lag."""
    cut = now_ms - max(partition.config.max_compaction_lag_ms, 0)
    if cut <= 0:  # the default (Long.MAX_VALUE): never; no segment need be read
        return False
    for segment in partition.segments[:-1]:
        if segment.next_offset <= checkpoint:
            continue
        first = next(segment.headers(), None)
        if first is not None and 0 < first[1].max_timestamp < cut:
            return True
    return False


def cleaning_priority(
    partition: Partition, checkpoint: int, now_ms: int, horizon: int | None
) -> float | None:
    """The partition's dirty ratio (dirty bytes over cleanable bytes) if it is due a pass:
    at min.cleanable.dirty.ratio, with dirty records older than max.compaction.lag.ms
    whatever the ratio, or with tombstones or markers past their delete horizon."""
    segments = cleanable_segments(partition, now_ms)
    total = sum(s.size for s in segments)
    if not total:
        return None
    ratio = sum(s.size for s in segments if s.base_offset >= checkpoint) / total
    if horizon is not None and horizon <= now_ms:
        return ratio
    if ratio > 0 and (
        ratio > partition.config.min_cleanable_dirty_ratio
        or compaction_overdue(partition, checkpoint, now_ms)
    ):
        return ratio
    return None


def plan(partition: Partition, checkpoint: int, now_ms: int, map_entries: int) -> Plan | None:
    segments = cleanable_segments(partition, now_ms)
    if not segments:
        return None
    config = partition.config
    aborted: dict[int, list[AbortedTxn]] = {}
    for entry in partition.aborted.entries:
        aborted.setdefault(entry.producer_id, []).append(entry)
    return Plan(
        partition=partition,
        segments=segments,
        dirty_start=max(checkpoint, segments[0].base_offset),
        end=segments[-1].next_offset,
        now_ms=now_ms,
        delete_retention_ms=config.delete_retention_ms,
        last_data_offset={e.producer_id: e.last_offset for e in partition.producers.entries()},
        aborted=aborted,
        map_entries=map_entries,
    )


def _group(segments: list[Segment], max_bytes: int) -> list[list[Segment]]:
    """Consecutive segments whose sizes add up to at most segment.bytes (and whose offsets a
    4-byte relative index can hold) are cleaned into one."""
    groups: list[list[Segment]] = []
    for segment in segments:
        current = groups[-1] if groups else None
        if (
            current is not None
            and sum(s.size for s in current) + segment.size <= max_bytes
            and segment.next_offset - current[0].base_offset < 2**31
        ):
            current.append(segment)
        else:
            groups.append([segment])
    return groups


# -- cleaning (worker thread) ------------------------------------------------------------------


def execute(job: Plan, stop: threading.Event | None = None) -> Result:
    started = time.monotonic()
    offsets, end = _build_offset_map(job, stop)
    result = Result(job, [], end)
    txns = _Txns(job.aborted)
    segments = [s for s in job.segments if s.base_offset < end]
    try:
        for group in _group(segments, job.partition.config.segment_bytes):
            result.outputs.append(_clean_group(job, group, offsets, txns, result, stop))
    except BaseException:
        for output in result.outputs:
            _discard(output.segment)
        raise
    result.seconds = time.monotonic() - started
    return result


def _build_offset_map(job: Plan, stop: threading.Event | None) -> tuple[dict[bytes, int], int]:
    """key digest → latest offset over the dirty segments, and the offset it stopped at: past
    the map's capacity it stops at the next segment boundary (the rest waits for a later
    pass, as Kafka does)."""
    offsets: dict[bytes, int] = {}
    txns = _Txns(job.aborted)
    end = job.end
    for segment in job.segments:
        if segment.next_offset <= job.dirty_start:
            continue
        if offsets and len(offsets) >= job.map_entries:
            end = segment.base_offset
            break
        for header, batch in segment.batches():
            if stop is not None and stop.is_set():
                raise CleanAborted
            if header.is_control or txns.on_data(header) or header.last_offset < job.dirty_start:
                continue
            for record in split_records(batch)[2]:
                if record.key is not None:
                    offsets[key_digest(record.key)] = header.base_offset + record.offset_delta
    return offsets, end


def _clean_group(
    job: Plan,
    group: list[Segment],
    offsets: dict[bytes, int],
    txns: _Txns,
    result: Result,
    stop: threading.Event | None,
) -> Output:
    partition = job.partition
    out = Segment(
        partition.storage, partition.directory, group[0].base_offset, job.now_ms, swap.CLEANED
    )
    kept_aborted: list[AbortedTxn] = []
    pending: list[tuple[bytes, BatchHeader]] = []  # written in large appends, as read
    pending_bytes = 0
    interval = partition.config.index_interval_bytes
    try:
        out.txn_index()  # always written, so that a swap can tell what it has moved
        for segment in group:
            result.bytes_before += segment.size
            for header, batch in segment.batches():
                if stop is not None and stop.is_set():
                    raise CleanAborted
                cleaned, horizon = _clean_batch(job, header, batch, offsets, txns, result)
                if cleaned is None:
                    continue
                if horizon is not None:
                    result.horizon = min(horizon, result.horizon or horizon)
                pending.append((cleaned, parse_header(cleaned)))
                pending_bytes += len(cleaned)
                if pending_bytes >= _WRITE_CHUNK:
                    out.append_many(pending, interval)
                    pending, pending_bytes = [], 0
                if header.is_control and control_type(batch) == CONTROL_ABORT:
                    entry = aborted_at(job.aborted, header.producer_id, header.base_offset)
                    if entry is not None and entry.last_offset == header.base_offset:
                        kept_aborted.append(entry)
        if pending:
            out.append_many(pending, interval)
        for entry in kept_aborted:
            out.txn_index().append(encode_entry(entry))
        if out.is_empty and group[0] is not partition.segments[0]:
            _discard(out)
            return Output(group, None, [])
        out.seal()
        out.sync()
        result.bytes_after += out.size
        out.close()
        return Output(group, out, kept_aborted)
    except BaseException:
        _discard(out)
        raise


def _clean_batch(
    job: Plan,
    header: BatchHeader,
    batch: bytes,
    offsets: dict[bytes, int],
    txns: _Txns,
    result: Result,
) -> tuple[bytes | None, int | None]:
    """The batch as it is to be kept (or None to drop it) and its delete horizon if any."""
    now = job.now_ms
    horizon = header.base_timestamp if has_delete_horizon(header) else None
    if header.is_control:
        if not txns.on_marker(header, control_type(batch) == CONTROL_ABORT):
            return batch, horizon
        if horizon is None:  # its transaction is empty: the marker goes after the horizon
            horizon = now + job.delete_retention_ms
            _, body, records = split_records(batch)
            return rebuild_batch(header, body, records, horizon), horizon
        return (None, None) if horizon <= now else (batch, horizon)
    aborted = txns.on_data(header)
    _, body, records = split_records(batch)
    result.records_read += len(records)
    kept = []
    needs_horizon = False
    if not aborted:
        for record in records:
            if record.key is None:
                continue  # a compacted topic refuses keyless records; older ones go
            latest = offsets.get(key_digest(record.key))
            if latest is not None and header.base_offset + record.offset_delta < latest:
                continue
            if record.is_tombstone:
                if horizon is not None and horizon <= now:
                    continue
                needs_horizon = True
            kept.append(record)
    result.records_kept += len(kept)
    if not kept and job.last_data_offset.get(header.producer_id) != header.last_offset:
        return None, None  # only a producer's last batch stays, emptied: see below
    if needs_horizon and horizon is None:
        horizon = now + job.delete_retention_ms
        return rebuild_batch(header, body, kept, horizon), horizon
    if not needs_horizon:
        horizon = None
    if len(kept) == len(records):
        return batch, horizon
    # (emptied, the producer's last batch keeps its sequence for a replay of the log)
    return rebuild_batch(header, body, kept, None), horizon


def _discard(segment: Segment | None) -> None:
    if segment is not None:
        segment.delete()


# -- installing (event loop) -------------------------------------------------------------------


def install(result: Result) -> None:
    """Swaps the cleaned segments in; the caller has checked that the partition's planned
    segments are all still there."""
    job = result.plan
    partition = job.partition
    groups: list[swap.Group] = []
    for output in result.outputs:
        new = output.segment.base_offset if output.segment is not None else -1
        groups.append((new, [s.base_offset for s in output.group]))
    for output in result.outputs:
        for old in output.group:
            old.close()
    swap.commit(partition.storage, partition.directory, groups)
    replaced: list[tuple[list[Segment], Segment | None, list[AbortedTxn]]] = []
    for output in result.outputs:
        segment: Segment | None = None
        if output.segment is not None:
            segment = Segment(
                partition.storage, partition.directory, output.segment.base_offset, job.now_ms
            )
            segment.load(partition.config.index_interval_bytes)
        replaced.append((output.group, segment, output.aborted_kept))
    partition.replace_segments(replaced)
    partition.storage.write_atomic(f"{partition.directory}/{CHECKPOINT_FILE}", b"%d\n" % result.end)
    swap.done(partition.storage, partition.directory)


def still_planned(result: Result) -> bool:
    """Whether every planned segment is still in the partition, where it was."""
    partition = result.plan.partition
    current = {id(s) for s in partition.segments}
    planned = all(id(s) in current for o in result.outputs for s in o.group)
    return planned and not partition.closed


# -- the background task -----------------------------------------------------------------------


class LogCleaner:
    """Picks the dirtiest compacted partition, cleans it in a worker thread, swaps it in;
    sleeps `backoff_s` when nothing is worth cleaning."""

    def __init__(
        self,
        partitions: Callable[[], Iterable[Partition]],
        clock_ms: Callable[[], int],
        backoff_s: float,
        map_entries: int,
    ) -> None:
        self._partitions = partitions
        self._clock_ms = clock_ms
        self._backoff_s = backoff_s
        self._map_entries = max(1, map_entries)
        self._checkpoints: dict[int, int] = {}  # id(partition) → first dirty offset
        self._horizons: dict[int, int] = {}  # id(partition) → earliest pending delete horizon
        self._stop = threading.Event()
        self._woken = asyncio.Event()

    async def run(self) -> None:
        while not self._stop.is_set():
            if await self.clean_once() is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), self._backoff_s)

    def stop(self) -> None:
        """Makes `run` return soon: a pass in progress gives up at its next batch."""
        self._stop.set()
        self._woken.set()

    def _checkpoint(self, partition: Partition) -> int:
        key = id(partition)
        if key not in self._checkpoints:
            self._checkpoints[key] = read_checkpoint(partition)
        return self._checkpoints[key]

    def _dirtiest(self, now: int) -> Partition | None:
        best: tuple[float, Partition] | None = None
        live = set()
        for partition in self._partitions():
            live.add(id(partition))
            if not partition.config.compact or partition.cleaning or partition.scans:
                continue
            horizon = self._horizons.get(id(partition))
            ratio = cleaning_priority(partition, self._checkpoint(partition), now, horizon)
            if ratio is not None and (best is None or ratio > best[0]):
                best = (ratio, partition)
        for gone in set(self._checkpoints) - live:  # deleted topics
            self._checkpoints.pop(gone, None)
            self._horizons.pop(gone, None)
        return best[1] if best else None

    async def clean_once(self) -> Result | None:
        """One pass over the dirtiest partition; None if none needed one."""
        now = self._clock_ms()
        partition = self._dirtiest(now)
        if partition is None:
            return None
        job = plan(partition, self._checkpoint(partition), now, self._map_entries)
        if job is None:
            return None
        partition.cleaning = True
        try:
            result = await asyncio.to_thread(execute, job, self._stop)
            if not await self._wait_for_readers(partition) or not still_planned(result):
                for output in result.outputs:
                    _discard(output.segment)
                return None
            install(result)
        except CleanAborted:
            return None
        except OSError as exc:
            log.warning("%s-%d: cleaning failed: %s", partition.topic, partition.index, exc)
            swap.recover(partition.storage, partition.directory)
            return None
        finally:
            partition.cleaning = False
            partition.delete_segments_below_start(self._clock_ms())
        self._checkpoints[id(partition)] = result.end
        if result.horizon is None:
            self._horizons.pop(id(partition), None)
        else:
            self._horizons[id(partition)] = result.horizon
        log.info(
            "%s-%d: cleaned offsets below %d in %.2fs: %d of %d records kept, %d → %d bytes",
            partition.topic,
            partition.index,
            result.end,
            result.seconds,
            result.records_kept,
            result.records_read,
            result.bytes_before,
            result.bytes_after,
        )
        return result

    async def _wait_for_readers(self, partition: Partition) -> bool:
        """A coordinator replay may be reading the old segments across awaits: the swap waits
        for it (bounded; the pass is dropped and redone later if it does not end)."""
        deadline = time.monotonic() + _INSTALL_WAIT_S
        while partition.scans and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return not partition.scans
