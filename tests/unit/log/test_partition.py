"""A partition's log: offsets, whole-batch reads under the high watermark, rolling, retention,
timestamp lookups and leader epochs. Runs on both storage engines."""

from __future__ import annotations

import struct
import uuid

import pytest

from lockgate.config.log import LogConfig
from lockgate.log.partition import Partition
from lockgate.log.segment import segment_name
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    CRC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    build_batch,
    compute_crc,
    encode_record,
    iter_records,
    parse_header,
    validate_produced_batch,
)
from lockgate.storage.engine import StorageEngine
from tests.support.batches import values

DAY = 24 * 3600 * 1000
LOAD_MS = 1_000_000


class Log:
    """A partition plus the config it reads, which a test may change between calls."""

    def __init__(self, storage: StorageEngine, config: LogConfig | None = None) -> None:
        self.storage = storage
        self.config = config or LogConfig()
        self.partition = self.reload(LOAD_MS)

    def reload(self, now_ms: int) -> Partition:
        self.partition = Partition(self.storage, "topic", 0, uuid.UUID(int=1), lambda: self.config)
        self.partition.load(now_ms)
        return self.partition


def batch_of(values: list[bytes], timestamp: int = 1_000) -> bytes:
    return build_batch([(None, value) for value in values], timestamp_ms=timestamp)


def timed_batch(timestamps: list[int]) -> bytes:
    """A batch whose records carry their own timestamps (deltas from the first)."""
    base = timestamps[0]
    body = b"".join(
        encode_record(i, ts - base, None, b"r%d" % i) for i, ts in enumerate(timestamps)
    )
    batch = bytearray(
        build_batch([], encoded=body, record_count=len(timestamps), timestamp_ms=base)
    )
    struct.pack_into(">q", batch, MAX_TIMESTAMP_OFFSET, max(timestamps))
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch))
    return bytes(batch)


def append(partition: Partition, batch: bytes, now_ms: int = LOAD_MS) -> int:
    base, _append_time = partition.append(bytearray(batch), validate_produced_batch(batch), now_ms)
    return base


def visible(partition: Partition) -> None:
    partition.advance_high_watermark(partition.log_end_offset)


def batch_offsets(data: bytes) -> list[int]:
    offsets = []
    position = 0
    while position < len(data):
        header = parse_header(data, position)
        offsets.append(header.base_offset)
        position += header.size
    return offsets


# -- appends and reads -------------------------------------------------------------------------


def test_new_partition_is_empty(storage: StorageEngine) -> None:
    partition = Log(storage).partition
    assert (partition.log_start_offset, partition.log_end_offset) == (0, 0)
    assert partition.high_watermark == 0
    assert partition.read(0, 10**6, 10**6) == b""
    assert partition.offset_for_timestamp(0) is None
    assert partition.max_timestamp_offset() is None
    assert storage.exists("topic-0")


def test_appends_assign_consecutive_offsets(storage: StorageEngine) -> None:
    partition = Log(storage).partition
    assert append(partition, batch_of([b"a", b"b", b"c"])) == 0
    assert append(partition, batch_of([b"d"])) == 3
    assert append(partition, batch_of([b"e", b"f"])) == 4
    assert partition.log_end_offset == 6
    visible(partition)
    data = partition.read(0, 10**6, partition.high_watermark)
    assert values(data) == list(enumerate([b"a", b"b", b"c", b"d", b"e", b"f"]))
    # Stored batches carry their offsets and the leader epoch, with a still-valid CRC.
    assert batch_offsets(data) == [0, 3, 4]
    header = parse_header(data)
    assert header.partition_leader_epoch == partition.leader_epoch == 0
    assert validate_produced_batch(data[: header.size]) is not None


