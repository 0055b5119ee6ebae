# Snapshots of the internal partitions (__transaction_state, __consumer_offsets), so that a
# coordinator loads a snapshot plus the records after it instead of the whole history.
#
# A snapshot is not a copy of a coordinator's live state (a group in the middle of a rebalance
# has members no record mentions): it is the partition's *image*, the records a replay from the
# log start would apply, kept up to date from every append: each key's latest committed value
# and the records of transactions still open, by producer. Loading replays the image through
# the coordinator's own replay code, then the log from the snapshot's offset, so the state is
# the one a full replay gives, by construction.
#
# File "<offset>.coordinator" in the partition's directory: magic, version, the offset X (every
# record below X is in it), the wall-clock time it was taken, a CRC-32C of the body; the body
# is v2 record batches (one of committed records, one transactional batch per open
# transaction). A snapshot is ignored (one log line) when damaged, past the log end (a crash
# cut the log below X), below the log start, or older than the topic's delete.retention.ms:
# compaction removes tombstones and markers older than that, so the records after an older
# snapshot may no longer say that a key was deleted or a transaction committed (an old one at
# the log end, of a partition idle since, is still good). A full replay of a compacted log is
# always right.
from __future__ import annotations

import asyncio
import logging
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import crc32c

from lockgate.coordinator.replay import RecordsVisitor, replay
from lockgate.log.partition import Partition
from lockgate.log.segment import segment_name
from lockgate.protocol.fastpath import put_records
from lockgate.protocol.records import (
    CONTROL_COMMIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Decoded,
    build_batch,
    control_type,
    iter_records,
    parse_header,
    peek_batch_size,
)
from lockgate.storage.engine import StorageEngine

log = logging.getLogger(__name__)

SUFFIX = ".coordinator"
KEPT = 2
_HEADER = struct.Struct(">4sHqqI")  # magic, version, offset, taken at (ms), CRC of the body
_MAGIC = b"LGCS"
_VERSION = 1
_RECORDS_PER_BATCH = 1_000  # a load yields to the event loop after each batch

Records = list[tuple[bytes, bytes | None]]


@dataclass
class PartitionImage:
    committed: dict[bytes, bytes] = field(default_factory=dict)
    pending: dict[int, tuple[int, Records]] = field(default_factory=dict)  # pid → (epoch, ...)

    def apply(self, header: BatchHeader, data: bytes) -> None:
        """Follows one batch appended to the partition."""
        self.follow(header, data, [] if header.is_control else iter_records(data))

    def follow(self, header: BatchHeader, data: bytes, records: Decoded) -> None:
        """Follows one batch replayed from the partition, its records already decoded (none
        for a control batch: replay.RecordsVisitor)."""
        if header.is_control:
            ended = self.pending.pop(header.producer_id, None)
            if ended is not None and control_type(data) == CONTROL_COMMIT:
                for ended_key, ended_value in ended[1]:
                    self._put(ended_key, ended_value)
            return
        if header.is_transactional:
            keyed = [(key, value) for _o, _t, key, value in records if key is not None]
            if keyed:  # (a batch of no keyed record opens no entry: the snapshot has none)
                entry = self.pending.setdefault(header.producer_id, (header.producer_epoch, []))
                entry[1].extend(keyed)
            return
        if self.pending:
            self._drop_tombstoned(records)
        put_records(records, self.committed)  # (compiled: no Python work per record)

    def _drop_tombstoned(self, records: Decoded) -> None:
        """A tombstone outside a transaction deletes the key's records pending in open ones
        (the group coordinator's replay rule, Kafka's: an offset deleted while a transaction
        had it pending stays deleted when that transaction commits)."""
        doomed = {key for _o, _t, key, value in records if value is None and key is not None}
        if not doomed:
            return
        for producer_id, (epoch, held) in list(self.pending.items()):
            if any(key in doomed for key, _value in held):
                kept = [(key, value) for key, value in held if key not in doomed]
                if kept:
                    self.pending[producer_id] = (epoch, kept)
                else:  # (as a transaction that wrote nothing: the snapshot has no entry)
                    del self.pending[producer_id]

    def _put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.committed.pop(key, None)
        else:
            self.committed[key] = value

    def copy(self) -> PartitionImage:
        """A copy to encode away from the event loop (dict and list copies run in C)."""
        return PartitionImage(
            dict(self.committed), {p: (e, list(r)) for p, (e, r) in self.pending.items()}
        )

    def encode(self) -> bytes:
        batches = []
        items = list(self.committed.items())
        for start in range(0, len(items), _RECORDS_PER_BATCH):
            batches.append(build_batch(list(items[start : start + _RECORDS_PER_BATCH])))
        for producer_id, (epoch, records) in sorted(self.pending.items()):
            batches.append(
                build_batch(
                    list(records),
                    attributes=TRANSACTIONAL_BIT,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                )
            )
        return b"".join(batches)


def _path(partition: Partition, offset: int) -> str:
    return f"{partition.directory}/{segment_name(offset)}{SUFFIX}"


def _offsets(partition: Partition) -> list[int]:
    names = partition.storage.list_dir(partition.directory)
    stems = (n[: -len(SUFFIX)] for n in names if n.endswith(SUFFIX))
    return sorted(int(s) for s in stems if s.isdigit())


def write(
    storage: StorageEngine, partition: Partition, offset: int, taken_ms: int, body: bytes
) -> None:
    """Writes a snapshot atomically and keeps the newest KEPT (safe in a worker thread)."""
    header = _HEADER.pack(_MAGIC, _VERSION, offset, taken_ms, crc32c.crc32c(body))
    storage.write_atomic(_path(partition, offset), header + body)
    for old in _offsets(partition)[:-KEPT]:
        storage.remove(_path(partition, old))


