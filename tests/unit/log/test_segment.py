"""One segment: appends and indexes, whole-batch reads (KIP-74), recovery and loading."""

from __future__ import annotations

import struct

import pytest

from lockgate.log.segment import Segment, segment_name
from lockgate.protocol.records import HEADER_SIZE, build_batch, parse_header
from lockgate.storage.memory import MemoryEngine

DIRECTORY = "t-0"


def new_segment(storage: MemoryEngine | None = None, base_offset: int = 0) -> Segment:
    storage = storage or MemoryEngine()
    storage.make_dirs(DIRECTORY)
    return Segment(storage, DIRECTORY, base_offset, now_ms=1_000)


def add(segment: Segment, count: int, timestamp: int, interval: int = 4096) -> bytes:
    batch = build_batch(
        [(None, b"value-%d" % i) for i in range(count)],
        base_offset=segment.next_offset,
        timestamp_ms=timestamp,
    )
    segment.append(batch, parse_header(batch), interval)
    return batch


def test_segment_name_is_twenty_digits() -> None:
    assert segment_name(0) == "00000000000000000000"
    assert segment_name(1234) == "00000000000000001234"
    assert len(segment_name(2**63 - 1)) == 20


def test_files_are_named_by_base_offset() -> None:
    storage = MemoryEngine()
    segment = new_segment(storage, 170)
    add(segment, 1, 5)
    assert storage.list_dir(DIRECTORY) == [
        "00000000000000000170.index",
        "00000000000000000170.log",
        "00000000000000000170.timeindex",
    ]
    segment.txn_index().append(b"x")
    assert "00000000000000000170.txnindex" in storage.list_dir(DIRECTORY)


def test_append_tracks_offsets_size_and_max_timestamp() -> None:
    segment = new_segment(base_offset=100)
    assert segment.is_empty and segment.size == 0 and segment.max_timestamp == -1
    first = add(segment, 3, 500)
    second = add(segment, 2, 300)
    assert not segment.is_empty
    assert segment.next_offset == 105
    assert segment.size == len(first) + len(second)
    assert segment.max_timestamp == 500
    assert [(p, h.base_offset) for p, h in segment.headers()] == [(0, 100), (len(first), 103)]


