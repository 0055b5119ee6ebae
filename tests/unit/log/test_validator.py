"""What a produced batch must pass before the log takes it (log/validator.py), as Kafka's
LogValidator: records present, max.message.bytes, one sound v2 batch, a key on every record of
a compacted topic, the per-record limits (log/record_limits.py has their details), and the
topic's codec; each with its error code and message, in that order."""

from __future__ import annotations

import pytest

from lockgate.config.log import LogConfig
from lockgate.log.validator import validate
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    CRC_OFFSET,
    build_batch,
    compress,
    encode_record,
    iter_records,
    parse_header,
)

NOW = 1_700_000_000_000
HOUR = 3600 * 1000
GZIP, ZSTD = 1, 4


def batch(*keys: bytes | None, timestamp_ms: int = NOW, value: bytes = b"v") -> bytes:
    return build_batch([(key, value) for key in keys], timestamp_ms=timestamp_ms)


def gzip_batch(*keys: bytes | None, value: bytes = b"v") -> bytes:
    body = b"".join(encode_record(i, 0, key, value) for i, key in enumerate(keys))
    return build_batch(
        [], encoded=compress(GZIP, body), record_count=len(keys), attributes=GZIP,
        timestamp_ms=NOW,
    )  # fmt: skip


def corrupted(data: bytes) -> bytes:
    damaged = bytearray(data)
    damaged[CRC_OFFSET] ^= 0xFF
    return bytes(damaged)


def refused(records: bytes | None, config: LogConfig) -> KafkaProtocolError:
    with pytest.raises(KafkaProtocolError) as raised:
        validate(records, config, NOW)
    return raised.value


def test_a_sound_batch_is_appended_as_sent() -> None:
    data = batch(b"k", None)
    records, header = validate(data, LogConfig(), NOW)
    assert records is data
    assert header == parse_header(data)


def test_null_records_are_an_invalid_record() -> None:
    error = refused(None, LogConfig())
    assert (error.code, error.message) == (ErrorCode.invalid_record, "null records")


def test_a_batch_over_max_message_bytes_is_too_large_before_anything_else_is_read() -> None:
    data = corrupted(batch(b"k", value=b"x" * 200))
    config = LogConfig(max_message_bytes=len(data) - 1)
    error = refused(data, config)
    assert error.code == ErrorCode.message_too_large
    assert error.message == f"batch of {len(data)} bytes exceeds max.message.bytes"
    validate(batch(b"k", value=b"x" * 200), LogConfig(max_message_bytes=len(data)), NOW)


def test_a_crc_mismatch_is_a_corrupt_message() -> None:
    error = refused(corrupted(batch(b"k")), LogConfig())
    assert (error.code, error.message) == (ErrorCode.corrupt_message, "CRC-32C mismatch")


def test_a_compacted_topic_refuses_a_record_without_a_key() -> None:
    compacted = LogConfig(compact=True)
    error = refused(batch(b"a", b"b", None, None), compacted)
    assert error.code == ErrorCode.invalid_record
    assert error.message == (
        "compacted topic cannot accept a record without a key (offset delta 2)"
    )
    validate(batch(b"a", b"b"), compacted, NOW)
    validate(batch(b"a", None), LogConfig(), NOW)  # only compaction needs keys


def test_the_key_rule_reads_compressed_records() -> None:
    error = refused(gzip_batch(b"a", None), LogConfig(compact=True))
    assert error.code == ErrorCode.invalid_record
    assert error.message.endswith("(offset delta 1)")


def test_records_that_do_not_decompress_on_a_compacted_topic_are_corrupt() -> None:
    broken = build_batch([], encoded=b"not gzip at all", record_count=1, attributes=GZIP)
    assert refused(broken, LogConfig(compact=True)).code == ErrorCode.corrupt_message


def test_the_key_rule_comes_before_the_timestamp_bounds() -> None:
    late = batch(None, timestamp_ms=NOW + 2 * HOUR)
    assert refused(late, LogConfig(compact=True)).code == ErrorCode.invalid_record
    assert refused(late, LogConfig()).code == ErrorCode.invalid_timestamp


def test_the_timestamp_bounds_come_before_the_topic_codec() -> None:
    error = refused(batch(b"k", timestamp_ms=NOW + 2 * HOUR), LogConfig(compression_codec=ZSTD))
    assert error.code == ErrorCode.invalid_timestamp
    assert error.message.startswith(f"Timestamp {NOW + 2 * HOUR} of message with offset 0 ")


def test_the_topic_codec_re_encodes_a_batch_of_another_one() -> None:
    data = gzip_batch(b"a", b"b", value=b"value" * 10)
    records, header = validate(data, LogConfig(compression_codec=ZSTD), NOW)
    assert header.compression == ZSTD and header == parse_header(records)
    assert iter_records(records) == iter_records(data)
    same, same_header = validate(data, LogConfig(compression_codec=GZIP), NOW)
    assert same is data and same_header.compression == GZIP
    kept, _ = validate(data, LogConfig(compression_codec=None), NOW)  # "producer"
    assert kept is data


def test_a_batch_too_large_once_re_encoded_is_too_large() -> None:
    data = gzip_batch(*(b"k%d" % i for i in range(50)), value=b"x" * 100)  # compresses well
    uncompressed = LogConfig(compression_codec=0, max_message_bytes=len(data))
    error = refused(data, uncompressed)
    assert error.code == ErrorCode.message_too_large
    assert error.message.endswith(" bytes once recompressed exceeds max.message.bytes")
    assert int(error.message.split()[2]) > len(data)