def test_reads_never_pass_the_high_watermark(storage: StorageEngine) -> None:
    partition = Log(storage).partition
    for value in (b"a", b"b", b"c"):
        append(partition, batch_of([value, value]))
    assert partition.high_watermark == 0
    assert partition.read(0, 10**6, partition.high_watermark) == b""
    partition.advance_high_watermark(2)
    assert values(partition.read(0, 10**6, partition.high_watermark)) == [(0, b"a"), (1, b"a")]
    partition.advance_high_watermark(4)
    assert batch_offsets(partition.read(0, 10**6, partition.high_watermark)) == [0, 2]
    assert partition.read(4, 10**6, partition.high_watermark) == b""


def test_high_watermark_never_passes_the_log_end_nor_goes_back(storage: StorageEngine) -> None:
    partition = Log(storage).partition
    append(partition, batch_of([b"a", b"b"]))
    calls: list[int] = []
    partition.hw_listeners.add(lambda: calls.append(partition.high_watermark))
    partition.advance_high_watermark(100)
    assert partition.high_watermark == 2
    assert calls == [2]
    partition.advance_high_watermark(1)
    assert partition.high_watermark == 2
    partition.advance_high_watermark(3)
    assert calls == [2]  # listeners are one-shot


def test_read_returns_whole_batches_within_max_bytes(storage: StorageEngine) -> None:
    partition = Log(storage).partition
    batches = [batch_of([b"%d" % i] * 3) for i in range(4)]
    for batch in batches:
        append(partition, batch)
    visible(partition)
    size = len(batches[0])
    hw = partition.high_watermark
    assert batch_offsets(partition.read(0, 10**6, hw)) == [0, 3, 6, 9]
    assert batch_offsets(partition.read(0, 2 * size, hw)) == [0, 3]
    assert batch_offsets(partition.read(0, 2 * size + size - 1, hw)) == [0, 3]
    assert batch_offsets(partition.read(4, 2 * size, hw)) == [3, 6]  # from the batch holding 4
    assert partition.read(12, 10**6, hw) == b""
    # Fetch's form: the same batches, a view of the bytes read when the read was cut
    cut = partition.read_view(0, 2 * size + size - 1, hw)
    assert isinstance(cut, memoryview) and cut == partition.read(0, 2 * size + size - 1, hw)
    assert type(partition.read(0, 2 * size + size - 1, hw)) is bytes
    assert partition.read_view(0, 10**6, hw) == partition.read(0, 10**6, hw)


@pytest.mark.parametrize("max_bytes", [0, 1, 20, 100])
def test_first_batch_is_whole_even_above_max_bytes(storage: StorageEngine, max_bytes: int) -> None:
    partition = Log(storage).partition
    append(partition, batch_of([b"x" * 500]))
    append(partition, batch_of([b"y"]))
    visible(partition)
    data = partition.read(0, max_bytes, partition.high_watermark)
    assert batch_offsets(data) == [0]
    assert values(data) == [(0, b"x" * 500)]


def test_read_at_or_past_the_upper_offset_is_empty(storage: StorageEngine) -> None:
    partition = Log(storage).partition
    append(partition, batch_of([b"a"]))
    visible(partition)
    assert partition.read(1, 10**6, 1) == b""
    assert partition.read(5, 10**6, 1) == b""
    assert partition.read(0, 10**6, 0) == b""


# -- rolling -----------------------------------------------------------------------------------


def test_roll_by_segment_bytes(storage: StorageEngine) -> None:
    size = len(batch_of([b"v" * 10]))
    log = Log(storage, LogConfig(segment_bytes=3 * size))
    partition = log.partition
    for i in range(7):
        append(partition, batch_of([b"v" * 10]), LOAD_MS + i)
    assert [s.base_offset for s in partition.segments] == [0, 3, 6]
    assert all(segment.size <= 3 * size for segment in partition.segments)
    # A batch larger than segment.bytes still goes in, alone in a fresh segment.
    append(partition, batch_of([b"w" * (4 * size)]))
    assert [s.base_offset for s in partition.segments] == [0, 3, 6, 7]
    visible(partition)
    assert [o for o, _ in values(partition.read(3, 10**6, 8))] == [3, 4, 5]
    assert values(partition.read(7, 10**6, 8)) == [(7, b"w" * (4 * size))]
    files = storage.list_dir("topic-0")
    for base in (0, 3, 6, 7):
        assert f"{segment_name(base)}.log" in files
    # A producer-state snapshot is written at each roll (the latest ones are kept).
    assert f"{segment_name(7)}.snapshot" in files


