"""Crash recovery on the disk engine: torn and corrupt tails, damaged index files of sealed
segments, damaged leader-epoch checkpoints. Each case restores the files of a partition that
"crashed" (was never closed), damages them, and loads a fresh Partition from them."""

from __future__ import annotations

import os
import shutil
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from lockgate.config.log import LogConfig
from lockgate.log.epochs import LeaderEpochCache
from lockgate.log.partition import Partition
from lockgate.log.segment import segment_name
from lockgate.protocol.records import (
    CRC_OFFSET,
    build_batch,
    parse_header,
    validate_produced_batch,
)
from lockgate.storage.disk import DiskEngine
from tests.support.batches import values

PID = 4242
DIRECTORY = "topic-0"
CONFIG = LogConfig(index_interval_bytes=100)
SMALL_SEGMENTS = LogConfig(segment_bytes=400, index_interval_bytes=100)


def open_partition(root: Path, now_ms: int = 5_000, config: LogConfig = CONFIG) -> Partition:
    partition = Partition(DiskEngine(str(root)), "topic", 0, uuid.UUID(int=1), lambda: config)
    partition.load(now_ms)
    return partition


def append(partition: Partition, batch: bytes, now_ms: int = 2_000) -> int:
    return partition.append(bytearray(batch), validate_produced_batch(batch), now_ms)[0]


def read_all(partition: Partition) -> bytes:
    """Every batch below the high watermark, segment by segment."""
    out = b""
    offset = partition.log_start_offset
    while offset < partition.high_watermark:
        data = partition.read(offset, 10**6, partition.high_watermark)
        assert data, f"no data at {offset}"
        out += data
        offset = last_offset(data) + 1
    return out


def last_offset(data: bytes) -> int:
    position = 0
    last = -1
    while position < len(data):
        header = parse_header(data, position)
        last = header.last_offset
        position += header.size
    return last


@dataclass
class Crashed:
    """A partition directory as a crash left it, with what a reader saw before."""

    root: Path
    tail_size: int  # bytes of the final batch
    tail_base: int  # its base offset
    before_tail: bytes  # every batch before the final one, as read back
    active_log: str  # path of the active segment's file, relative to root
    tail_batch: bytes  # the final batch as a client sent it (for retries)
    files: dict[str, bytes]  # every file of the crashed directory, by path relative to root


def crash(root: Path, batches_in_last_segment: int) -> Crashed:
    """A sealed segment of plain batches, then an idempotent producer's batches in the active
    segment; the process 'dies' without closing anything. (Few files: each case copies them.)"""
    partition = open_partition(root, now_ms=1_000)
    for i in range(9):
        append(partition, build_batch([(None, b"plain-%d" % i)] * 2, timestamp_ms=1_000 + i))
    partition.roll(2_000)
    sequence = 0
    batch = b""
    for i in range(batches_in_last_segment):
        batch = build_batch(
            [(b"key-%d" % i, b"value-%d-%d" % (i, n)) for n in range(3)],
            producer_id=PID,
            producer_epoch=0,
            base_sequence=sequence,
            timestamp_ms=3_000 + i,
        )
        append(partition, batch)
        sequence += 3
    partition.advance_high_watermark(partition.log_end_offset)
    everything = read_all(partition)
    tail_base = partition.log_end_offset - 3
    tail_size = parse_header(batch).size
    release(partition)
    return Crashed(
        root=root,
        tail_size=tail_size,
        tail_base=tail_base,
        before_tail=everything[:-tail_size],
        active_log=f"{DIRECTORY}/{segment_name(partition.active.base_offset)}.log",
        tail_batch=batch,
        files={
            str(path.relative_to(root)): path.read_bytes()
            for path in root.rglob("*")
            if path.is_file()
        },
    )


def release(partition: Partition) -> None:
    """Closes the partition's files without the clean-shutdown snapshot (a crash writes none)."""
    for segment in partition.segments:
        segment.close()


def restore(crashed: Crashed, root: Path, changed: dict[str, bytes] | None = None) -> Path:
    """Makes `root` hold exactly the crashed files, with `changed` ones replaced. Rewriting
    only what differs keeps the byte-by-byte loops fast."""
    files = {**crashed.files, **(changed or {})}
    (root / DIRECTORY).mkdir(parents=True, exist_ok=True)
    for path in root.rglob("*"):
        if path.is_file() and str(path.relative_to(root)) not in files:
            path.unlink()
    for name, data in files.items():
        path = root / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
    return root


