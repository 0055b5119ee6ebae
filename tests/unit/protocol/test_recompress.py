"""Broker-side recompression (compression.type): the batch's records survive, its header fields
but the codec stay, its CRC is right; and the topic config that selects it."""

from __future__ import annotations

import pytest

from lockgate.config.properties import TOPIC_CONFIGS, BrokerConfig, ConfigError, check_value
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.recompress import recompress, target_codec
from lockgate.protocol.records import (
    TRANSACTIONAL_BIT,
    build_batch,
    compress,
    encode_record,
    iter_records,
    parse_header,
    validate_produced_batch,
)

RECORDS = [(b"k%d" % i, b"value-%d" % i * 20) for i in range(5)]


def gzip_batch(offset_deltas: list[int] | None = None) -> bytes:
    deltas = offset_deltas or list(range(len(RECORDS)))
    pairs = zip(deltas, RECORDS, strict=True)
    body = b"".join(encode_record(delta, 0, key, value) for delta, (key, value) in pairs)
    return build_batch(
        [],
        encoded=compress(1, body),
        record_count=len(RECORDS),
        timestamp_ms=1_700_000_000_000,
        attributes=1 | TRANSACTIONAL_BIT,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
    )


@pytest.mark.parametrize("codec", [0, 2, 3, 4])
def test_recompressed_batch_keeps_records_and_producer_fields(codec: int) -> None:
    original = gzip_batch()
    rebuilt, header = recompress(original, codec)
    assert validate_produced_batch(rebuilt) == header  # sound CRC, counts and layout
    before = parse_header(original)
    assert header.compression == codec
    assert header.is_transactional
    for name in (
        "base_offset",
        "partition_leader_epoch",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "record_count",
    ):
        assert getattr(header, name) == getattr(before, name), name
    assert iter_records(rebuilt) == iter_records(original)


def test_inner_offsets_must_be_consecutive() -> None:
    with pytest.raises(KafkaProtocolError) as raised:
        recompress(gzip_batch([0, 1, 2, 4, 5]), 4)
    assert raised.value.code == ErrorCode.invalid_record


def test_undecodable_records_are_corrupt() -> None:
    broken = build_batch([], encoded=b"not gzip at all", record_count=1, attributes=1)
    with pytest.raises(KafkaProtocolError) as raised:
        recompress(broken, 4)
    assert raised.value.code == ErrorCode.corrupt_message


def test_compression_type_config_values() -> None:
    spec = TOPIC_CONFIGS["compression.type"]
    for value in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"):
        assert check_value(spec, value) == value
    with pytest.raises(ConfigError):
        check_value(spec, "brotli")
    assert target_codec("producer") is None and target_codec("zstd") == 4
    broker = BrokerConfig({"compression.type": "lz4"})
    assert broker.log_config({}).compression_codec == 3  # the broker default
    assert broker.log_config({"compression.type": "producer"}).compression_codec is None
    assert BrokerConfig().log_config({}).compression_codec is None