def test_segment_for_finds_the_segment_holding_each_offset(storage: StorageEngine) -> None:
    size = len(batch_of([b"v" * 10]))
    partition = Log(storage, LogConfig(segment_bytes=3 * size)).partition
    for i in range(10):
        append(partition, batch_of([b"v" * 10]), LOAD_MS + i)
    bases = [s.base_offset for s in partition.segments]
    assert bases == [0, 3, 6, 9]
    for offset in range(-1, 12):
        holding = max([i for i, base in enumerate(bases) if base <= offset], default=0)
        assert partition.segment_for(offset) == holding


def test_roll_by_segment_ms(storage: StorageEngine) -> None:
    partition = Log(storage, LogConfig(segment_ms=60_000)).partition
    append(partition, batch_of([b"a"]), LOAD_MS)
    append(partition, batch_of([b"b"]), LOAD_MS + 59_999)
    assert len(partition.segments) == 1
    append(partition, batch_of([b"c"]), LOAD_MS + 60_001)
    assert [s.base_offset for s in partition.segments] == [0, 2]
    append(partition, batch_of([b"d"]), LOAD_MS + 60_002)
    assert [s.base_offset for s in partition.segments] == [0, 2]  # the new segment is young


def test_an_empty_segment_never_rolls(storage: StorageEngine) -> None:
    partition = Log(storage, LogConfig(segment_ms=1, segment_bytes=14)).partition
    append(partition, batch_of([b"a" * 100]), LOAD_MS + DAY)
    assert len(partition.segments) == 1


def test_rolled_segments_survive_a_reload(storage: StorageEngine) -> None:
    log = Log(storage, LogConfig(segment_bytes=200, index_interval_bytes=1))
    for i in range(10):
        append(log.partition, batch_of([b"value-%d" % i]), LOAD_MS)
    bases = [s.base_offset for s in log.partition.segments]
    assert len(bases) > 2
    visible(log.partition)
    before = [log.partition.read(offset, 10**6, 10) for offset in range(10)]
    partition = log.reload(LOAD_MS + 1)
    assert [s.base_offset for s in partition.segments] == bases
    assert partition.log_end_offset == 10
    assert partition.high_watermark == 10
    assert [partition.read(offset, 10**6, 10) for offset in range(10)] == before
    assert append(partition, batch_of([b"after"])) == 10


# -- retention ---------------------------------------------------------------------------------


def segmented_log(storage: StorageEngine, config: LogConfig) -> Log:
    """Six one-batch segments with timestamps 1000, 2000, ... 6000."""
    log = Log(storage, config)
    for i in range(6):
        if i:
            log.partition.roll(LOAD_MS)
        append(log.partition, batch_of([b"%d" % i] * 2, timestamp=(i + 1) * 1_000))
    return log


def test_retention_by_time(storage: StorageEngine) -> None:
    log = segmented_log(storage, LogConfig(retention_ms=10_000))
    partition = log.partition
    visible(partition)
    assert partition.apply_retention(13_000) == 2  # max timestamps 1000, 2000 are > 10 s old
    assert partition.log_start_offset == 4
    assert [s.base_offset for s in partition.segments] == [4, 6, 8, 10]
    files = storage.list_dir("topic-0")
    assert f"{segment_name(0)}.log" not in files
    assert f"{segment_name(2)}.index" not in files
    assert f"{segment_name(2)}.timeindex" not in files
    assert f"{segment_name(4)}.log" in files
    assert partition.apply_retention(13_000) == 0
    assert values(partition.read(4, 10**6, partition.high_watermark))[0] == (4, b"2")


