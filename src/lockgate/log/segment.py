# One log segment: the batches of a contiguous offset range in a file named by its base offset,
# with its offset and time indexes. Batches are stored exactly as validated on append.
#
# Invariant: an append changes the segment whole or not at all. If the log write or an index
# write fails, the log is cut back and the indexes and counters are restored before the
# StorageError goes up, so the in-memory state always describes exactly the bytes on storage.
# File handles come from the storage engine (bounded, reopened on demand).
from __future__ import annotations

from collections.abc import Callable, Iterator

from lockgate.log.index import OffsetIndex, TimeIndex
from lockgate.protocol.file_range import FileRange
from lockgate.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    batch_is_intact,
    parse_header,
    peek_batch_size,
)
from lockgate.storage.engine import AppendFile, StorageEngine

_SCAN_CHUNK = 1 << 20
# What a range's walk reads at a time after the last indexed batch it can skip to: the batches
# between two index entries (index.interval.bytes, 4 KiB by default) in one read, and not much
# of a large batch's records when only its header is wanted.
_WALK_CHUNK = 8 << 10
# Batches smaller than this are read rather than sent from the file: below it a pread's copy
# costs less than a sendfile and a writev of their own (and a pinned handle).
SMALLEST_RANGE = 8 << 10


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


class Segment:
    def __init__(
        self,
        storage: StorageEngine,
        directory: str,
        base_offset: int,
        now_ms: int,
        suffix: str = "",
    ) -> None:
        """`suffix` names files being written aside (the cleaner's ".cleaned")."""
        stem = f"{directory}/{segment_name(base_offset)}"
        self.base_offset = base_offset
        opened: list[AppendFile] = []
        try:
            for kind in SUFFIXES[:3]:
                opened.append(storage.open_append(stem + kind + suffix))
        except OSError:
            for file in opened:
                file.close()
            raise
        self.log: AppendFile = opened[0]
        self.offset_index = OffsetIndex(opened[1])
        self.time_index = TimeIndex(opened[2])
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_ms = now_ms
        self._bytes_since_index = 0
        self.stem = stem
        self.suffix = suffix
        self._storage = storage
        self._txn_index: AppendFile | None = None

    @property
    def size(self) -> int:
        return self.log.size

    @property
    def is_empty(self) -> bool:
        return self.next_offset == self.base_offset

    def append(self, batch: bytes | bytearray, header: BatchHeader, index_interval: int) -> int:
        """Appends a batch whose header fields describe its final offsets; returns its position.
        Raises StorageError with nothing changed when the log or an index write fails."""
        position = self.log.append(batch)
        saved = self.append_state()
        relative_last = header.last_offset - self.base_offset
        try:
            # Time index entries hold the running maximum: a lookup skips everything up to an
            # entry below its target, so unindexed batches with larger timestamps must count.
            self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
            if position == 0 or self._bytes_since_index >= index_interval:
                self.offset_index.append(header.base_offset - self.base_offset, position)
                if self.max_timestamp > self.time_index.last_timestamp:
                    self.time_index.append(self.max_timestamp, relative_last)
                self._bytes_since_index = 0
        except OSError:
            self.undo_append(position, saved)
            raise
        self._bytes_since_index += len(batch)
        self.next_offset = header.last_offset + 1
        return position

    def append_many(self, batches: list[tuple[bytes, BatchHeader]], index_interval: int) -> None:
        """Appends batches with their final offsets in one write (the cleaner's output)."""
        position = self.log.append(b"".join(batch for batch, _ in batches))
        saved = self.append_state()
        next_offset = self.next_offset
        try:
            for batch, header in batches:
                self._index_recovered(position, header, index_interval)
                position += len(batch)
        except OSError:
            self.undo_append(position, saved, next_offset)
            raise

    def append_state(self) -> tuple[int, int, int, int]:
        return (
            self.max_timestamp,
            self._bytes_since_index,
            len(self.offset_index.positions),
            len(self.time_index.timestamps),
        )

    def undo_append(
        self, position: int, saved: tuple[int, int, int, int], next_offset: int | None = None
    ) -> None:
        """Takes back the append that started at `position` (whose effects happened after
        `saved` = append_state()). A failing cut marks the file failed (the engine's contract),
        so no later append can land after the bytes we could not remove."""
        self.max_timestamp, self._bytes_since_index, offsets, times = saved
        if next_offset is not None:
            self.next_offset = next_offset
        # The log first: a batch left behind would share its offsets with the next append.
        # Each step runs even if an earlier one fails; the first failure is raised.
        steps: list[Callable[[], None]] = []
        if self.log.size > position:
            steps.append(lambda: self.log.truncate(position))
        if len(self.offset_index.positions) > offsets:
            steps.append(lambda: self.offset_index.truncate_entries(offsets))
        if len(self.time_index.timestamps) > times:
            steps.append(lambda: self.time_index.truncate_entries(times))
        failure: OSError | None = None
        for step in steps:
            try:
                step()
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    # -- reading -------------------------------------------------------------------------------

    def batches(self, position: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every whole batch from `position` (a batch's) on, with its bytes, read in large
        chunks (the cleaner's scans: few reads, so a worker thread seldom gives up the
        interpreter lock and waits to get it back; a coordinator's load: two reads a batch
        cost more than its records)."""
        size = self.log.size
        while position < size:
            chunk = self.log.read(position, min(max(_SCAN_CHUNK, HEADER_SIZE), size - position))
            local = 0
            while True:
                prefix = peek_batch_size(chunk, local)
                if prefix is None or local + prefix[1] > len(chunk):
                    break
                total = prefix[1]
                if prefix[2] != 2 or total < HEADER_SIZE:
                    return
                yield parse_header(chunk, local), chunk[local : local + total]
                local += total
            if local == 0:  # one batch larger than a chunk, or a cut one
                if len(chunk) < HEADER_SIZE:
                    return
                header = parse_header(chunk)
                if header.magic != 2 or position + header.size > size:
                    return
                yield header, self.log.read(position, header.size)
                local = header.size
            position += local

    def headers(
        self, position: int = 0, chunk: int = HEADER_SIZE
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Batch headers from `position` on (no CRC check), stopping at a cut batch; the file
        is read `chunk` bytes at a time (a header's by default: a lookup wants one or two)."""
        size = self.log.size
        data, start = b"", position  # the file's bytes from `start`
        while position + HEADER_SIZE <= size:
            if position + HEADER_SIZE > start + len(data):
                data, start = self.log.read(position, min(chunk, size - position)), position
                if len(data) < HEADER_SIZE:
                    return
            header = parse_header(data, position - start)
            if header.magic != 2 or header.size < HEADER_SIZE or position + header.size > size:
                return
            yield position, header
            position += header.size

    def position_of(self, offset: int) -> int | None:
        """Position of the batch holding `offset` (or the first one after it), None if none."""
        start = self.offset_index.lookup(offset - self.base_offset)
        for position, header in self.headers(start):
            if header.last_offset >= offset:
                return position
        return None

    def read(self, offset: int, max_bytes: int, upper_offset: int) -> bytes | memoryview:
        """Whole batches from the one holding `offset`, ending before `upper_offset`, at most
        `max_bytes` unless the first batch alone is larger (KIP-74: always make progress).
        When the read ends inside a batch, the whole batches are a memoryview of what was
        read: slicing the bytes would copy them (a Fetch hands them to the socket as they
        are)."""
        position = self.position_of(offset)
        if position is None:
            return b""
        # At least a header, so that a first batch larger than a tiny max_bytes is still seen.
        data = self.log.read(position, min(max(max_bytes, HEADER_SIZE), self.log.size - position))
        # the batches up to the last indexed one that fits are whole: only the rest is walked
        end = (
            self.offset_index.last_within(
                position, position + len(data), upper_offset - self.base_offset
            )
            - position
        )
        while True:
            prefix = peek_batch_size(data, end)
            if prefix is None:
                break
            base_offset, size, _magic = prefix
            if base_offset >= upper_offset:
                break
            if end + size > len(data):
                if end == 0:  # the first batch is larger than max_bytes: return it whole
                    return self.log.read(position, size)
                break
            end += size
        if end == len(data):
            return data
        return memoryview(data)[:end] if end else b""

    def read_range(
        self, offset: int, max_bytes: int, upper_offset: int, smallest: int = SMALLEST_RANGE
    ) -> bytes | FileRange:
        """The batches `read` gives, as a FileRange of the segment file that the caller owns
        when they come to at least `smallest` bytes and storage lends a descriptor (bytes
        otherwise; b"" for none). Only batch headers past the last indexed batch within reach
        are read, never the records themselves."""
        span = self.span(offset, max_bytes, upper_offset)
        if span is None:
            return b""
        position, size = span
        file_range = self.log.file_range(position, size) if size >= smallest else None
        return self.log.read(position, size) if file_range is None else file_range

    def span(self, offset: int, max_bytes: int, upper_offset: int) -> tuple[int, int] | None:
        """(position, size) of the whole batches `read` returns, None when it returns none."""
        position = self.position_of(offset)
        if position is None:
            return None
        file_size = self.log.size
        # as read: at least a header, so that a first batch larger than max_bytes is seen
        limit = min(position + max(max_bytes, HEADER_SIZE), file_size)
        end = self.offset_index.last_within(position, limit, upper_offset - self.base_offset)
        while end < limit:
            chunk = self.log.read(end, min(_WALK_CHUNK, limit - end))
            local = 0
            while (prefix := peek_batch_size(chunk, local)) is not None:
                base_offset, size, _magic = prefix
                if base_offset >= upper_offset:
                    return (position, end + local - position) if end + local > position else None
                if end + local + size > limit:
                    if end + local == position:  # the first batch is larger: KIP-74, whole
                        return position, min(size, file_size - position)
                    return position, end + local - position
                local += size  # past the chunk for a large batch: the next read starts there
            if local == 0:  # not even a batch prefix before the limit
                break
            end += local
        return (position, end - position) if end > position else None

    # -- recovery ------------------------------------------------------------------------------

    def recover(self, index_interval: int, validate: bool) -> int:
        """Rebuilds state by scanning the file. With `validate`, checks every CRC and cuts the
        file at the first torn or corrupt batch. Returns the number of bytes cut."""
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_index = 0
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        size = self.log.size
        position = 0
        chunk = b""
        chunk_start = 0
        while position < size:
            if position + HEADER_SIZE > chunk_start + len(chunk):
                chunk_start = position
                chunk = self.log.read(position, max(_SCAN_CHUNK, HEADER_SIZE))
            local = position - chunk_start
            prefix = peek_batch_size(chunk, local)
            if prefix is None or prefix[1] < HEADER_SIZE or prefix[2] != 2:
                break
            total = prefix[1]
            if local + total > len(chunk):
                chunk_start = position
                chunk = self.log.read(position, max(_SCAN_CHUNK, total))
                local = 0
                if total > len(chunk):
                    break
            header = batch_is_intact(chunk, local) if validate else parse_header(chunk, local)
            if header is None:
                break
            self._index_recovered(position, header, index_interval)
            position += total
        cut = size - position
        if cut:
            self.log.truncate(position)
        return cut

    def _index_recovered(self, position: int, header: BatchHeader, index_interval: int) -> None:
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        if position == 0 or self._bytes_since_index >= index_interval:
            self.offset_index.append(header.base_offset - self.base_offset, position)
            if self.max_timestamp > self.time_index.last_timestamp:
                self.time_index.append(self.max_timestamp, header.last_offset - self.base_offset)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.next_offset = header.last_offset + 1

    def load(self, index_interval: int) -> bool:
        """Opens a sealed segment (or the active one after a clean shutdown): trusts valid
        index files, rebuilds damaged or missing ones. A segment with data always has an
        offset index entry for position 0 and a time index entry (unless no batch carries a
        timestamp: rebuilding those costs only a scan). True if its batches end exactly at
        the end of the file (nothing torn after them)."""
        if not (
            self.offset_index.load(self.log.size)
            and self.time_index.load()
            and self.offset_index.positions
            and self.time_index.timestamps
        ):
            return self.recover(index_interval, validate=False) == 0
        end = self.offset_index.positions[-1]
        tail_max = -1  # batches after the last index entries (an active segment has some)
        for position, header in self.headers(end, _WALK_CHUNK):  # (a few reads, not one each)
            self.next_offset = header.last_offset + 1
            tail_max = max(tail_max, header.max_timestamp)
            end = position + header.size
        self.max_timestamp = max(self.time_index.last_timestamp, tail_max)
        beyond_end = self.base_offset + self.time_index.relative_offsets[-1] >= self.next_offset
        if self.next_offset == self.base_offset or beyond_end:
            return self.recover(index_interval, validate=False) == 0
        return end == self.log.size

    def txn_index(self) -> AppendFile:
        """The aborted-transaction index file, opened on first use (most segments have none)."""
        if self._txn_index is None:
            self._txn_index = self._storage.open_append(self.txn_index_path)
        return self._txn_index

    @property
    def txn_index_path(self) -> str:
        return self.stem + SUFFIXES[3] + self.suffix

    def paths(self) -> list[str]:
        return [self.stem + kind + self.suffix for kind in SUFFIXES]

    def delete(self) -> None:
        """Closes the segment and removes its files."""
        self.close()
        for path in self.paths():
            self._storage.remove(path)

    def sync(self) -> None:
        for file in (self.log, self.offset_index.file, self.time_index.file, self._txn_index):
            if file is not None:
                file.sync()

    def close(self) -> None:
        for file in (self.log, self.offset_index.file, self.time_index.file, self._txn_index):
            if file is not None:
                file.close()

    def seal(self) -> None:
        """Called when the segment stops being active: the last time-index entry records the
        segment's max timestamp so retention and ListOffsets need no scan after a restart."""
        if not self.is_empty:
            self.time_index.append(self.max_timestamp, self.next_offset - 1 - self.base_offset)