def _batches(body: bytes) -> list[tuple[BatchHeader, bytes]]:
    found = []
    position = 0
    while position < len(body):
        prefix = peek_batch_size(body, position)
        if prefix is None or position + prefix[1] > len(body):
            raise ValueError("a cut batch")
        data = body[position : position + prefix[1]]
        found.append((parse_header(data), data))
        position += prefix[1]
    return found


def read_latest(
    partition: Partition, now_ms: int, max_age_ms: int
) -> tuple[int, list[tuple[BatchHeader, bytes]]] | None:
    """(offset, batches) of the newest usable snapshot; unusable ones are logged and removed."""
    for offset in reversed(_offsets(partition)):
        path = _path(partition, offset)
        raw = partition.storage.read_all(path) or b""
        problem = ""
        batches: list[tuple[BatchHeader, bytes]] = []
        if len(raw) < _HEADER.size:
            problem = "cut short"
        else:
            magic, version, stored, taken_ms, crc = _HEADER.unpack_from(raw)
            body = raw[_HEADER.size :]
            if magic != _MAGIC or version != _VERSION or stored != offset:
                problem = f"not a version {_VERSION} snapshot"
            elif crc32c.crc32c(body) != crc:
                problem = "damaged (CRC)"
            elif offset > partition.log_end_offset:
                problem = f"past the log end {partition.log_end_offset}"
            elif offset < partition.log_start_offset:
                problem = f"below the log start {partition.log_start_offset}"
            elif now_ms - taken_ms > max_age_ms and offset < partition.log_end_offset:
                # (with nothing after it, nothing can have been compacted away after it)
                problem = f"older than delete.retention.ms ({max_age_ms} ms)"
            else:
                try:
                    batches = _batches(body)
                except ValueError as exc:
                    problem = str(exc)
        if not problem:
            return offset, batches
        log.warning(
            "%s: ignoring coordinator snapshot %d: %s", partition.directory, offset, problem
        )
        partition.storage.remove(path)
    return None


@dataclass
class Restored:
    snapshot_offset: int  # -1: none was usable, the whole log was replayed
    replayed: int  # batches replayed from the log


async def restore(
    partition: Partition, visit: RecordsVisitor, image: PartitionImage, now_ms: int
) -> Restored:
    """Rebuilds a partition's coordinator state: the newest usable snapshot, then the log
    after it, both through `visit` and into `image`, each batch's records decoded once."""
    found = read_latest(partition, now_ms, partition.config.delete_retention_ms)
    start = -1

    def both(header: BatchHeader, data: bytes) -> None:
        records = [] if header.is_control else iter_records(data)
        visit(header, data, records)
        image.follow(header, data, records)

    if found is not None:
        start, batches = found
        for header, data in batches:
            both(header, data)
            await asyncio.sleep(0)  # appends meanwhile land after `start`: the replay reads them

    replayed = await replay(partition, both, None if start < 0 else start)
    return Restored(start, replayed)


class Snapshotter:
    """Keeps the images of the internal partitions whose coordinators have loaded them and
    writes their snapshots: every `interval_ms` for partitions that changed, and all of them
    at a clean stop. A negative interval turns snapshots off."""

    def __init__(self, storage: StorageEngine, interval_ms: int, clock_ms: Callable[[], int]):
        self._storage = storage
        self.interval_ms = interval_ms
        self._clock_ms = clock_ms
        self._images: dict[int, tuple[Partition, PartitionImage]] = {}
        self._written: dict[int, int] = {}  # id(partition) → offset of its latest snapshot
        self._writing = threading.Lock()  # the periodic writer's thread and the stop's writes

    @property
    def enabled(self) -> bool:
        return self.interval_ms >= 0

    def follow(self, partition: Partition, image: PartitionImage, at: int) -> None:
        """Called right after a load, with no await since its replay ended: from now on every
        append updates the image. `at`: the snapshot the load started from."""
        partition.append_listeners.append(image.apply)
        self._images[id(partition)] = (partition, image)
        self._written[id(partition)] = max(at, 0)  # an empty partition needs none

    def _due(self) -> Iterator[tuple[Partition, int, PartitionImage]]:
        """(partition, its log end, a copy of its image) of those changed since their last
        snapshot, one at a time: each log end and copy taken together with no await, so each
        image is exactly the log below it, and each copy just before its own write rather
        than all of them first (a copy holds the event loop: a million keys in all are a few
        ms a partition, 0.2 s together)."""
        for key, (partition, image) in list(self._images.items()):
            end = partition.log_end_offset
            if end > self._written[key] and not partition.closed:
                yield partition, end, image.copy()

    async def run(self) -> None:
        while self.enabled:
            await asyncio.sleep(self.interval_ms / 1000)
            await self.write_due()

    async def write_due(self) -> None:
        """One round of the periodic writer: a snapshot of every partition changed since its
        last one, encoded and written in a worker thread."""
        for partition, offset, image in self._due():
            try:
                await asyncio.to_thread(self._write, partition, offset, image)
                self._written[id(partition)] = offset
            except OSError as exc:  # a shortcut only: the next load replays more
                log.warning("%s: no coordinator snapshot: %s", partition.directory, exc)

    def _write(self, partition: Partition, offset: int, image: PartitionImage) -> None:
        with self._writing:
            write(self._storage, partition, offset, self._clock_ms(), image.encode())

    def write_all(self) -> None:
        """At a clean stop, after the last append: the next start replays nothing."""
        if not self.enabled:
            return
        for partition, offset, image in self._due():
            try:
                self._write(partition, offset, image)
                self._written[id(partition)] = offset
            except OSError as exc:
                log.warning("%s: no coordinator snapshot at stop: %s", partition.directory, exc)
