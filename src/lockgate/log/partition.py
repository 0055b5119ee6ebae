# A partition's log: the ordered segments, their recovery, appends, reads and retention.
#
# Invariants: segments are contiguous and sorted by base offset; only the last one is written;
# high_watermark <= log_end_offset, and in durable mode it only passes data that was fsynced,
# so a consumer never sees a record a crash could take back. An append, marker or roll that
# storage refuses (StorageError) changes nothing visible: offsets, indexes, producer state and
# open transactions stay as they were, so the next attempt can simply succeed.
from __future__ import annotations

import bisect
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lockgate.config.log import LogConfig
from lockgate.log import swap
from lockgate.log.duplicates import find_earlier_batch
from lockgate.log.epochs import LeaderEpochCache
from lockgate.log.producer_state import Duplicate, ProducerEntry, ProducerStateTable
from lockgate.log.segment import SMALLEST_RANGE, Segment, segment_name
from lockgate.log.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    AbortedTxnIndex,
    encode_entry,
    load_entries,
)
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.file_range import FileRange
from lockgate.protocol.records import (
    CONTROL_COMMIT,
    BatchHeader,
    assign_offset,
    build_control_batch,
    control_record,
    iter_records,
    parse_header,
    set_log_append_time,
)
from lockgate.storage.engine import AppendFile, StorageEngine

log = logging.getLogger(__name__)

SNAPSHOTS_KEPT = 2
LOG_START_FILE = "log-start-offset"


EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


def partition_dir(topic: str, index: int) -> str:
    return f"{topic}-{index}"


@dataclass(frozen=True, slots=True)
class KeptHistory:
    """What a log emptied to start at a later offset keeps of the history it skips (KIP-405:
    a follower of a tiered partition rebuilds it from the object store instead of fetching
    it): the log start offset (below the new start: the rest is remote), the leader epochs
    as (epoch, first offset) up to the new start, and the producer state there."""

    log_start: int
    epochs: tuple[tuple[int, int], ...]
    producers: ProducerStateTable


