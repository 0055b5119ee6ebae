# Sparse indexes of one segment, kept in memory and mirrored to Kafka-layout files.
#
# Offset index entries: (offset - segment base) int32, file position int32.
# Time index entries: max timestamp so far int64, (offset - segment base) int32.
# Both are append-only and strictly increasing; a file that breaks that is rebuilt.
# An append writes the file first: when storage refuses it, memory is unchanged.
from __future__ import annotations

import bisect
import operator
import struct
import sys
from array import array
from itertools import islice

from lockgate.storage.engine import AppendFile

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def _int32s(raw: bytes) -> array[int]:
    """Big-endian int32s."""
    values = array("i")  # (a C int: 4 bytes wherever CPython runs)
    values.frombytes(raw)
    if sys.byteorder == "little":
        values.byteswap()
    return values


def _growing(values: array[int]) -> bool:
    """Each value above the one before it."""
    return all(map(operator.lt, values, islice(values, 1, None)))


class OffsetIndex:
    def __init__(self, file: AppendFile) -> None:
        self.file = file
        self.relative_offsets = array("q")
        self.positions = array("q")

    def load(self, log_size: int) -> bool:
        """Loads the file; False (and empty) when it is damaged and must be rebuilt."""
        raw = self.file.read(0, self.file.size)
        if len(raw) % _OFFSET_ENTRY.size:
            return False
        # (in bulk, no Python step per entry: a broker's start loads every index of its
        # internal partitions, hundreds of thousands of entries after a long history)
        fields = _int32s(raw)
        relative_offsets, positions = array("q", fields[0::2]), array("q", fields[1::2])
        if relative_offsets and not (
            relative_offsets[0] >= 0
            and positions[0] >= 0
            and positions[-1] < log_size
            and _growing(relative_offsets)
            and _growing(positions)
        ):
            self.relative_offsets, self.positions = array("q"), array("q")
            return False
        self.relative_offsets, self.positions = relative_offsets, positions
        return True

    def append(self, relative_offset: int, position: int) -> None:
        self.file.append(_OFFSET_ENTRY.pack(relative_offset, position))
        self.relative_offsets.append(relative_offset)
        self.positions.append(position)

    def truncate_entries(self, count: int) -> None:
        del self.relative_offsets[count:]
        del self.positions[count:]
        self.file.truncate(count * _OFFSET_ENTRY.size)

    def lookup(self, relative_offset: int) -> int:
        """File position of the last indexed batch starting at or before the offset."""
        i = bisect.bisect_right(self.relative_offsets, relative_offset) - 1
        return self.positions[i] if i >= 0 else 0

    def last_within(self, start: int, end: int, relative_upper: int) -> int:
        """The position of the last indexed batch that starts between positions `start` and
        `end` and at a relative offset of at most `relative_upper`; `start` when there is
        none. Every batch from `start` up to it ends by `end` and starts below
        `relative_upper`, so a read can skip them without looking at each."""
        i = min(
            bisect.bisect_right(self.positions, end),
            bisect.bisect_right(self.relative_offsets, relative_upper),
        )
        return max(self.positions[i - 1], start) if i > 0 else start

    def reset(self) -> None:
        self.relative_offsets = array("q")
        self.positions = array("q")
        self.file.truncate(0)

    def truncate_to_position(self, position: int) -> None:
        keep = bisect.bisect_left(self.positions, position)
        del self.relative_offsets[keep:]
        del self.positions[keep:]
        self.file.truncate(keep * _OFFSET_ENTRY.size)


class TimeIndex:
    def __init__(self, file: AppendFile) -> None:
        self.file = file
        self.timestamps = array("q")
        self.relative_offsets = array("q")

    def load(self) -> bool:
        """Loads the file; False (and empty) when it is damaged and must be rebuilt."""
        raw = self.file.read(0, self.file.size)
        if len(raw) % _TIME_ENTRY.size or not raw:
            return not raw
        entries = zip(*_TIME_ENTRY.iter_unpack(raw), strict=True)
        timestamps, relative_offsets = array("q", next(entries)), array("q", next(entries))
        if not (
            timestamps[0] > -(2**63)
            and relative_offsets[0] >= 0  # relative offsets are never negative
            and _growing(timestamps)
            and all(map(operator.le, relative_offsets, islice(relative_offsets, 1, None)))
        ):
            self.timestamps, self.relative_offsets = array("q"), array("q")
            return False
        self.timestamps, self.relative_offsets = timestamps, relative_offsets
        return True

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def append(self, timestamp: int, relative_offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.file.append(_TIME_ENTRY.pack(timestamp, relative_offset))
        self.timestamps.append(timestamp)
        self.relative_offsets.append(relative_offset)

    def truncate_entries(self, count: int) -> None:
        del self.timestamps[count:]
        del self.relative_offsets[count:]
        self.file.truncate(count * _TIME_ENTRY.size)

    def lookup(self, timestamp: int) -> int:
        """Relative offset to start scanning from for the first record at or after `timestamp`:
        the entry before the first one that reaches it (entries hold running maxima)."""
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        return self.relative_offsets[i] if i >= 0 else 0

    def reset(self) -> None:
        self.timestamps = array("q")
        self.relative_offsets = array("q")
        self.file.truncate(0)

    def truncate_to_offset(self, relative_offset: int) -> None:
        keep = bisect.bisect_left(self.relative_offsets, relative_offset)
        del self.timestamps[keep:]
        del self.relative_offsets[keep:]
        self.file.truncate(keep * _TIME_ENTRY.size)
