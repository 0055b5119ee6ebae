# Reads of tiered segments (KIP-405's RemoteLogReader): whole batches from a remote segment at
# a fetch offset, found through the segment's uploaded offset index, and the aborted
# transactions a read_committed consumer needs, from the uploaded transaction indexes. All
# through the object store's async client: a remote read never holds the event loop. Log
# bytes go through a bounded cache of aligned chunks, and a read fetches the chunk after it in
# the background (read-ahead: a consumer catching up reads on sequentially).
#
# Invariants: an answer is whole batches starting with the one holding the fetch offset; at
# most `max_bytes` unless the first batch alone is larger (KIP-74: it is sent whole); never a
# batch at or past `upper_offset`. Indexes and transaction indexes are cached (bounded, by
# segment): a segment's objects never change once its manifest exists.
from __future__ import annotations

import asyncio
import bisect
import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

from lockgate.log.txn_index import ENTRY_SIZE, AbortedTxn
from lockgate.protocol.records import HEADER_SIZE, iter_records, parse_header
from lockgate.storage.object_store import ObjectStore
from lockgate.tiered.layout import INDEX, LOG, TIME_INDEX, TXN_INDEX, RemoteSegment

_V = TypeVar("_V")
MIN_CHUNK = 64 << 10  # a read asks for at least this much past the index entry
CHUNK_BYTES = 1 << 20  # the unit of the cache and of read-ahead
DEFAULT_CACHE_BYTES = 64 << 20
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
TIME_SCAN_BYTES = 1 << 20  # what a timestamp lookup reads at a time
_TXN_ENTRY = struct.Struct(">hqqqq")


