# Producer batches: what build_producer_batch writes must be what Kafka readers expect — checked
# with lockgate's reader and with kafka-python's independent DefaultRecordBatch decoder, for
# every codec.
from __future__ import annotations

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockgate.client.batches import (
    OutgoingRecord,
    ProducerIdentity,
    build_producer_batch,
    encode_records,
    size_bound,
)
from lockgate.protocol.records import (
    COMPRESSION_CODECS,
    batch_is_intact,
    encode_record,
    iter_records,
    parse_header,
    read_records,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

RECORDS: list[OutgoingRecord] = [
    (b"key-1", b"value-1" * 50, (("trace", b"abc"), ("empty", None)), 1_700_000_000_500),
    (None, b"no key", (), 1_700_000_000_400),  # earlier than the first: delta < 0
    (b"k3", None, (("\u00e9t\u00e9", b"\x00\xff"),), 1_700_000_000_900),
    (b"", b"", (), 1_700_000_000_500),
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
    assert header.base_timestamp == RECORDS[0][3]
    assert header.max_timestamp == 1_700_000_000_900
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert not header.is_transactional

    decoded = read_records(batch)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(RECORDS)
    ]
    assert [(o, t, k, v) for o, t, k, v in iter_records(batch)] == [
        (i, ts, k, v) for i, (k, v, _h, ts) in enumerate(RECORDS)
    ]

    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert theirs.max_timestamp == 1_700_000_000_900
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
        (i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(RECORDS)
    ]


def test_compression_shrinks_repetitive_records() -> None:
    records: list[OutgoingRecord] = [(None, b"x" * 1000, (), 0) for _ in range(20)]
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
        assert len(alone) - 61 <= size_bound(record[0], record[1], record[2])


def test_an_empty_batch_is_refused() -> None:
    with pytest.raises(ValueError):
        build_producer_batch([])


_BYTES = st.none() | st.binary(max_size=20) | st.builds(lambda n: b"v" * n, st.integers(0, 9_000))
_RECORD = st.tuples(
    _BYTES,
    _BYTES,
    st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2).map(
        tuple
    ),
    st.integers(-(1 << 40), 1 << 40),
)


@given(st.lists(_RECORD, min_size=1, max_size=30), st.integers(0, 5_000))
def test_the_table_driven_encoder_writes_what_the_general_one_does(
    records: list[OutgoingRecord], padding: int
) -> None:
    # Padding pushes offset deltas past the varint table (batches of thousands of records).
    records = [(None, b"", (), records[0][3])] * padding + records
    base = records[0][3]
    expected = b"".join(
        encode_record(i, ts - base, k, v, h) for i, (k, v, h, ts) in enumerate(records)
    )
    assert encode_records(records, base) == expected
