# Reads of tiered segments (KIP-405's RemoteLogReader): whole batches from a remote segment at
# a fetch offset, found through the segment's uploaded offset index, and the aborted
# transactions a read_committed consumer needs, from the uploaded transaction indexes. All
# through the object store's async client: a remote read never holds the event loop.
#
# Invariants: an answer is whole batches starting with the one holding the fetch offset; at
# most `max_bytes` unless the first batch alone is larger (KIP-74: it is sent whole); never a
# batch at or past `upper_offset`. Indexes and transaction indexes are cached (bounded, by
# segment): a segment's objects never change once its manifest exists.
from __future__ import annotations

import bisect
import struct
from collections import OrderedDict
from collections.abc import Sequence
from typing import TypeVar

from lockgate.log.txn_index import ENTRY_SIZE, AbortedTxn
from lockgate.protocol.records import HEADER_SIZE, iter_records, parse_header
from lockgate.storage.object_store import ObjectStore
from lockgate.tiered.layout import INDEX, LOG, TIME_INDEX, TXN_INDEX, RemoteSegment

_V = TypeVar("_V")
MIN_CHUNK = 64 << 10  # a read asks for at least this much past the index entry
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
TIME_SCAN_BYTES = 1 << 20  # what a timestamp lookup reads at a time
_TXN_ENTRY = struct.Struct(">hqqqq")


class RemoteReader:
    def __init__(self, store: ObjectStore, cached_segments: int = 1024) -> None:
        self.store = store
        self.cached_segments = cached_segments
        self._indexes: OrderedDict[str, tuple[list[int], list[int]]] = OrderedDict()
        self._aborted: OrderedDict[str, list[AbortedTxn]] = OrderedDict()
        self.bytes_read = 0

    async def read(
        self, segment: RemoteSegment, offset: int, max_bytes: int, upper_offset: int
    ) -> bytes:
        """Whole batches of `segment` from the one holding `offset` (b"" if none is below
        `upper_offset`)."""
        position = await self._position(segment, offset)
        log_key = segment.key(LOG)
        while position < segment.size:
            end = min(segment.size, position + max(max_bytes, MIN_CHUNK))
            data = await self.store.get_range(log_key, position, end)
            self.bytes_read += len(data)
            walked = _walk(data, offset, max_bytes, upper_offset)
            if walked is None:
                return b""  # reached upper_offset
            start, stop, first_size = walked
            if start < 0:  # every batch of the chunk is below the offset: on to the next
                position += stop
                continue
            if stop > start:
                return data[start:stop]
            # the first batch wanted is longer than the chunk: it goes whole (KIP-74)
            whole = await self.store.get_range(log_key, position + start,
                                               position + start + first_size)  # fmt: skip
            self.bytes_read += len(whole)
            return whole
        return b""

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
    ) -> list[AbortedTxn]:
        """The aborted transactions of these segments whose range meets [start, end)."""
        found: list[AbortedTxn] = []
        for segment in segments:
            for entry in await self._aborted_of(segment):
                if entry.last_offset >= start and entry.first_offset < end:
                    found.append(entry)
        return found

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
