"""Segment reads as file ranges (what Fetch sends with sendfile): the same whole batches as the
bytes read gives, descriptors owned by the range and bounded, and a cut file detected."""

from __future__ import annotations

import errno
import gc
import os
import random
from pathlib import Path

import pytest

from lockgate.log.segment import SMALLEST_RANGE, Segment
from lockgate.protocol.file_range import FileRange, RangeCut
from lockgate.protocol.records import HEADER_SIZE, build_batch, parse_header
from lockgate.storage.disk import DiskEngine
from lockgate.storage.memory import MemoryEngine

DIRECTORY = "t-0"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def new_segment(storage: DiskEngine | MemoryEngine, base_offset: int = 0) -> Segment:
    storage.make_dirs(DIRECTORY)
    return Segment(storage, DIRECTORY, base_offset, now_ms=1_000)


def add(segment: Segment, count: int, value_size: int, interval: int) -> bytes:
    batch = build_batch(
        [(None, bytes([i % 251]) * value_size) for i in range(count)],
        base_offset=segment.next_offset,
        timestamp_ms=10,
    )
    segment.append(batch, parse_header(batch), interval)
    return batch


def as_bytes(data: bytes | FileRange) -> bytes:
    if isinstance(data, FileRange):
        try:
            return data.read()
        finally:
            data.close()
    return data


@pytest.mark.parametrize("seed", range(6))
def test_ranges_hold_exactly_the_batches_read_gives(tmp_path: Path, seed: int) -> None:
    """Over generated logs (batches from tens of bytes to several walk chunks, index entries
    sparse to dense): every offset, upper offset and max_bytes (cutting inside batches, below
    the first batch, beyond the log) gives a range of exactly read's bytes."""
    rng = random.Random(seed)
    storage = DiskEngine(str(tmp_path))
    interval = rng.choice([1, 200, 4096, 100_000])
    segment = new_segment(storage, base_offset=rng.randrange(0, 1000))
    for _ in range(rng.randrange(5, 25)):
        size = rng.choice([1, 10, 100, 3_000, 20_000])
        add(segment, rng.randrange(1, 6), size, interval)
    first, end = segment.base_offset, segment.next_offset
    size = segment.size
    gc.collect()  # earlier tests' unreachable files close now, not mid-count
    fds = open_fds()
    for _ in range(300):
        offset = rng.randrange(first, end + 2)
        upper = rng.choice([offset, offset + 1, offset + rng.randrange(1, 40), end, 10**9])
        max_bytes = rng.choice([0, 1, HEADER_SIZE, rng.randrange(size + 1), size, 10**9])
        expected = segment.read(offset, max_bytes, upper)
        got = segment.read_range(offset, max_bytes, upper, smallest=0)
        assert isinstance(got, FileRange) == bool(expected)
        assert as_bytes(got) == expected, (offset, max_bytes, upper)
    assert open_fds() == fds
    assert storage.handles.ranges_out == 0


def test_without_descriptors_and_below_the_smallest_range_the_bytes_are_read(
    tmp_path: Path,
) -> None:
    memory = new_segment(MemoryEngine())
    disk = new_segment(DiskEngine(str(tmp_path)))
    for segment in (memory, disk):
        for _ in range(12):
            add(segment, 1, 1_000, 4096)
    whole = memory.read(0, 10**6, 10**6)
    assert memory.read_range(0, 10**6, 10**6, smallest=0) == whole  # memory: bytes, always
    small = disk.read_range(0, SMALLEST_RANGE - 1, 10**6)
    assert type(small) is bytes and small == disk.read(0, SMALLEST_RANGE - 1, 10**6)
    assert 0 < len(small) < SMALLEST_RANGE < len(whole)
    large = disk.read_range(0, 10**6, 10**6)
    assert isinstance(large, FileRange) and as_bytes(large) == whole


def test_handles_are_given_back_when_ranges_are_dropped_unwritten(tmp_path: Path) -> None:
    """A range holds its segment's cached handle pinned (no descriptor of its own) until it
    is closed, or collected: the safety net for one nobody closed."""
    storage = DiskEngine(str(tmp_path))
    segment = new_segment(storage)
    batch = add(segment, 50, 400, 4096)
    gc.collect()  # earlier tests' unreachable files close now, not mid-count
    fds = open_fds()
    ranges = [segment.read_range(0, 10**6, 10**6, smallest=0) for _ in range(10)]
    assert open_fds() == fds and storage.handles.ranges_out == 10
    for data in ranges[:5]:
        assert isinstance(data, FileRange)
        data.close()
        data.close()  # idempotent: the pin is given back once
    assert storage.handles.ranges_out == 5
    del ranges, data
    gc.collect()
    assert open_fds() == fds and storage.handles.ranges_out == 0
    again = segment.read_range(0, 10**6, 10**6, smallest=0)
    assert as_bytes(again) == batch
    segment.close()  # nothing pinned: the handles go at once (the log and its two indexes)
    assert open_fds() == fds - 3


