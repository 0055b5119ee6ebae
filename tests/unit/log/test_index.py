"""Offset and time indexes: lookups, loading (and refusing damaged files), truncation."""

from __future__ import annotations

import struct

import pytest

from lockgate.log.index import OffsetIndex, TimeIndex
from lockgate.storage.memory import MemoryEngine


def offset_index(raw: bytes = b"") -> tuple[OffsetIndex, MemoryEngine]:
    storage = MemoryEngine()
    storage.write_atomic("x.index", raw)
    return OffsetIndex(storage.open_append("x.index")), storage


def time_index(raw: bytes = b"") -> tuple[TimeIndex, MemoryEngine]:
    storage = MemoryEngine()
    storage.write_atomic("x.timeindex", raw)
    return TimeIndex(storage.open_append("x.timeindex")), storage


def offset_entries(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">ii", *entry) for entry in entries)


def time_entries(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">qi", *entry) for entry in entries)


def test_offset_index_append_writes_kafka_layout() -> None:
    index, storage = offset_index()
    index.append(0, 0)
    index.append(5, 700)
    index.append(2**31 - 1, 2**31 - 1)
    assert storage.read_all("x.index") == offset_entries((0, 0), (5, 700), (2**31 - 1, 2**31 - 1))


def test_offset_index_lookup() -> None:
    index, _ = offset_index()
    for relative, position in ((0, 0), (10, 1000), (20, 2000)):
        index.append(relative, position)
    assert index.lookup(0) == 0
    assert index.lookup(9) == 0
    assert index.lookup(10) == 1000
    assert index.lookup(19) == 1000
    assert index.lookup(20) == 2000
    assert index.lookup(10**9) == 2000
    assert index.lookup(-1) == 0  # before the first entry: scan from the start


def test_empty_offset_index_lookup_starts_at_zero() -> None:
    index, _ = offset_index()
    assert index.lookup(42) == 0


def test_offset_index_load() -> None:
    index, _ = offset_index(offset_entries((0, 0), (3, 300), (9, 900)))
    assert index.load(log_size=1000)
    assert list(index.relative_offsets) == [0, 3, 9]
    assert list(index.positions) == [0, 300, 900]
    assert index.lookup(4) == 300


@pytest.mark.parametrize(
    "raw",
    [
        offset_entries((0, 0), (3, 300))[:-1],  # a torn entry
        offset_entries((0, 0), (3, 300)) + b"\x00",
        offset_entries((0, 0), (3, 300), (3, 400)),  # offsets must grow
        offset_entries((0, 0), (5, 300), (4, 400)),
        offset_entries((0, 0), (3, 300), (4, 300)),  # positions must grow
        offset_entries((0, 0), (3, 300), (4, 200)),
        offset_entries((0, 0), (3, 1000)),  # position past the log
        offset_entries((-1, 0)),  # negative relative offset
        offset_entries((0, -5)),
        b"\xff" * 16,
    ],
)
def test_damaged_offset_index_does_not_load(raw: bytes) -> None:
    index, _ = offset_index(raw)
    assert not index.load(log_size=1000)
    assert len(index.relative_offsets) == len(index.positions) == 0


def test_offset_index_reset_and_truncate() -> None:
    index, storage = offset_index()
    for relative, position in ((0, 0), (10, 1000), (20, 2000), (30, 3000)):
        index.append(relative, position)
    index.truncate_to_position(2000)  # drops entries at or after the position
    assert list(index.positions) == [0, 1000]
    assert storage.read_all("x.index") == offset_entries((0, 0), (10, 1000))
    index.truncate_to_position(1500)
    assert list(index.positions) == [0, 1000]
    index.append(12, 1200)
    assert storage.read_all("x.index") == offset_entries((0, 0), (10, 1000), (12, 1200))
    index.reset()
    assert len(index.positions) == 0
    assert storage.read_all("x.index") == b""


def test_time_index_append_keeps_only_growing_timestamps() -> None:
    index, storage = time_index()
    assert index.last_timestamp == -1
    index.append(100, 0)
    index.append(100, 3)  # not larger: ignored
    index.append(50, 4)  # smaller: ignored
    index.append(200, 5)
    assert index.last_timestamp == 200
    assert list(index.timestamps) == [100, 200]
    assert list(index.relative_offsets) == [0, 5]
    assert storage.read_all("x.timeindex") == time_entries((100, 0), (200, 5))


def test_time_index_lookup_returns_the_entry_before_the_first_reaching_the_target() -> None:
    index, _ = time_index()
    for timestamp, relative in ((100, 2), (200, 7), (300, 12)):
        index.append(timestamp, relative)
    assert index.lookup(50) == 0
    assert index.lookup(100) == 0  # the entry at 100 may hold the first record at 100
    assert index.lookup(101) == 2
    assert index.lookup(200) == 2
    assert index.lookup(250) == 7
    assert index.lookup(10**15) == 12


def test_time_index_load() -> None:
    index, _ = time_index(time_entries((100, 0), (200, 4), (300, 4)))
    assert index.load()
    assert list(index.timestamps) == [100, 200, 300]
    assert index.last_timestamp == 300


@pytest.mark.parametrize(
    "raw",
    [
        time_entries((100, 0), (200, 4))[:-3],
        time_entries((100, 0), (100, 4)),  # timestamps must grow
        time_entries((200, 0), (100, 4)),
        time_entries((100, 5), (200, 4)),  # offsets must not shrink
        time_entries((100, -1)),  # negative relative offset
        b"\xff" * 12,
    ],
)
def test_damaged_time_index_does_not_load(raw: bytes) -> None:
    index, _ = time_index(raw)
    assert not index.load()
    assert len(index.timestamps) == len(index.relative_offsets) == 0
    assert index.last_timestamp == -1


def test_time_index_reset_and_truncate() -> None:
    index, storage = time_index()
    for timestamp, relative in ((100, 0), (200, 5), (300, 9)):
        index.append(timestamp, relative)
    index.truncate_to_offset(5)
    assert list(index.relative_offsets) == [0]
    assert storage.read_all("x.timeindex") == time_entries((100, 0))
    index.append(150, 3)
    assert index.last_timestamp == 150
    index.reset()
    assert index.last_timestamp == -1
    assert storage.read_all("x.timeindex") == b""