def test_retention_by_time_keeps_data_exactly_at_the_limit(storage: StorageEngine) -> None:
    log = segmented_log(storage, LogConfig(retention_ms=10_000))
    visible(log.partition)
    assert log.partition.apply_retention(11_000) == 0


def test_retention_by_time_can_empty_the_log(storage: StorageEngine) -> None:
    log = segmented_log(storage, LogConfig(retention_ms=1_000))
    partition = log.partition
    visible(partition)
    assert partition.apply_retention(100_000) == 6
    assert partition.log_start_offset == partition.log_end_offset == 12
    assert len(partition.segments) == 1 and partition.active.is_empty
    assert append(partition, batch_of([b"next"])) == 12  # offsets continue


@pytest.mark.parametrize(("extra", "deleted"), [(0, 3), (1, 2), (-1, 3)])
def test_retention_by_size(storage: StorageEngine, extra: int, deleted: int) -> None:
    """Like Kafka: whole segments go while the rest still holds at least retention.bytes."""
    size = len(batch_of([b"0"] * 2))
    log = segmented_log(storage, LogConfig(retention_bytes=3 * size + extra))
    partition = log.partition
    visible(partition)
    assert partition.apply_retention(LOAD_MS) == deleted
    assert [s.base_offset for s in partition.segments] == [2 * i for i in range(deleted, 6)]
    assert partition.size_bytes == (6 - deleted) * size
    assert partition.log_start_offset == 2 * deleted


def test_retention_disabled_keeps_everything(storage: StorageEngine) -> None:
    log = segmented_log(storage, LogConfig(retention_ms=-1, retention_bytes=-1))
    visible(log.partition)
    assert log.partition.apply_retention(10**15) == 0
    assert len(log.partition.segments) == 6


def test_a_log_without_the_delete_policy_is_never_trimmed(storage: StorageEngine) -> None:
    """Internal topics: their records are coordinator state, however old."""
    config = LogConfig(retention_ms=1_000, retention_bytes=1, delete_policy=False)
    log = segmented_log(storage, config)
    visible(log.partition)
    assert log.partition.apply_retention(10**15) == 0
    assert log.partition.log_start_offset == 0 and len(log.partition.segments) == 6


def test_retention_of_the_only_segment_waits_for_the_high_watermark(
    storage: StorageEngine,
) -> None:
    log = Log(storage, LogConfig(retention_ms=1_000))
    partition = log.partition
    append(partition, batch_of([b"a", b"b"], timestamp=1_000))
    partition.advance_high_watermark(1)
    assert partition.apply_retention(100_000) == 0
    assert partition.log_start_offset == 0
    visible(partition)
    assert partition.apply_retention(100_000) == 1
    assert partition.log_start_offset == 2


@pytest.mark.parametrize("by", ["time", "size"])
def test_retention_never_deletes_beyond_the_high_watermark(storage: StorageEngine, by: str) -> None:
    config = LogConfig(retention_ms=1_000) if by == "time" else LogConfig(retention_bytes=0)
    log = segmented_log(storage, config)
    partition = log.partition
    partition.advance_high_watermark(3)  # inside the second segment (offsets 2-3)
    partition.apply_retention(100_000)
    assert partition.log_start_offset <= partition.high_watermark
    assert partition.log_start_offset == 2  # only the first segment is wholly below the HW


# -- timestamps --------------------------------------------------------------------------------


def test_offset_for_timestamp(storage: StorageEngine) -> None:
    log = segmented_log(storage, LogConfig())
    partition = log.partition
    visible(partition)
    assert partition.offset_for_timestamp(0) == (0, 1_000)
    assert partition.offset_for_timestamp(1_000) == (0, 1_000)
    assert partition.offset_for_timestamp(1_001) == (2, 2_000)
    assert partition.offset_for_timestamp(5_500) == (10, 6_000)
    assert partition.offset_for_timestamp(6_001) is None