class Partition:
    def __init__(
        self,
        storage: StorageEngine,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        config: Callable[[], LogConfig],
    ) -> None:
        self.storage = storage
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.directory = partition_dir(topic, index)
        self._config = config
        self.segments: list[Segment] = []
        self.high_watermark = 0
        self.epochs = LeaderEpochCache(storage, f"{self.directory}/{EPOCH_CHECKPOINT}")
        self.leader_epoch = -1
        self.unsynced: list[AppendFile] = []  # files written since the last fsync
        self.hw_listeners: set[Callable[[], None]] = set()
        # woken once by the next append (a follower's fetch waits on the log end, not the HW)
        self.end_listeners: set[Callable[[], None]] = set()
        # The end the last flush covered, and what a flush means for the high watermark: on a
        # lone replica it is the high watermark; a replicated leader also waits for its ISR,
        # and a follower takes its leader's (cluster mode replaces the hook).
        self.flushed_offset = 0
        self.on_flushed: Callable[[int], None] = self.advance_high_watermark
        # False on a follower and on a leader that lost its term or its lease: it serves no
        # produce and no client fetch (NOT_LEADER_OR_FOLLOWER)
        self.is_leader = True
        self.producers = ProducerStateTable()
        self.marker_listeners: list[Callable[[int, bool], None]] = []  # (producer id, commit)
        # every batch appended (markers too), as stored: the coordinators' snapshot images
        self.append_listeners: list[Callable[[BatchHeader, bytes], None]] = []
        self.open_txns: dict[int, int] = {}  # producer id → first offset of its open transaction
        self.aborted = AbortedTxnIndex()
        self._log_start = 0  # as moved by DeleteRecords; see log_start_offset
        # the first tiered offset (tiered/manager.py keeps it), None when nothing is remote
        self.remote_start: int | None = None
        self.remote_end: int | None = None  # and the offset after the last tiered one
        # Set while the log cleaner reads the sealed segments in a worker thread: nothing may
        # delete one meanwhile (retention and DeleteRecords wait for the next round).
        self.cleaning = False
        self.scans = 0  # replays reading the segments across awaits: the cleaner's swap waits
        self.closed = False

    @property
    def config(self) -> LogConfig:
        return self._config()

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def log_start_offset(self) -> int:
        """The first offset clients may read: the first segment's base (a tiered segment's
        when the partition has some), or further where DeleteRecords moved it (persisted in
        LOG_START_FILE)."""
        first = self.segments[0].base_offset
        if self.remote_start is not None:
            first = min(first, self.remote_start)
        return max(self._log_start, first)

    @property
    def log_start_floor(self) -> int:
        """The log start offset DeleteRecords set (0 before any): nothing below it is kept,
        on disk or in the object store."""
        return self._log_start

    @property
    def local_log_start_offset(self) -> int:
        """The first offset this broker's disk holds (KIP-405's local log start offset)."""
        return max(self._log_start, self.segments[0].base_offset)

    @property
    def last_stable_offset(self) -> int:
        """No read_committed consumer may read at or past the first open transaction."""
        if not self.open_txns:
            return self.high_watermark
        return min(min(self.open_txns.values()), self.high_watermark)

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    # -- lifecycle -----------------------------------------------------------------------------

    def load(
        self, now_ms: int, clean: bool = False, new_epoch: bool = True, epoch: int | None = None
    ) -> None:
        """Opens the segments on storage, cuts a torn tail, and starts a new leader epoch
        (single node: every start is a new term, `epoch` if given (announced before the log
        opened), else the one after the last; in a cluster the controller says when, and
        `new_epoch` is False). After a `clean` shutdown the active segment is opened like the
        sealed ones, from its indexes (as Kafka does): only after a crash is its every batch's
        CRC checked."""
        self.storage.make_dirs(self.directory)
        swap.recover(self.storage, self.directory)
        bases = sorted(
            int(name[:-4])
            for name in self.storage.list_dir(self.directory)
            if name.endswith(".log") and name[:-4].isdigit()
        )
        interval = self.config.index_interval_bytes
        for base in bases:
            self.segments.append(Segment(self.storage, self.directory, base, now_ms))
        for segment in self.segments[:-1]:
            segment.load(interval)
        if not self.segments:
            self.segments.append(Segment(self.storage, self.directory, 0, now_ms))
        cut = 0
        if not (clean and self.active.load(interval)):  # anything unexpected: check it all
            cut = self.active.recover(interval, validate=True)
        if cut:
            log.warning(
                "%s-%d: cut %d bytes of torn or corrupt data after offset %d",
                self.topic,
                self.index,
                cut,
                self.log_end_offset,
            )
        self.epochs.truncate_after(self.log_end_offset)
        raw = self.storage.read_all(f"{self.directory}/{LOG_START_FILE}")
        if raw is not None and raw.strip().isdigit():
            self._log_start = min(int(raw), self.log_end_offset)  # a torn tail may be gone
        for segment in self.segments:
            for entry in load_entries(self.storage, segment.txn_index_path):
                if entry.last_offset < self.log_end_offset:
                    self.aborted.add(entry)
        self._load_producer_state(now_ms)
        self.flushed_offset = self.log_end_offset
        # a replica cannot vouch for its old high watermark: its leader (or its ISR, once it
        # leads) moves it from the log start on
        self.high_watermark = self.log_end_offset if new_epoch else self.log_start_offset
        if new_epoch:
            latest = self.epochs.latest_epoch  # (a torn tail cut may have dropped epochs)
            self.leader_epoch = epoch if epoch is not None and epoch > latest else latest + 1
            # written with the first append, unless the file on storage is missing or damaged
            # while the log holds records (a new, empty partition has nothing it could vouch for)
            defer = self.epochs.intact or self.log_end_offset == self.log_start_offset
            self.epochs.begin_epoch(self.leader_epoch, self.log_end_offset, defer)

    def close(self, snapshot: bool = True) -> None:
        """Clean shutdown: a producer-state snapshot spares the next start a log replay (one
        already taken at the log end, by an idle partition's last stop, serves again; a log
        without records has nothing to replay). A deleted partition's is not `snapshot`."""
        try:
            has_records = snapshot and self.log_end_offset > self.log_start_offset
            if has_records and self._snapshot_offsets()[-1:] != [self.log_end_offset]:
                self.write_snapshot()
        except OSError as exc:  # a shortcut only: the next start replays the log instead
            log.warning(
                "%s-%d: no producer-state snapshot at close: %s", self.topic, self.index, exc
            )
        for segment in self.segments:
            segment.close()
        self.closed = True

    # -- producer state ------------------------------------------------------------------------

    def _snapshot_offsets(self) -> list[int]:
        return sorted(
            int(name[: -len(".snapshot")])
            for name in self.storage.list_dir(self.directory)
            if name.endswith(".snapshot") and name[: -len(".snapshot")].isdigit()
        )

    def _snapshot_path(self, offset: int) -> str:
        return f"{self.directory}/{segment_name(offset)}.snapshot"

    def write_snapshot(self) -> None:
        """The producer state at the log end. The last SNAPSHOTS_KEPT are kept; a tiered
        topic keeps one per segment end while the segment is local: each is copied with the
        segment it ends (tiered/manager.py), for a follower or a new leader to start from."""
        offset = self.log_end_offset
        self.storage.write_atomic(self._snapshot_path(offset), self.producers.snapshot(offset))
        if self.config.remote_storage:
            self._remove_snapshots_below(self.segments[0].base_offset)
        else:
            for old in self._snapshot_offsets()[:-SNAPSHOTS_KEPT]:
                self.storage.remove(self._snapshot_path(old))

    def _remove_snapshots_below(self, offset: int) -> None:
        """A tiered topic's snapshots of segments no longer local (always keeping the last
        SNAPSHOTS_KEPT)."""
        for old in self._snapshot_offsets()[:-SNAPSHOTS_KEPT]:
            if old < offset:
                self.storage.remove(self._snapshot_path(old))

    def _load_producer_state(self, now_ms: int) -> None:
        """Latest valid snapshot at or below the log end, then a replay of the batches after
        it. Without one, the whole log is replayed."""
        end = self.log_end_offset
        start = self.local_log_start_offset
        for offset in reversed(self._snapshot_offsets()):
            raw = self.storage.read_all(self._snapshot_path(offset))
            loaded = ProducerStateTable.from_snapshot(raw) if raw is not None else None
            if offset > end or loaded is None:
                log.warning("%s-%d: ignoring snapshot at %d", self.topic, self.index, offset)
                self.storage.remove(self._snapshot_path(offset))
                continue
            self.producers, start = loaded
            break
        self.open_txns = {
            e.producer_id: e.txn_first_offset
            for e in self.producers.entries()
            if e.txn_first_offset >= 0
        }
        replayed = 0
        for segment, position, header in self.batches_from(start):
            if header.base_offset < start or header.producer_id < 0:
                continue
            if header.is_control:
                kind, epoch = control_record(segment.log.read(position, header.size))
                self._apply_marker(header, kind == CONTROL_COMMIT, segment, -1, epoch)
            else:
                # expiry counts from the load, not from the client-supplied record time
                self._record_producer(header, max(now_ms, header.max_timestamp))
            replayed += 1
        if replayed:
            log.info(
                "%s-%d: replayed %d producer batches from %d",
                self.topic,
                self.index,
                replayed,
                start,
            )

    def _record_producer(self, header: BatchHeader, now_ms: int) -> None:
        previous = self.producers.get(header.producer_id)
        txn_first = -1
        if header.is_transactional:
            open_first = previous.txn_first_offset if previous else -1
            txn_first = open_first if open_first >= 0 else header.base_offset
            self.open_txns[header.producer_id] = txn_first
        self.producers.record_append(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            header.last_offset,
            now_ms,
            txn_first,
        )

    def _check_producer(self, header: BatchHeader) -> Duplicate | None:
        if header.base_sequence < 0:
            raise KafkaProtocolError(
                ErrorCode.invalid_record, f"producer {header.producer_id} sent no sequence number"
            )
        entry = self.producers.get(header.producer_id)
        if (
            entry is not None
            and not header.is_transactional
            and entry.txn_first_offset >= 0
            and header.producer_epoch == entry.epoch
        ):
            raise KafkaProtocolError(
                ErrorCode.invalid_txn_state,
                f"producer {header.producer_id}: non-transactional batch inside a transaction",
            )
        return self.producers.check(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            self._find_earlier_batch,
        )

    def _find_earlier_batch(
        self, latest: ProducerEntry, first_sequence: int, last_sequence: int
    ) -> Duplicate | None:
        """A resent earlier batch, looked up in the log (bounded: log/duplicates.py). A read
        that storage refuses only loses the offset: the answer is DUPLICATE_SEQUENCE_NUMBER."""
        try:
            return find_earlier_batch(
                self.segments, self.local_log_start_offset, latest, first_sequence, last_sequence
            )
        except OSError as exc:
            log.warning(
                "%s-%d: no lookup of producer %d's earlier batch: %s",
                self.topic,
                self.index,
                latest.producer_id,
                exc,
            )
            return None

    # -- appends -------------------------------------------------------------------------------

    def append(
        self, batch: bytearray, header: BatchHeader, now_ms: int, internal: bool = False
    ) -> tuple[int, int]:
        """Assigns offsets to a validated batch and appends it. Returns (base offset, log append
        time or -1). The batch becomes visible once the high watermark passes it. `internal`
        batches come from a coordinator (transactional offset commits): they carry a producer
        id and epoch but no sequence, so only the transaction bookkeeping applies."""
        config = self.config
        if header.producer_id >= 0 and not internal:
            duplicate = self._check_producer(header)
            if duplicate is not None:
                return duplicate.base_offset, duplicate.timestamp if config.log_append_time else -1
        self.epochs.ensure_saved()
        self._maybe_roll(len(batch), now_ms, config)
        base_offset = self.log_end_offset
        assign_offset(batch, base_offset, self.leader_epoch)
        append_time = -1
        if config.log_append_time:
            set_log_append_time(batch, now_ms)
            append_time = now_ms
        stored = parse_header(batch) if append_time >= 0 else _rebased(header, base_offset)
        self.active.append(batch, stored, config.index_interval_bytes)
        if header.producer_id >= 0:
            self._record_producer(stored, now_ms)
        if not self.unsynced or self.unsynced[-1] is not self.active.log:
            self.unsynced.append(self.active.log)
        for listener in self.append_listeners:
            listener(stored, bytes(batch))
        self._wake_end()
        return base_offset, append_time

    def _maybe_roll(self, incoming: int, now_ms: int, config: LogConfig) -> None:
        active = self.active
        if active.is_empty:
            return
        too_big = active.size + incoming > config.segment_bytes
        jitter = config.roll_jitter_ms(active.base_offset)
        too_old = now_ms - active.created_ms >= config.segment_ms - jitter
        # segment.index.bytes: Kafka rolls when the offset (8-byte entries) or the time index
        # (12-byte entries) is full
        index_full = (
            len(active.offset_index.positions) >= config.segment_index_bytes // 8
            or len(active.time_index.timestamps) >= config.segment_index_bytes // 12
        )
        if too_big or too_old or index_full:
            self.roll(now_ms)

    def roll(self, now_ms: int) -> None:
        """Starts a new active segment. If its files cannot be created (or the old segment
        cannot be sealed), the old active segment stays active and usable."""
        new = Segment(self.storage, self.directory, self.log_end_offset, now_ms)
        try:
            self.active.seal()
        except OSError:
            new.delete()
            raise
        self.segments.append(new)
        try:
            self.write_snapshot()
        except OSError as exc:  # a shortcut only: a restart replays from an older snapshot
            log.warning(
                "%s-%d: no producer-state snapshot at roll: %s", self.topic, self.index, exc
            )

    def take_unsynced(self) -> list[AppendFile]:
        files, self.unsynced = self.unsynced, []
        return files

    def _wake_end(self) -> None:
        if self.end_listeners:
            listeners, self.end_listeners = self.end_listeners, set()
            for listener in listeners:
                listener()

    def flushed_to(self, end: int) -> None:
        """A flush (or, without fsync, a write) covered the log up to `end`."""
        self.flushed_offset = max(self.flushed_offset, min(end, self.log_end_offset))
        self.on_flushed(self.flushed_offset)

    def advance_high_watermark(self, offset: int) -> None:
        if offset > self.high_watermark:
            self.high_watermark = min(offset, self.log_end_offset)
            listeners, self.hw_listeners = self.hw_listeners, set()
            for listener in listeners:
                listener()

    def write_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
        strict_epoch: bool,
    ) -> int:
        """Appends a COMMIT/ABORT control batch ending the producer's transaction here and
        returns its offset. A marker older than the producer's epoch is refused; under
        transaction version 2 (`strict_epoch`) it must be newer than the epoch that wrote the
        open transaction, so that a delayed marker cannot end a later transaction. Then a
        marker from an older coordinator epoch than the producer's previous marker is
        refused (TRANSACTION_COORDINATOR_FENCED), in Kafka's order of the two checks."""
        entry = self.producers.get(producer_id)
        if entry is not None and (
            producer_epoch < entry.epoch
            or (strict_epoch and producer_id in self.open_txns and producer_epoch <= entry.epoch)
        ):
            raise KafkaProtocolError(
                ErrorCode.invalid_producer_epoch,
                f"marker epoch {producer_epoch} of producer {producer_id} is behind {entry.epoch}",
            )
        self.producers.check_coordinator_epoch(producer_id, coordinator_epoch)
        batch = bytearray(
            build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        )
        header = parse_header(batch)
        self.epochs.ensure_saved()
        self._maybe_roll(len(batch), now_ms, self.config)
        offset = self.log_end_offset
        assign_offset(batch, offset, self.leader_epoch)
        stored = _rebased(header, offset)
        segment = self.active
        saved = segment.append_state()
        position = segment.append(batch, stored, self.config.index_interval_bytes)
        try:
            self._apply_marker(stored, commit, segment, now_ms, coordinator_epoch)
        except OSError:
            segment.undo_append(position, saved, offset)
            raise
        if not self.unsynced or self.unsynced[-1] is not segment.log:
            self.unsynced.append(segment.log)
        for append_listener in self.append_listeners:
            append_listener(stored, bytes(batch))
        for listener in self.marker_listeners:
            listener(producer_id, commit)
        self._wake_end()
        return offset

    def _apply_marker(
        self,
        header: BatchHeader,
        commit: bool,
        segment: Segment,
        now_ms: int = -1,
        coordinator_epoch: int = -1,
    ) -> None:
        """Ends the producer's open transaction (if any) at this marker."""
        producer_id = header.producer_id
        first = self.open_txns.get(producer_id, -1)
        if first >= 0 and not commit:
            # Kafka's value: where the next open transaction begins, or just past the marker
            stable = min(
                (o for p, o in self.open_txns.items() if p != producer_id),
                default=header.base_offset + 1,
            )
            aborted = AbortedTxn(producer_id, first, header.base_offset, stable)
            if not self.aborted.has(aborted):
                # the file first: if storage refuses it, no state has changed yet
                segment.txn_index().append(encode_entry(aborted))
                self.aborted.add(aborted)
        self.open_txns.pop(producer_id, None)
        entry = self.producers.get(producer_id)
        bumped = entry is None or header.producer_epoch > entry.epoch
        self.producers.put(
            ProducerEntry(
                producer_id,
                header.producer_epoch,
                -1 if bumped or entry is None else entry.first_sequence,
                -1 if bumped or entry is None else entry.last_sequence,
                header.base_offset if entry is None else entry.last_offset,
                now_ms if now_ms >= 0 else header.max_timestamp,
                -1,
                coordinator_epoch
                if coordinator_epoch >= 0 or entry is None
                else entry.coordinator_epoch,
            )
        )

    def append_replicated(self, batches: bytes, now_ms: int) -> int:
        """A follower's append of what its leader's Fetch returned: whole batches with the
        leader's offsets and leader epochs, stored as they are. The epochs they carry extend
        the epoch history, producers and transactions are tracked as on the leader (so that
        idempotence and read_committed hold after a failover), and nothing is checked
        against producer state: the leader did that. Batches below the log end (a fetch
        answered twice) are skipped. Returns the new log end offset."""
        config = self.config
        position = 0
        while position < len(batches):
            header = parse_header(batches, position)
            batch = batches[position : position + header.size]
            position += header.size
            if header.last_offset < self.log_end_offset:
                continue
            if header.base_offset != self.log_end_offset:
                raise KafkaProtocolError(
                    ErrorCode.corrupt_message,
                    f"{self.topic}-{self.index}: the leader's batch at {header.base_offset} "
                    f"does not follow the log end {self.log_end_offset}",
                )
            if header.partition_leader_epoch > self.epochs.latest_epoch:
                self.epochs.begin_epoch(header.partition_leader_epoch, header.base_offset)
            self.epochs.ensure_saved()
            self._maybe_roll(len(batch), now_ms, config)
            segment = self.active
            segment.append(batch, header, config.index_interval_bytes)
            if header.is_control and header.producer_id >= 0:
                # the leader checked the coordinator epoch; recording it here keeps the fence
                # after a failover
                kind, epoch = control_record(batch)
                self._apply_marker(header, kind == CONTROL_COMMIT, segment, -1, epoch)
            elif header.producer_id >= 0:
                self._record_producer(header, now_ms)
            if not self.unsynced or self.unsynced[-1] is not segment.log:
                self.unsynced.append(segment.log)
            for listener in self.append_listeners:
                listener(header, bytes(batch))
        return self.log_end_offset

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """A follower's cut after a leader change (KIP-101): everything at and past `offset`
        goes, the batch holding it too (batches are never split). The aborted-transaction
        index, the leader epochs and the producer state follow (the state is rebuilt from
        the latest snapshot below the cut), and so does the high watermark. Returns the new
        log end offset. Not for a leader: its log is the truth the others cut to."""
        if offset >= self.log_end_offset:
            return self.log_end_offset
        interval = self.config.index_interval_bytes
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
        segment = self.active
        position = segment.position_of(offset)
        if position is not None:
            segment.log.truncate(position)
            segment.recover(interval, validate=False)  # indexes and next offset anew
        end = self.log_end_offset
        kept = [
            e for e in load_entries(self.storage, segment.txn_index_path) if e.last_offset < end
        ]
        if self.storage.exists(segment.txn_index_path):
            segment.txn_index().truncate(len(kept) * ENTRY_SIZE)
        self.aborted.drop_from(end)
        self.epochs.truncate_after(end)
        self.producers = ProducerStateTable()
        self.open_txns = {}
        self._load_producer_state(now_ms)  # snapshots past the cut are dropped there
        self.high_watermark = min(self.high_watermark, end)
        self.flushed_offset = min(self.flushed_offset, end)
        self.unsynced.append(segment.log)
        log.info("%s-%d: truncated to offset %d", self.topic, self.index, end)
        return end

    def truncate_fully_and_start_at(
        self, offset: int, now_ms: int, kept: KeptHistory | None = None
    ) -> None:
        """A follower whose log ends before its leader's log start (it was away while the
        leader's retention or DeleteRecords passed it), or before its leader's local log
        start (a tiered partition), can share nothing with the leader: everything goes and
        the log starts empty at `offset`, as Kafka's truncateFullyAndStartAt. Epochs,
        producers and aborted transactions start afresh from what is fetched next, or from
        the `kept` history. Not while the cleaner reads the segments (the caller retries)."""
        if self.cleaning or offset <= self.log_end_offset:
            return
        log_start = offset if kept is None else min(kept.log_start, offset)
        # every segment's base is at most the log end, below `offset`: the new one is apart
        fresh = Segment(self.storage, self.directory, offset, now_ms)
        try:  # (a restart with this file but the old segments caps it at their end)
            self.storage.write_atomic(f"{self.directory}/{LOG_START_FILE}", b"%d\n" % log_start)
        except OSError:
            fresh.delete()
            raise
        old, self.segments = self.segments, [fresh]
        self._log_start = log_start
        for segment in old:
            segment.delete()
        for snapshot in self._snapshot_offsets():
            self.storage.remove(self._snapshot_path(snapshot))
        self.epochs.clear()
        self.aborted = AbortedTxnIndex()
        self.producers = ProducerStateTable()
        self.open_txns = {}
        if kept is not None:
            for epoch, first in kept.epochs:
                if epoch > self.epochs.latest_epoch and first <= offset:
                    self.epochs.begin_epoch(epoch, first)
            self.producers = kept.producers
            self.open_txns = {
                e.producer_id: e.txn_first_offset
                for e in self.producers.entries()
                if e.txn_first_offset >= 0
            }
            try:  # a restart starts from it (a shortcut: without it the state starts empty)
                self.write_snapshot()
            except OSError as exc:
                log.warning("%s-%d: no producer-state snapshot at %d: %s", self.topic,
                            self.index, offset, exc)  # fmt: skip
        self.high_watermark = self.flushed_offset = offset
        self.unsynced = [fresh.log]
        log.warning(
            "%s-%d: log behind the leader's %slog start: emptied, starting at offset %d",
            self.topic,
            self.index,
            "" if kept is None else "local ",
            offset,
        )

    # -- reads ---------------------------------------------------------------------------------

    def segment_for(self, offset: int) -> int:
        """The index of the segment holding `offset` (the first one below the log start)."""
        # by key: no list of every segment's base offset built for each read
        return max(0, bisect.bisect_right(self.segments, offset, key=_base_offset) - 1)

    def read(self, offset: int, max_bytes: int, upper_offset: int) -> bytes:
        """Batches from `offset` up to (not including) `upper_offset`, whole batches only,
        as bytes: read_view's answer, copied when it is a view."""
        data = self.read_view(offset, max_bytes, upper_offset)
        return data if isinstance(data, bytes) else data.tobytes()

    def read_view(self, offset: int, max_bytes: int, upper_offset: int) -> bytes | memoryview:
        """Batches from `offset` up to (not including) `upper_offset`, whole batches only:
        a memoryview of the bytes read when the read was cut to whole batches, so that they
        are not copied (Fetch hands them to the socket as they are; see Segment.read).
        Once the log directory is offline every read is KAFKA_STORAGE_ERROR, at the log end
        too (a consumer polling there must learn it)."""
        for segment in self._read_from(offset, upper_offset):
            data = segment.read(offset, max_bytes, upper_offset)
            if data:
                return data
        return b""

    def read_range(
        self, offset: int, max_bytes: int, upper_offset: int, smallest: int = SMALLEST_RANGE
    ) -> bytes | FileRange:
        """What read_view gives, as a FileRange of a segment file (the caller owns it: it is
        written with sendfile, or closed) when it is at least `smallest` bytes and storage
        lends a descriptor; bytes otherwise."""
        for segment in self._read_from(offset, upper_offset):
            data = segment.read_range(offset, max_bytes, upper_offset, smallest)
            if data:
                return data
        return b""

    def _read_from(self, offset: int, upper_offset: int) -> Iterator[Segment]:
        """The segments a read from `offset` looks at in turn (none when `offset` is not
        below `upper_offset`); KAFKA_STORAGE_ERROR once the log directory is offline."""
        offline = self.storage.offline
        if offline is not None:
            raise KafkaProtocolError(ErrorCode.kafka_storage_error, str(offline))
        if offset >= upper_offset:
            return iter(())
        # lazily: a read stops at the first segment with data
        return (s for s in self.segments[self.segment_for(offset) :] if s.next_offset > offset)

    def batches_from(self, offset: int) -> list[tuple[Segment, int, BatchHeader]]:
        """Every batch header at or after `offset` (used by the rare scans: ListOffsets)."""
        found: list[tuple[Segment, int, BatchHeader]] = []
        for segment in self.segments[self.segment_for(offset) :]:
            position = segment.position_of(max(offset, segment.base_offset))
            if position is None:
                continue
            found.extend((segment, pos, header) for pos, header in segment.headers(position))
        return found

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp at or after `timestamp`
        below the high watermark, or None."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            start = segment.base_offset + segment.time_index.lookup(timestamp)
            position = segment.position_of(start)
            if position is None:
                continue
            for pos, header in segment.headers(position):
                if header.base_offset >= self.high_watermark:
                    return None
                if header.max_timestamp >= timestamp:
                    for offset, record_time, _k, _v in iter_records(
                        segment.log.read(pos, header.size)
                    ):
                        if record_time >= timestamp:
                            return offset, record_time
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (KIP-734)."""
        best: tuple[int, int] | None = None
        for segment in self.segments:
            if segment.is_empty or (best is not None and segment.max_timestamp <= best[1]):
                continue
            for pos, header in segment.headers(0):
                if header.base_offset >= self.high_watermark:
                    break
                if best is None or header.max_timestamp > best[1]:
                    for offset, record_time, _k, _v in iter_records(
                        segment.log.read(pos, header.size)
                    ):
                        if best is None or record_time > best[1]:
                            best = (offset, record_time)
        return best

    def epoch_of(self, offset: int) -> int:
        """The leader epoch that wrote `offset` (or -1 when unknown)."""
        epochs = self.epochs
        i = bisect.bisect_right(epochs.start_offsets, offset) - 1
        return epochs.epochs[i] if i >= 0 else -1

    # -- retention -----------------------------------------------------------------------------

    def apply_retention(self, now_ms: int) -> int:
        """Deletes whole segments past retention.ms / retention.bytes; returns how many. A
        tiered topic's local segments go by apply_local_retention instead."""
        config = self.config
        if config.remote_storage:
            return 0
        return self._retain(now_ms, config.retention_ms, config.retention_bytes, None)

    def apply_local_retention(self, now_ms: int, copied_end: int) -> int:
        """A tiered topic: deletes the oldest local segments past local.retention.ms/bytes,
        only those entirely below `copied_end` (the end of what is safely in the object
        store); returns how many."""
        config = self.config
        return self._retain(
            now_ms, config.local_retention_ms, config.local_retention_bytes, copied_end
        )

    def _retain(
        self, now_ms: int, retention_ms: int, retention_bytes: int, copied_end: int | None
    ) -> int:
        config = self.config
        deleted = 0
        while config.delete_policy and not self.cleaning:
            oldest = self.segments[0]
            if oldest.is_empty and len(self.segments) > 1:
                # emptied by the cleaner (which keeps a first segment even when empty, so
                # that cleaning alone never moves the log start): it holds nothing to keep
                self._delete_oldest_segment(now_ms, "retention")
                deleted += 1
                continue
            expired = (
                retention_ms >= 0
                and not oldest.is_empty
                and oldest.max_timestamp >= 0
                and now_ms - oldest.max_timestamp > retention_ms
            )
            oversize = (
                retention_bytes >= 0
                and self.size_bytes - oldest.size >= retention_bytes
                and not oldest.is_empty
            )
            if not (expired or oversize):
                return deleted
            if copied_end is not None and (
                len(self.segments) == 1 or oldest.next_offset > copied_end
            ):
                return deleted  # not in the object store yet (the active one never is)
            if oldest.next_offset > self.high_watermark:
                return deleted  # never delete what consumers have not been allowed to see
            self._delete_oldest_segment(now_ms, "retention")
            deleted += 1
        return deleted

    def _delete_oldest_segment(self, now_ms: int, reason: str) -> None:
        oldest = self.segments[0]
        if len(self.segments) == 1:
            self.roll(now_ms)
        self.segments.pop(0)
        oldest.delete()
        self.aborted.drop_before(self.local_log_start_offset)
        if self.config.remote_storage:
            self._remove_snapshots_below(self.segments[0].base_offset)
        log.info(
            "%s-%d: deleted segment %d by %s", self.topic, self.index, oldest.base_offset, reason
        )

    def delete_records(self, offset: int, now_ms: int) -> int:
        """DeleteRecords (KIP-107): moves the log start offset to `offset` (-1: the high
        watermark), never past the high watermark (OFFSET_OUT_OF_RANGE), never back; segments
        entirely below it are deleted. Producer state stays (it outlives the data). Returns
        the new log start offset (the low watermark)."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise KafkaProtocolError(
                ErrorCode.offset_out_of_range,
                f"{offset} is outside [0, high watermark {self.high_watermark}]",
            )
        if target <= self.log_start_offset:
            return self.log_start_offset
        # persisted first: if that fails nothing changed; if a crash follows, the next load
        # reads the new start and the segments below it are deleted by the next call
        self.storage.write_atomic(f"{self.directory}/{LOG_START_FILE}", b"%d\n" % target)
        self._log_start = target
        self.delete_segments_below_start(now_ms)
        return self.log_start_offset

    def delete_segments_below_start(self, now_ms: int) -> None:
        """Deletes the segments entirely below the log start offset (unless the cleaner is
        reading them: it calls this again when it is done)."""
        while (
            not self.cleaning
            and self.segments[0].next_offset <= self._log_start
            and not self.segments[0].is_empty
        ):
            self._delete_oldest_segment(now_ms, "DeleteRecords")
        self.aborted.drop_before(self.local_log_start_offset)

    def replace_segments(
        self, replaced: list[tuple[list[Segment], Segment | None, list[AbortedTxn]]]
    ) -> None:
        """The cleaner's swap, in memory (its files are already in place): each group of
        segments gives way to its cleaned segment (or to nothing), and the aborted
        transactions whose markers were cleaned away are forgotten."""
        for group, new, kept in replaced:
            at = next(i for i, s in enumerate(self.segments) if s is group[0])
            self.segments[at : at + len(group)] = [] if new is None else [new]
            start, end = group[0].base_offset, group[-1].next_offset
            for entry in self.aborted.overlapping(start, end):
                if start <= entry.last_offset < end and entry not in kept:
                    self.aborted.discard(entry)


def _rebased(header: BatchHeader, base_offset: int) -> BatchHeader:
    """The header after offset assignment, without re-parsing the bytes."""
    return header._replace(base_offset=base_offset)


def _base_offset(segment: Segment) -> int:
    return segment.base_offset
