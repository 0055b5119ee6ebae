# Aborted transactions of one partition, for read_committed fetches: (producer id, first
# offset, last offset = the abort marker's offset, last stable offset at the abort). Kept in
# memory in marker order and mirrored to a Kafka-layout .txnindex file per segment.
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from lockgate.storage.engine import StorageEngine

_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset
ENTRY_SIZE = _ENTRY.size


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class AbortedTxnIndex:
    def __init__(self) -> None:
        self.entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []

    def add(self, entry: AbortedTxn) -> bool:
        """Adds an entry unless its marker is already known (replays); True if added."""
        i = bisect.bisect_left(self._last_offsets, entry.last_offset)
        while i < len(self.entries) and self._last_offsets[i] == entry.last_offset:
            if self.entries[i].producer_id == entry.producer_id:
                return False
            i += 1
        self.entries.insert(i, entry)
        self._last_offsets.insert(i, entry.last_offset)
        return True

    def has(self, entry: AbortedTxn) -> bool:
        i = bisect.bisect_left(self._last_offsets, entry.last_offset)
        while i < len(self.entries) and self._last_offsets[i] == entry.last_offset:
            if self.entries[i].producer_id == entry.producer_id:
                return True
            i += 1
        return False

    def discard(self, entry: AbortedTxn) -> None:
        i = bisect.bisect_left(self._last_offsets, entry.last_offset)
        while i < len(self.entries) and self._last_offsets[i] == entry.last_offset:
            if self.entries[i] == entry:
                del self.entries[i]
                del self._last_offsets[i]
                return
            i += 1

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [start, end): those a consumer must drop."""
        i = bisect.bisect_left(self._last_offsets, start)
        return [e for e in self.entries[i:] if e.first_offset < end]

    def drop_before(self, offset: int) -> None:
        """Forgets transactions whose marker was deleted by retention."""
        i = bisect.bisect_left(self._last_offsets, offset)
        del self.entries[:i]
        del self._last_offsets[:i]

    def drop_from(self, offset: int) -> None:
        i = bisect.bisect_left(self._last_offsets, offset)
        del self.entries[i:]
        del self._last_offsets[i:]


def encode_entry(entry: AbortedTxn) -> bytes:
    return _ENTRY.pack(
        0, entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset
    )


def load_entries(storage: StorageEngine, path: str) -> list[AbortedTxn]:
    raw = storage.read_all(path) or b""
    usable = len(raw) - len(raw) % _ENTRY.size  # a torn last entry is re-derived by replay
    return [AbortedTxn(*fields[1:]) for fields in _ENTRY.iter_unpack(raw[:usable])]