def check_recovered_to_before_the_tail(crashed: Crashed, root: Path) -> Partition:
    partition = open_partition(root)
    assert partition.log_end_offset == crashed.tail_base
    assert partition.high_watermark == crashed.tail_base
    assert read_all(partition) == crashed.before_tail
    # The torn bytes are gone from the file itself.
    assert os.path.getsize(root / crashed.active_log) == partition.active.size
    # The leader epoch checkpoint agrees with the cut log.
    assert partition.epochs.start_offsets[-1] == crashed.tail_base
    return partition


@pytest.mark.parametrize("batches_in_last_segment", [1, 3])
def test_torn_tail_at_every_byte_of_the_last_batch(
    tmp_path: Path, batches_in_last_segment: int
) -> None:
    crashed = crash(tmp_path / "crashed", batches_in_last_segment)
    log = crashed.files[crashed.active_log]
    for kept in range(crashed.tail_size):
        cut = log[: len(log) - crashed.tail_size + kept]
        root = restore(crashed, tmp_path / "work", {crashed.active_log: cut})
        partition = check_recovered_to_before_the_tail(crashed, root)
        # The producer's torn batch never happened: its retry is appended, not a duplicate.
        assert append(partition, crashed.tail_batch) == crashed.tail_base, kept
        partition.advance_high_watermark(partition.log_end_offset)
        assert read_all(partition)[: len(crashed.before_tail)] == crashed.before_tail
        assert values(partition.read(crashed.tail_base, 10**6, 10**9)) == [
            (crashed.tail_base + n, b"value-%d-%d" % (batches_in_last_segment - 1, n))
            for n in range(3)
        ]
        release(partition)


def test_intact_tail_is_kept(tmp_path: Path) -> None:
    crashed = crash(tmp_path / "crashed", 3)
    partition = open_partition(restore(crashed, tmp_path / "intact"))
    assert partition.log_end_offset == crashed.tail_base + 3
    assert values(read_all(partition))[-1] == (crashed.tail_base + 2, b"value-2-2")
    # An exact retry of the last batch is recognised after the restart.
    assert append(partition, crashed.tail_batch) == crashed.tail_base


def test_corrupt_byte_in_the_last_batch_cuts_it(tmp_path: Path) -> None:
    crashed = crash(tmp_path / "crashed", 2)
    log = crashed.files[crashed.active_log]
    start = len(log) - crashed.tail_size
    # Everything from the batch length on is checked, except the partition leader epoch
    # (bytes 12-15), which the CRC leaves out so that the broker can rewrite it.
    positions = [p for p in range(8, crashed.tail_size) if not 12 <= p < 16]
    assert CRC_OFFSET in positions
    for position in positions:
        damaged = bytearray(log)
        damaged[start + position] ^= 0x5A
        root = restore(crashed, tmp_path / "work", {crashed.active_log: bytes(damaged)})
        release(check_recovered_to_before_the_tail(crashed, root))


def test_corrupt_batch_in_the_middle_cuts_everything_after_it(tmp_path: Path) -> None:
    crashed = crash(tmp_path / "crashed", 3)
    root = restore(crashed, tmp_path / "middle")
    with open(root / crashed.active_log, "r+b") as handle:
        handle.seek(crashed.tail_size + 30)  # inside the second of three equal-sized batches
        handle.write(b"\xff\xff")
    partition = open_partition(root)
    assert partition.log_end_offset == crashed.tail_base - 3
    assert os.path.getsize(root / crashed.active_log) == crashed.tail_size


# -- index files of sealed segments ------------------------------------------------------------


def sealed_segments(root: Path) -> tuple[Partition, list[int]]:
    partition = open_partition(root, now_ms=1_000, config=SMALL_SEGMENTS)
    for i in range(30):
        timestamp = 10_000 + (i * 37) % 23  # out of order, so the time index matters
        append(partition, build_batch([(None, b"r-%d" % i)], timestamp_ms=timestamp))
    partition.advance_high_watermark(partition.log_end_offset)
    bases = [s.base_offset for s in partition.segments]
    assert len(bases) >= 3
    return partition, bases


