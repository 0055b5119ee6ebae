# Producer batches: what build_producer_batch writes must be what Kafka readers expect — checked
# with lockgate's reader and with kafka-python's independent DefaultRecordBatch decoder, for
# every codec.
from __future__ import annotations

import warnings

import pytest

from lockgate.client.batches import OutgoingRecord, ProducerIdentity, build_producer_batch
from lockgate.protocol.records import (
    COMPRESSION_CODECS,
    batch_is_intact,
    iter_records,
    parse_header,
    read_records,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

RECORDS = [
    OutgoingRecord(
        b"key-1", b"value-1" * 50, (("trace", b"abc"), ("empty", None)), 1_700_000_000_500
    ),
    OutgoingRecord(None, b"no key", (), 1_700_000_000_400),  # earlier than the first: delta < 0
    OutgoingRecord(b"k3", None, (("\u00e9t\u00e9", b"\x00\xff"),), 1_700_000_000_900),
    OutgoingRecord(b"", b"", (), 1_700_000_000_500),
]


@pytest.mark.parametrize("codec_name", sorted(COMPRESSION_CODECS))
def test_batch_round_trips_through_lockgate_and_kafka_python(codec_name: str) -> None:
    codec = COMPRESSION_CODECS[codec_name]
    batch = build_producer_batch(RECORDS, codec=codec)

    header = batch_is_intact(batch, 0)
    assert header is not None, "CRC-32C must cover the batch as written"
    assert header.size == len(batch)
    assert header.compression == codec
    assert header.record_count == len(RECORDS)
    assert header.last_offset_delta == len(RECORDS) - 1
    assert header.base_timestamp == RECORDS[0].timestamp_ms
    assert header.max_timestamp == 1_700_000_000_900
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert not header.is_transactional

    decoded = read_records(batch)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (i, r.timestamp_ms, r.key, r.value, r.headers) for i, r in enumerate(RECORDS)
    ]
    assert [(o, t, k, v) for o, t, k, v in iter_records(batch)] == [
        (i, r.timestamp_ms, r.key, r.value) for i, r in enumerate(RECORDS)
    ]

    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert theirs.max_timestamp == 1_700_000_000_900
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
        (i, r.timestamp_ms, r.key, r.value, list(r.headers)) for i, r in enumerate(RECORDS)
    ]


def test_compression_shrinks_repetitive_records() -> None:
    records = [OutgoingRecord(None, b"x" * 1000, (), 0) for _ in range(20)]
    plain = build_producer_batch(records)
    for name, codec in COMPRESSION_CODECS.items():
        if codec:
            assert len(build_producer_batch(records, codec=codec)) < len(plain) / 5, name


def test_identity_is_written_into_the_header() -> None:
    batch = build_producer_batch(
        RECORDS[:2],
        identity=ProducerIdentity(producer_id=42, producer_epoch=3, transactional=True),
        base_sequence=7,
    )
    header = parse_header(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 7)
    assert header.is_transactional
    assert header.last_sequence == 8


def test_size_bound_is_an_upper_bound() -> None:
    for record in RECORDS:
        alone = build_producer_batch([record])
        assert len(alone) - 61 <= record.size_bound()


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        build_producer_batch([])