def test_offset_for_timestamp_with_out_of_order_timestamps(storage: StorageEngine) -> None:
    log = Log(storage, LogConfig(index_interval_bytes=1))
    partition = log.partition
    append(partition, timed_batch([100, 900, 300]))  # offsets 0-2
    append(partition, timed_batch([400, 200]))  # 3-4
    append(partition, timed_batch([950, 100]))  # 5-6
    visible(partition)
    assert partition.offset_for_timestamp(50) == (0, 100)
    assert partition.offset_for_timestamp(250) == (1, 900)  # the first record at or after
    assert partition.offset_for_timestamp(901) == (5, 950)
    assert partition.offset_for_timestamp(951) is None


def test_offset_for_timestamp_sees_unindexed_batches(storage: StorageEngine) -> None:
    size = len(batch_of([b"v"]))
    log = Log(storage, LogConfig(index_interval_bytes=size + 1))
    partition = log.partition
    for timestamp in (100, 500, 200, 150):  # only the 1st and 3rd batches are indexed
        append(partition, batch_of([b"v"], timestamp=timestamp))
    visible(partition)
    assert partition.offset_for_timestamp(300) == (1, 500)
    partition.roll(LOAD_MS)
    partition = log.reload(LOAD_MS + 1)  # the sealed segment is loaded from its index files
    assert partition.offset_for_timestamp(300) == (1, 500)


def test_offset_for_timestamp_stops_at_the_high_watermark(storage: StorageEngine) -> None:
    partition = Log(storage).partition
    append(partition, batch_of([b"a"], timestamp=100))
    append(partition, batch_of([b"b"], timestamp=200))
    partition.advance_high_watermark(1)
    assert partition.offset_for_timestamp(150) is None
    visible(partition)
    assert partition.offset_for_timestamp(150) == (1, 200)


def test_offset_for_timestamp_after_a_reload(storage: StorageEngine) -> None:
    log = segmented_log(storage, LogConfig(index_interval_bytes=1))
    partition = log.reload(LOAD_MS + 5)
    assert partition.offset_for_timestamp(3_500) == (6, 4_000)
    assert partition.offset_for_timestamp(1) == (0, 1_000)


def test_log_append_time(storage: StorageEngine) -> None:
    partition = Log(storage, LogConfig(log_append_time=True)).partition
    batch = timed_batch([100, 200])
    base, append_time = partition.append(bytearray(batch), validate_produced_batch(batch), 777_000)
    assert (base, append_time) == (0, 777_000)
    visible(partition)
    data = partition.read(0, 10**6, 2)
    header = validate_produced_batch(data)  # re-signed: still a sound batch
    assert header.log_append_time and header.max_timestamp == 777_000
    assert [t for _o, t, _k, _v in iter_records(data)] == [777_000, 777_000]
    assert partition.offset_for_timestamp(500) == (0, 777_000)


def test_max_timestamp_offset(storage: StorageEngine) -> None:
    log = Log(storage, LogConfig(segment_bytes=200))
    partition = log.partition
    append(partition, timed_batch([100, 900, 300]))
    append(partition, timed_batch([900, 50]))  # a tie: the first record with the max wins
    append(partition, timed_batch([400]))
    append(partition, timed_batch([5_000]))
    assert len(partition.segments) > 1
    partition.advance_high_watermark(6)
    assert partition.max_timestamp_offset() == (1, 900)
    visible(partition)
    assert partition.max_timestamp_offset() == (6, 5_000)


# -- leader epochs -----------------------------------------------------------------------------