@pytest.mark.parametrize(
    "damage",
    ["missing", "empty", "torn", "garbage", "past-the-log", "decreasing"],
)
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_damaged_sealed_segment_indexes_are_rebuilt(
    tmp_path: Path, suffix: str, damage: str
) -> None:
    original, bases = sealed_segments(tmp_path / "crashed")
    expected_reads = {o: original.read(o, 300, 30) for o in range(30)}
    expected_times = {t: original.offset_for_timestamp(t) for t in range(9_999, 10_024)}
    original_index = tmp_path / "crashed" / DIRECTORY / f"{segment_name(bases[0])}.index"
    original_index_bytes = original_index.read_bytes()
    root = tmp_path / "damaged"
    shutil.copytree(tmp_path / "crashed", root)
    for base in bases[:-1]:  # every sealed segment
        path = root / DIRECTORY / f"{segment_name(base)}{suffix}"
        raw = path.read_bytes()
        assert raw, "sealed segments have index entries"
        if damage == "missing":
            path.unlink()
        elif damage == "empty":
            path.write_bytes(b"")
        elif damage == "torn":
            path.write_bytes(raw[:-1])
        elif damage == "garbage":
            path.write_bytes(b"\xff" * len(raw))
        elif damage == "past-the-log":  # a last entry beyond the segment's data
            if suffix == ".index":
                relative, _position = struct.unpack(">ii", raw[-8:])
                path.write_bytes(raw + struct.pack(">ii", relative + 1, 2**31 - 1))
            else:
                timestamp, _relative = struct.unpack(">qi", raw[-12:])
                path.write_bytes(raw + struct.pack(">qi", timestamp + 1, 2**31 - 1))
        else:
            path.write_bytes(raw[len(raw) // 2 :] + raw[: len(raw) // 2])
    partition = open_partition(root, config=SMALL_SEGMENTS)
    assert partition.log_end_offset == 30
    assert [s.base_offset for s in partition.segments] == bases
    assert {o: partition.read(o, 300, 30) for o in range(30)} == expected_reads
    assert {t: partition.offset_for_timestamp(t) for t in expected_times} == expected_times
    for segment, before in zip(partition.segments, original.segments, strict=True):
        assert segment.max_timestamp == before.max_timestamp
        assert segment.next_offset == before.next_offset
    # The rebuilt files are on disk again, and the offset index is exactly the original.
    assert (root / DIRECTORY / f"{segment_name(bases[0])}.index").read_bytes() == (
        original_index_bytes
    )
    for base in bases[:-1]:
        assert (root / DIRECTORY / f"{segment_name(base)}{suffix}").stat().st_size > 0


# -- leader epoch checkpoint -------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        None,  # missing
        b"",
        b"garbage",
        b"0\n2\n0 0\n",
        b"0\n1\n0\n",
        b"0\n1\n0 0 0\n",
        b"\x00\xff" * 100,
        b"0\n1\n7 999999\n",  # an epoch starting past the log end
    ],
)
def test_leader_epoch_checkpoint_garbage_does_not_stop_loading(
    tmp_path: Path, content: bytes | None
) -> None:
    crashed = crash(tmp_path / "crashed", 2)
    root = restore(crashed, tmp_path / "epochs")
    checkpoint = root / DIRECTORY / "leader-epoch-checkpoint"
    if content is None:
        checkpoint.unlink()
    else:
        checkpoint.write_bytes(content)
    partition = open_partition(root)
    end = crashed.tail_base + 3
    assert partition.log_end_offset == end
    assert partition.leader_epoch >= 0
    assert partition.epochs.latest_epoch == partition.leader_epoch
    assert partition.epochs.start_offsets[-1] == end
    assert values(read_all(partition))[-1] == (end - 1, b"value-1-2")
    # The checkpoint on disk is sound again (the new term's own epoch, deferred, is written
    # before its first append).
    reread = LeaderEpochCache(DiskEngine(str(root)), f"{DIRECTORY}/leader-epoch-checkpoint")
    kept = len(partition.epochs.epochs) - (1 if partition.epochs.unsaved else 0)
    assert reread.intact
    assert reread.epochs == partition.epochs.epochs[:kept]
    assert reread.start_offsets == partition.epochs.start_offsets[:kept]