def test_lent_descriptors_are_bounded_beyond_which_bytes_are_read(tmp_path: Path) -> None:
    storage = DiskEngine(str(tmp_path), max_open_files=64)
    segment = new_segment(storage)
    batch = add(segment, 50, 400, 4096)
    budget = storage.handles.range_budget
    held = [segment.read_range(0, 10**6, 10**6, smallest=0) for _ in range(budget + 3)]
    assert [isinstance(d, FileRange) for d in held] == [True] * budget + [False] * 3
    assert all(d == batch for d in held[budget:])
    for data in held[:budget]:
        assert isinstance(data, FileRange)
        data.close()
    assert storage.handles.ranges_out == 0
    assert isinstance(segment.read_range(0, 10**6, 10**6, smallest=0), FileRange)


def test_a_range_outlives_its_segment_and_the_eviction_of_its_handle(tmp_path: Path) -> None:
    """Retention deletes the segment and the handle cache runs out of room meanwhile: the
    pinned handle stays open, so the range still holds the bytes it stood for; the handle
    closes when the range does."""
    storage = DiskEngine(str(tmp_path), max_open_files=16)
    segment = new_segment(storage)
    batch = add(segment, 30, 500, 4096)
    data = segment.read_range(0, 10**6, 10**6, smallest=0)
    assert isinstance(data, FileRange)
    others = [new_segment(storage, base_offset=1000 * (i + 1)) for i in range(20)]
    for other in others:  # more files than the budget: unpinned handles are evicted
        add(other, 1, 10, 4096)
    assert storage.handles.open_count <= storage.handles.budget + 1
    segment.delete()
    assert not os.path.exists(tmp_path / DIRECTORY / "00000000000000000000.log")
    gc.collect()  # earlier tests' unreachable files close now, not mid-count
    fds = open_fds()
    assert data.read() == batch
    data.close()
    assert open_fds() == fds - 1  # the deleted segment's handle, closed at last


def test_a_range_of_a_file_cut_back_below_its_end_is_stale(tmp_path: Path) -> None:
    """A follower truncating its log, then appending its leader's batches at the same
    positions: the range must not send those other bytes (nor fewer bytes than it promised)."""
    storage = DiskEngine(str(tmp_path))
    segment = new_segment(storage)
    first = add(segment, 20, 300, 4096)
    add(segment, 20, 300, 4096)
    both = segment.read_range(0, 10**6, 10**6, smallest=0)
    head = segment.read_range(0, len(first), 10**6, smallest=0)
    assert isinstance(both, FileRange) and isinstance(head, FileRange)
    segment.log.truncate(len(first))  # what truncate_to does to the active segment's log
    add(segment, 20, 300, 4096)  # the same size again: other bytes at the same positions
    assert both.stale and not head.stale  # the cut is past head's end: its bytes are the same
    with pytest.raises(RangeCut):
        both.read()
    assert head.read() == first
    later = segment.read_range(0, 10**6, 10**6, smallest=0)
    assert isinstance(later, FileRange) and not later.stale  # made after the cut
    for data in (both, head, later):
        data.close()


def test_a_range_reading_short_raises_rather_than_return_fewer_bytes(tmp_path: Path) -> None:
    storage = DiskEngine(str(tmp_path))
    segment = new_segment(storage)
    add(segment, 20, 300, 4096)
    data = segment.read_range(0, 10**6, 10**6, smallest=0)
    assert isinstance(data, FileRange)
    os.truncate(tmp_path / DIRECTORY / "00000000000000000000.log", 100)  # behind our back
    with pytest.raises(RangeCut, match="read 0 of"):
        data.read(100)
    data.close()


def test_a_closed_file_lends_no_range(tmp_path: Path) -> None:
    storage = DiskEngine(str(tmp_path))
    segment = new_segment(storage)
    add(segment, 2, 10, 4096)
    segment.close()
    with pytest.raises(OSError) as raised:
        segment.read_range(0, 10**6, 10**6, smallest=0)
    assert raised.value.errno == errno.EBADF
    assert storage.handles.ranges_out == 0