def test_index_entries_follow_the_interval() -> None:
    segment = new_segment()
    batches = [add(segment, 1, 100 + i, interval=250) for i in range(10)]
    size = len(batches[0])
    # The first batch is always indexed, then one batch once `interval` bytes have passed.
    step = -(-250 // size)
    expected = list(range(0, 10, step))
    assert list(segment.offset_index.relative_offsets) == expected
    assert list(segment.offset_index.positions) == [i * size for i in expected]
    for offset in range(10):
        assert segment.position_of(offset) == offset * size


def test_time_index_holds_the_running_maximum() -> None:
    """An unindexed batch with a large timestamp must not be skipped by a time lookup."""
    segment = new_segment()
    size = len(add(segment, 1, 100, interval=1))  # indexed: position 0
    add(segment, 1, 500, interval=size + 1)  # not indexed
    add(segment, 1, 200, interval=size + 1)  # indexed
    assert list(segment.offset_index.relative_offsets) == [0, 2]
    assert list(segment.time_index.timestamps) == [100, 500]
    assert list(segment.time_index.relative_offsets) == [0, 2]
    start = segment.time_index.lookup(300)
    assert start <= 1  # a scan from there meets offset 1 (timestamp 500)


def test_seal_records_the_max_timestamp() -> None:
    segment = new_segment()
    add(segment, 2, 100, interval=1)
    add(segment, 2, 900, interval=10**9)
    add(segment, 2, 400, interval=10**9)
    assert segment.time_index.last_timestamp == 100
    segment.seal()
    assert segment.time_index.last_timestamp == 900
    assert segment.time_index.relative_offsets[-1] == 5  # the segment's last offset
    empty = new_segment()
    empty.seal()
    assert empty.time_index.last_timestamp == -1


def test_read_whole_batches_within_max_bytes() -> None:
    segment = new_segment()
    batches = [add(segment, 2, 10) for _ in range(5)]
    size = len(batches[0])
    everything = b"".join(batches)
    assert segment.read(0, 10**6, 10**6) == everything
    assert segment.read(0, 3 * size, 10**6) == everything[: 3 * size]
    assert segment.read(0, 3 * size - 1, 10**6) == everything[: 2 * size]  # no partial batch
    assert segment.read(2, 2 * size + 5, 10**6) == everything[size : 3 * size]
    assert segment.read(3, 10**6, 10**6) == everything[size:]  # from the batch holding 3
    assert segment.read(10, 10**6, 10**6) == b""  # past the end


def test_a_read_cut_to_whole_batches_is_a_view_of_what_was_read() -> None:
    """No copy of the batches a Fetch sends: a read ending inside a batch (max_bytes or the
    upper offset) gives a memoryview of the bytes read, one ending at a batch boundary those
    bytes themselves, and nothing at all is b""."""
    segment = new_segment()
    batches = [add(segment, 2, 10) for _ in range(3)]  # offsets 0-1, 2-3, 4-5
    size = len(batches[0])
    by_size = segment.read(0, 2 * size + 5, 10**6)
    by_offset = segment.read(0, 10**6, 4)
    for cut in (by_size, by_offset):
        assert isinstance(cut, memoryview) and cut.format == "B" and cut.readonly
        assert cut.tobytes() == batches[0] + batches[1]
        assert isinstance(cut.obj, bytes) and len(cut.obj) > len(cut)
    assert type(segment.read(0, 10**6, 10**6)) is bytes  # the whole log: no cut
    assert type(segment.read(0, 1, 10**6)) is bytes  # KIP-74: the first batch, read whole
    assert type(segment.read(0, 10**6, 0)) is bytes


@pytest.mark.parametrize("interval", [1, 150, 400, 4096])
def test_reads_skipping_by_the_index_return_what_a_walk_over_every_batch_does(
    interval: int,
) -> None:
    """A read jumps over the batches the offset index vouches for (whole, below the upper
    offset) and walks only the rest: the answer must be the same whole batches whatever the
    index density, max_bytes and upper offset."""
    segment = new_segment(base_offset=50)
    batches = [add(segment, 1 + i % 3, 10, interval=interval) for i in range(12)]
    starts = [parse_header(b).base_offset for b in batches]
    assert len(segment.offset_index.positions) > (1 if interval < 4096 else 0)

    def expected(offset: int, max_bytes: int, upper: int) -> bytes:
        first = max(i for i, s in enumerate(starts) if s <= offset)
        chosen = b""
        for i in range(first, len(batches)):
            if starts[i] >= upper or len(chosen) + len(batches[i]) > max(max_bytes, HEADER_SIZE):
                break
            chosen += batches[i]
        return chosen or (batches[first] if starts[first] < upper else b"")

    sizes = [0, 1, HEADER_SIZE, len(batches[0]) + 1, 300, 777, 1500, 10**6]
    for offset in range(50, segment.next_offset):
        for upper in (offset, offset + 1, offset + 5, 60, 70, segment.next_offset, 10**6):
            for max_bytes in sizes:
                got = segment.read(offset, max_bytes, upper)
                assert got == expected(offset, max_bytes, upper), (offset, max_bytes, upper)


@pytest.mark.parametrize("max_bytes", [0, 1, 11, 12, 16, 17, HEADER_SIZE, 100])
def test_first_batch_is_returned_whole_whatever_max_bytes(max_bytes: int) -> None:
    """KIP-74: a fetch always makes progress, even when the first batch exceeds max_bytes."""
    segment = new_segment()
    big = add(segment, 20, 10)
    add(segment, 1, 10)
    assert len(big) > max_bytes
    assert segment.read(0, max_bytes, 10**6) == big


def test_read_stops_before_the_upper_offset() -> None:
    segment = new_segment()
    batches = [add(segment, 2, 10) for _ in range(3)]  # offsets 0-1, 2-3, 4-5
    assert segment.read(0, 10**6, 4) == batches[0] + batches[1]
    assert segment.read(0, 10**6, 3) == batches[0] + batches[1]  # batch holding 2 is whole
    assert segment.read(0, 10**6, 2) == batches[0]
    assert segment.read(0, 10**6, 0) == b""
    assert segment.read(0, 1, 0) == b""  # KIP-74 never reaches past the upper bound
    assert segment.read(2, 10**6, 2) == b""


def test_headers_stop_at_a_cut_batch() -> None:
    storage = MemoryEngine()
    segment = new_segment(storage)
    first = add(segment, 1, 10)
    second = add(segment, 1, 10)
    segment.log.truncate(len(first) + len(second) - 1)
    assert [p for p, _ in segment.headers()] == [0]


@pytest.mark.parametrize("chunk", [HEADER_SIZE, HEADER_SIZE + 5, 150, 1_000, 1 << 20])
@pytest.mark.parametrize("cut", [0, 1, HEADER_SIZE + 3])
def test_headers_read_a_chunk_at_a_time_are_those_read_one_at_a_time(chunk: int, cut: int) -> None:
    """(a load walks the batches after the last index entry a few reads at a time)"""
    segment = new_segment()
    for count in (1, 3, 1, 20, 2, 1, 7):
        add(segment, count, 10)
    start = [p for p, _ in segment.headers()][1]
    segment.log.truncate(segment.log.size - cut)  # nothing, a byte, a header and more
    one_at_a_time = list(segment.headers(start))
    assert len(one_at_a_time) == (6 if cut else 7) - 1
    assert list(segment.headers(start, chunk)) == one_at_a_time


def test_recover_cuts_a_corrupt_batch_and_what_follows() -> None:
    storage = MemoryEngine()
    segment = new_segment(storage)
    batches = [add(segment, 2, 100 + i) for i in range(4)]
    raw = storage.files[f"{DIRECTORY}/{segment_name(0)}.log"]
    raw[len(batches[0]) + len(batches[1]) + 40] ^= 0xFF  # inside the third batch's CRC range
    reopened = Segment(storage, DIRECTORY, 0, 2_000)
    cut = reopened.recover(4096, validate=True)
    assert cut == len(batches[2]) + len(batches[3])
    assert reopened.next_offset == 4
    assert reopened.max_timestamp == 101
    assert reopened.read(0, 10**6, 10**6) == batches[0] + batches[1]


def test_recover_without_validation_keeps_a_bad_crc() -> None:
    storage = MemoryEngine()
    segment = new_segment(storage)
    batches = [add(segment, 2, 100 + i) for i in range(2)]
    storage.files[f"{DIRECTORY}/{segment_name(0)}.log"][-1] ^= 0xFF
    reopened = Segment(storage, DIRECTORY, 0, 2_000)
    assert reopened.recover(4096, validate=False) == 0
    assert reopened.next_offset == 4
    assert reopened.size == sum(map(len, batches))


def test_recover_rebuilds_both_indexes() -> None:
    storage = MemoryEngine()
    segment = new_segment(storage)
    for i in range(6):
        add(segment, 1, 100 * (i % 3), interval=1)
    offsets = list(segment.offset_index.relative_offsets)
    times = list(segment.time_index.timestamps)
    storage.files[f"{DIRECTORY}/{segment_name(0)}.index"][:] = b"garbage"
    storage.files[f"{DIRECTORY}/{segment_name(0)}.timeindex"][:] = b""
    reopened = Segment(storage, DIRECTORY, 0, 2_000)
    reopened.recover(1, validate=True)
    assert list(reopened.offset_index.relative_offsets) == offsets
    assert list(reopened.time_index.timestamps) == times
    assert reopened.max_timestamp == 200


def test_load_of_a_sealed_segment_trusts_sound_indexes() -> None:
    storage = MemoryEngine()
    segment = new_segment(storage, 50)
    for i in range(8):
        add(segment, 3, 1_000 + i, interval=200)
    segment.seal()
    index_file = f"{DIRECTORY}/{segment_name(50)}.index"
    before = storage.files[index_file]
    loaded = Segment(storage, DIRECTORY, 50, 2_000)
    loaded.load(200)
    assert storage.files[index_file] is before  # not rewritten
    assert loaded.next_offset == 50 + 24
    assert loaded.max_timestamp == 1_007
    assert list(loaded.offset_index.positions) == list(segment.offset_index.positions)
    assert loaded.read(60, 10**6, 10**6) == segment.read(60, 10**6, 10**6)


@pytest.mark.parametrize(
    ("suffix", "damage"),
    [
        (".index", b""),  # missing or empty
        (".index", b"\x00\x00\x00"),  # torn entry
        (".index", struct.pack(">ii", 0, 0) + struct.pack(">ii", 1, 10**6)),  # past the log
        (".index", struct.pack(">ii", 0, 0) + struct.pack(">ii", 0, 5)),  # not growing
        (".timeindex", b""),
        (".timeindex", b"\x00" * 13),
        (".timeindex", struct.pack(">qi", 5, 0) + struct.pack(">qi", 4, 1)),
        (".timeindex", struct.pack(">qi", 5, 0) + struct.pack(">qi", 9, 10**6)),  # past the end
    ],
)
def test_load_rebuilds_damaged_indexes(suffix: str, damage: bytes) -> None:
    storage = MemoryEngine()
    segment = new_segment(storage, 50)
    for i in range(8):
        add(segment, 3, 1_000 + (i * 7) % 5, interval=200)
    segment.seal()
    offsets = list(segment.offset_index.relative_offsets)
    times = list(segment.time_index.timestamps)
    storage.files[f"{DIRECTORY}/{segment_name(50)}{suffix}"][:] = damage
    loaded = Segment(storage, DIRECTORY, 50, 2_000)
    loaded.load(200)
    assert loaded.next_offset == 74
    assert loaded.max_timestamp == 1_004
    assert list(loaded.offset_index.relative_offsets) == offsets
    # Rebuilt entries are the running maxima at the same index points (no seal entry needed:
    # max_timestamp above comes from the scan).
    assert list(loaded.time_index.timestamps) == times[: len(loaded.time_index.timestamps)]
    assert loaded.read(50, 10**6, 10**6) == segment.read(50, 10**6, 10**6)
    # The rebuilt files are sound: a second load trusts them.
    again = Segment(storage, DIRECTORY, 50, 3_000)
    again.load(200)
    assert again.next_offset == 74
    assert list(again.offset_index.relative_offsets) == offsets


def test_load_of_an_empty_segment() -> None:
    storage = MemoryEngine()
    new_segment(storage, 9)
    loaded = Segment(storage, DIRECTORY, 9, 2_000)
    loaded.load(4096)
    assert loaded.is_empty and loaded.next_offset == 9 and loaded.max_timestamp == -1


def test_batches_are_read_whole_in_chunks_larger_ones_alone_and_a_cut_tail_ends_them() -> None:
    segment = new_segment()
    small = [add(segment, 3, 1_000) for _ in range(5)]
    large = build_batch(
        [(None, b"x" * (3 << 20))], base_offset=segment.next_offset, timestamp_ms=1_000
    )
    segment.append(large, parse_header(large), 4096)  # larger than a 1 MiB read
    last = add(segment, 2, 1_000)
    segment.log.append(last[: HEADER_SIZE + 5])  # a torn batch after it
    read = [data for _header, data in segment.batches()]
    assert read == [*small, large, last]
    assert [h.base_offset for h, _ in segment.batches()] == [0, 3, 6, 9, 12, 15, 16]
    # from a batch's position on (a coordinator's replay from where it stopped)
    third = len(small[0]) + len(small[1])
    assert [data for _header, data in segment.batches(third)] == [*small[2:], large, last]
    after_large = sum(map(len, small)) + len(large)
    assert [h.base_offset for h, _ in segment.batches(after_large)] == [16]