class RemoteReader:
    def __init__(
        self,
        store: ObjectStore,
        cached_segments: int = 1024,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.store = store
        self.cached_segments = cached_segments
        self.cache_bytes = cache_bytes
        self.chunk_bytes = chunk_bytes
        self._indexes: OrderedDict[str, tuple[list[int], list[int]]] = OrderedDict()
        self._aborted: OrderedDict[str, list[AbortedTxn]] = OrderedDict()
        # aligned chunks of segment logs, (stem, chunk number) → bytes, least recent first;
        # fetches of a chunk in flight are shared (a read and a read-ahead of the same one)
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._cached = 0
        self._inflight: dict[tuple[str, int], asyncio.Future[bytes]] = {}
        self._read_ahead: set[asyncio.Task[bytes]] = set()
        self.bytes_read = 0  # from the object store
        self.cache_hits = 0

    async def read(
        self, segment: RemoteSegment, offset: int, max_bytes: int, upper_offset: int
    ) -> bytes:
        """Whole batches of `segment` from the one holding `offset` (b"" if none is below
        `upper_offset`)."""
        position = await self._position(segment, offset)
        while position < segment.size:
            end = min(segment.size, position + max(max_bytes, MIN_CHUNK))
            data = await self._range(segment, position, end)
            walked = _walk(data, offset, max_bytes, upper_offset)
            if walked is None:
                return b""  # reached upper_offset
            start, stop, first_size = walked
            if start < 0:  # every batch of the chunk is below the offset: on to the next
                position += stop
                continue
            if stop > start:
                self._ahead(segment, position + stop)
                return data[start:stop]
            # the first batch wanted is longer than the chunk: it goes whole (KIP-74)
            end = position + start + first_size
            self._ahead(segment, end)
            return await self._range(segment, position + start, end)
        return b""

    # -- the chunk cache and read-ahead -------------------------------------------------------

    async def _range(self, segment: RemoteSegment, start: int, end: int) -> bytes:
        """Bytes [start, end) of the segment's log, through the cache of aligned chunks."""
        size = self.chunk_bytes
        parts = [await self._chunk(segment, n) for n in range(start // size, (end - 1) // size + 1)]
        first = (start // size) * size
        return b"".join(parts)[start - first : end - first]

    async def _chunk(self, segment: RemoteSegment, number: int) -> bytes:
        key = (segment.stem, number)
        cached = self._chunks.get(key)
        if cached is not None:
            self._chunks.move_to_end(key)
            self.cache_hits += 1
            return cached
        waiting = self._inflight.get(key)
        if waiting is None:
            waiting = asyncio.ensure_future(self._fetch_chunk(segment, number))
            self._inflight[key] = waiting
            waiting.add_done_callback(lambda _done: self._inflight.pop(key, None))
        return await asyncio.shield(waiting)

    async def _fetch_chunk(self, segment: RemoteSegment, number: int) -> bytes:
        start = number * self.chunk_bytes
        end = min(segment.size, start + self.chunk_bytes)
        data = await self.store.get_range(segment.key(LOG), start, end)
        self.bytes_read += len(data)
        key = (segment.stem, number)
        if key not in self._chunks and len(data) <= self.cache_bytes:
            self._chunks[key] = data
            self._cached += len(data)
            while self._cached > self.cache_bytes:
                _gone, evicted = self._chunks.popitem(last=False)
                self._cached -= len(evicted)
        return data

    def _ahead(self, segment: RemoteSegment, position: int) -> None:
        """A consumer reading on from `position` (catching up sequentially) will want the
        chunk there next: fetched now, in the background (its failure is the next read's)."""
        number = position // self.chunk_bytes
        key = (segment.stem, number)
        if position >= segment.size or key in self._chunks or key in self._inflight:
            return
        task = asyncio.get_running_loop().create_task(self._chunk(segment, number))
        self._read_ahead.add(task)
        task.add_done_callback(_forget_read_ahead(self._read_ahead))

    async def offset_for_timestamp(
        self, segment: RemoteSegment, timestamp: int, start: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the segment's first record at or after `start` whose
        timestamp is at least `timestamp`, or None: from the last time-index entry below the
        timestamp (every record up to its offset is older), batch by batch."""
        offset = max(start, segment.base_offset)
        if TIME_INDEX in segment.files:
            raw = await self.store.get(segment.key(TIME_INDEX))
            usable = len(raw) - len(raw) % _TIME_ENTRY.size
            for time, relative in _TIME_ENTRY.iter_unpack(raw[:usable]):
                if time >= timestamp:
                    break
                offset = max(offset, segment.base_offset + relative + 1)
        while offset <= segment.end_offset:
            data = await self.read(segment, offset, TIME_SCAN_BYTES, segment.next_offset)
            if not data:
                return None
            position = 0
            while position < len(data):
                header = parse_header(data, position)
                batch = data[position : position + header.size]
                position += header.size
                offset = header.last_offset + 1
                if header.max_timestamp < timestamp or header.is_control:
                    continue
                for record_offset, record_time, _key, _value in iter_records(batch):
                    if record_offset >= start and record_time >= timestamp:
                        return record_offset, record_time
        return None

    async def aborted(
        self, segments: Sequence[RemoteSegment], start: int, end: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions in the indexes of these segments (in offset order) whose
        range meets [start, end), and whether that is all of them. A transaction is indexed
        by the segment of its abort marker, which may follow the segments of its data; the
        search is complete at an entry whose last stable offset had reached `end`: every
        transaction with data below `end` had ended before that marker (as Kafka's
        TransactionIndex.collectAbortedTxns)."""
        found: list[AbortedTxn] = []
        for segment in segments:
            for entry in await self._aborted_of(segment):
                if entry.last_offset >= start and entry.first_offset < end:
                    found.append(entry)
                if entry.last_stable_offset >= end:
                    return found, True
        return found, False

    async def _position(self, segment: RemoteSegment, offset: int) -> int:
        relative, positions = await self._index(segment)
        at = bisect.bisect_right(relative, offset - segment.base_offset) - 1
        return positions[at] if at >= 0 else 0

    async def _index(self, segment: RemoteSegment) -> tuple[list[int], list[int]]:
        stem = segment.stem
        cached = self._indexes.get(stem)
        if cached is None:
            raw = await self.store.get(segment.key(INDEX)) if INDEX in segment.files else b""
            usable = len(raw) - len(raw) % _OFFSET_ENTRY.size
            pairs = list(_OFFSET_ENTRY.iter_unpack(raw[:usable]))
            cached = ([r for r, _ in pairs], [p for _, p in pairs])
            self._remember(self._indexes, stem, cached)
        else:
            self._indexes.move_to_end(stem)
        return cached

    async def _aborted_of(self, segment: RemoteSegment) -> list[AbortedTxn]:
        stem = segment.stem
        cached = self._aborted.get(stem)
        if cached is None:
            raw = (
                await self.store.get(segment.key(TXN_INDEX)) if TXN_INDEX in segment.files else b""
            )
            usable = len(raw) - len(raw) % ENTRY_SIZE
            cached = [AbortedTxn(*fields[1:]) for fields in _TXN_ENTRY.iter_unpack(raw[:usable])]
            self._remember(self._aborted, stem, cached)
        else:
            self._aborted.move_to_end(stem)
        return cached

    def _remember(self, cache: OrderedDict[str, _V], stem: str, value: _V) -> None:
        cache[stem] = value
        while len(cache) > self.cached_segments:
            cache.popitem(last=False)

    def forget(self, segment: RemoteSegment) -> None:
        self._indexes.pop(segment.stem, None)
        self._aborted.pop(segment.stem, None)
        for key in [k for k in self._chunks if k[0] == segment.stem]:
            self._cached -= len(self._chunks.pop(key))


def _forget_read_ahead(tasks: set[asyncio.Task[bytes]]) -> Callable[[asyncio.Task[bytes]], None]:
    def done(task: asyncio.Task[bytes]) -> None:
        tasks.discard(task)
        if not task.cancelled():
            task.exception()  # (retrieved: a failed read-ahead is the next read's to meet)

    return done


def _walk(
    data: bytes, offset: int, max_bytes: int, upper_offset: int
) -> tuple[int, int, int] | None:
    """Over the batches of a chunk: (start, stop, size of the first batch wanted) of the
    whole batches to answer; start -1 (stop = where the walk ended) when every batch seen is
    below `offset`; None once a batch at or past `upper_offset` comes first."""
    position = 0
    start = -1
    first_size = 0
    while position + HEADER_SIZE <= len(data):
        header = parse_header(data, position)
        if header.last_offset < offset:
            if position + header.size > len(data):
                break
            position += header.size
            continue
        if header.base_offset >= upper_offset:
            return None if start < 0 else (start, position, first_size)
        if start < 0:
            start, first_size = position, header.size
        if position + header.size > len(data) or position + header.size - start > max_bytes:
            return start, position, first_size
        position += header.size
    return start, position, first_size
