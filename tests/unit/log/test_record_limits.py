"""The per-record limits of a produced batch (log/record_limits.py): the CreateTime timestamp
bounds (message.timestamp.before/after.max.ms, Kafka 4.4's one hour ahead by default) and
max.decompressed.message.bytes on compressed batches, with Kafka's messages; and the rolls of
segment.index.bytes and segment.jitter.ms (log/partition.py)."""

from __future__ import annotations

import uuid

import pytest

from lockgate.config.log import LogConfig
from lockgate.log.partition import Partition
from lockgate.log.record_limits import check_records
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    build_batch,
    compress,
    encode_record,
    parse_header,
    validate_produced_batch,
)
from lockgate.storage.memory import MemoryEngine

NOW = 1_700_000_000_000
HOUR = 3600 * 1000


def batch(*deltas: int, base: int = NOW, codec: int = 0, value: bytes = b"v") -> bytes:
    encoded = b"".join(encode_record(i, d, b"k", value) for i, d in enumerate(deltas))
    return build_batch(
        [],
        encoded=compress(codec, encoded),
        record_count=len(deltas),
        attributes=codec,
        timestamp_ms=base,
        max_timestamp_ms=base + max(deltas),
    )


def check(data: bytes, config: LogConfig, now: int = NOW) -> None:
    check_records(data, parse_header(data), config, now)


def refused(data: bytes, config: LogConfig) -> KafkaProtocolError:
    with pytest.raises(KafkaProtocolError) as raised:
        check(data, config)
    return raised.value


def test_records_up_to_an_hour_ahead_pass_by_default() -> None:
    check(batch(0, HOUR), LogConfig())
    check(batch(0, base=1), LogConfig())  # however old: no lower bound by default
    error = refused(batch(0, 5, HOUR + 1), LogConfig())
    assert error.code == ErrorCode.invalid_timestamp
    assert error.message.startswith(f"Timestamp {NOW + HOUR + 1} of message with offset 2 ")


def test_the_bounds_show_as_kafka_computes_them_in_java_longs() -> None:
    error = refused(batch(0, HOUR + 1), LogConfig())
    assert error.message == (
        f"Timestamp {NOW + HOUR + 1} of message with offset 1 is out of range. The timestamp "
        f"should be within [{NOW - (2**63 - 1)}, {NOW + HOUR}]"
    )
    unbounded_ahead = LogConfig(timestamp_before_max_ms=10, timestamp_after_max_ms=2**63 - 1)
    error = refused(batch(0, base=NOW - 11), unbounded_ahead)
    wrapped = NOW + 2**63 - 1 - 2**64  # now + Long.MAX_VALUE overflows in Java
    assert error.message.endswith(f"should be within [{NOW - 10}, {wrapped}]")


def test_a_set_lower_bound_reads_every_record() -> None:
    config = LogConfig(timestamp_before_max_ms=1000)
    check(batch(0, 1000, base=NOW - 1000), config)
    error = refused(batch(1000, 0, base=NOW - 1001), config)  # the second record is too old
    assert error.code == ErrorCode.invalid_timestamp
    assert f"Timestamp {NOW - 1001} of message with offset 1" in error.message
    assert f"should be within [{NOW - 1000}, {NOW + HOUR}]" in error.message


def test_log_append_time_topics_take_any_timestamp() -> None:
    config = LogConfig(log_append_time=True, timestamp_before_max_ms=0, timestamp_after_max_ms=0)
    check(batch(0, base=1), config)
    check(batch(0, base=NOW + 10 * HOUR), config)


def test_records_without_a_timestamp_pass() -> None:
    check(batch(0, base=-1), LogConfig(timestamp_before_max_ms=0, timestamp_after_max_ms=0))


def test_decompressed_record_size_on_compressed_batches_only() -> None:
    config = LogConfig(max_decompressed_message_bytes=100)
    check(batch(0, value=b"x" * 80, codec=1), config)
    error = refused(batch(0, 0, value=b"x" * 200, codec=1), config)
    assert error.code == ErrorCode.invalid_record
    assert error.message.startswith("Invalid record size: ")
    assert error.message.endswith(" exceeds the configured maximum record size of 100.")
    size = int(error.message.split()[3])
    assert 200 < size < 220  # the record's body: attributes, deltas, key, value, headers
    check(batch(0, value=b"x" * 200), config)  # uncompressed: max.message.bytes alone bounds it


def partition(config: LogConfig) -> Partition:
    log = Partition(MemoryEngine(), "t", 0, uuid.UUID(int=1), lambda: config)
    log.load(NOW)
    return log


def append(log: Partition, now: int) -> None:
    data = build_batch([(b"k", b"v")], timestamp_ms=now)
    log.append(bytearray(data), validate_produced_batch(data), now)


def test_a_full_offset_index_rolls_the_segment() -> None:
    # room for 3 offset index entries (8 bytes each) and 2 time index entries (12 bytes; one
    # used: every batch has the same timestamp); an offset entry per batch (interval 1)
    log = partition(LogConfig(segment_index_bytes=24, index_interval_bytes=1))
    for _ in range(7):
        append(log, NOW)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    roomy = partition(LogConfig(index_interval_bytes=1))
    for _ in range(5):
        append(roomy, NOW)
    assert len(roomy.segments) == 1


def test_segment_jitter_rolls_a_segment_earlier() -> None:
    config = LogConfig(segment_ms=1000, segment_jitter_ms=1000)
    jitter = config.roll_jitter_ms(0)
    assert 0 < jitter < 1000
    log = partition(config)
    append(log, NOW)
    append(log, NOW + 1000 - jitter - 1)
    assert len(log.segments) == 1
    append(log, NOW + 1000 - jitter)
    assert len(log.segments) == 2