def test_a_new_partition_writes_its_epoch_with_its_first_record(storage: StorageEngine) -> None:
    """Creating many partitions writes (and fsyncs) no epoch file each: an empty log has no
    record an epoch could mark. Nor does a clean stop snapshot its empty producer state."""
    log = Log(storage)
    checkpoint = f"{log.partition.directory}/leader-epoch-checkpoint"
    assert storage.read_all(checkpoint) is None and log.partition.epochs.unsaved
    log.partition.close()
    assert not any(n.endswith(".snapshot") for n in storage.list_dir(log.partition.directory))
    partition = log.reload(LOAD_MS + 1)
    assert partition.leader_epoch == 0  # nothing was written in the first term
    append(partition, batch_of([b"a"]))
    assert storage.read_all(checkpoint) == b"0\n1\n0 0\n"
    partition.close()
    assert partition.log_end_offset == 1 and storage.read_all(
        f"{partition.directory}/00000000000000000001.snapshot"
    )


def test_every_load_starts_a_new_leader_epoch(storage: StorageEngine) -> None:
    log = Log(storage)
    assert log.partition.leader_epoch == 0
    append(log.partition, batch_of([b"a", b"b"]))
    partition = log.reload(LOAD_MS + 1)
    assert partition.leader_epoch == 1
    append(partition, batch_of([b"c"]))
    partition = log.reload(LOAD_MS + 2)
    assert partition.leader_epoch == 2
    # nothing was written in epoch 2: it was never persisted (a start with many partitions
    # writes no file per partition), and the next term may take its number again
    partition = log.reload(LOAD_MS + 3)
    assert partition.leader_epoch == 2
    assert partition.epochs.epochs == [0, 1, 2]
    assert partition.epochs.start_offsets == [0, 2, 3]
    append(partition, batch_of([b"d"]))  # persists epoch 2 first
    visible(partition)
    epochs = [parse_header(partition.read(o, 10**6, 4)).partition_leader_epoch for o in range(4)]
    assert epochs == [0, 0, 1, 2]
    assert [partition.epoch_of(o) for o in range(4)] == [0, 0, 1, 2]
    assert partition.epochs.end_offset_for(0, partition.log_end_offset) == (0, 2)
    assert partition.epochs.end_offset_for(1, partition.log_end_offset) == (1, 3)
    assert partition.epochs.end_offset_for(2, partition.log_end_offset) == (2, 4)
    partition = log.reload(LOAD_MS + 4)
    assert partition.leader_epoch == 3
    assert partition.epochs.epochs == [0, 1, 2, 3]


# -- DeleteRecords -----------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_and_drops_whole_segments(
    storage: StorageEngine,
) -> None:
    log = segmented_log(storage, LogConfig(retention_ms=-1))  # offsets 0-11, two per segment
    partition = log.partition
    visible(partition)
    assert partition.delete_records(5, LOAD_MS) == 5
    assert partition.log_start_offset == 5
    assert [s.base_offset for s in partition.segments] == [4, 6, 8, 10]  # 4-5 holds offset 5
    assert partition.delete_records(3, LOAD_MS) == 5  # never back
    reloaded = log.reload(LOAD_MS + 1)
    assert reloaded.log_start_offset == 5  # persisted, not the segment's base offset
    assert reloaded.delete_records(-1, LOAD_MS) == 12  # -1: the high watermark
    assert len(reloaded.segments) == 1 and reloaded.active.is_empty
    assert append(reloaded, batch_of([b"next"])) == 12


def test_delete_records_beyond_the_high_watermark_is_out_of_range(storage: StorageEngine) -> None:
    log = segmented_log(storage, LogConfig(retention_ms=-1))
    log.partition.advance_high_watermark(6)
    for offset in (7, -2):
        with pytest.raises(KafkaProtocolError) as raised:
            log.partition.delete_records(offset, LOAD_MS)
        assert raised.value.code == ErrorCode.offset_out_of_range
    assert log.partition.log_start_offset == 0
