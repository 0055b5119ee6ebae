"""Record batch v2: header parsing, Produce validation, offset assignment, LogAppendTime,
building and reading records (every compression codec), control batches."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam
import pytest
from kafka.record.default_records import DefaultRecordBatch

from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_ABORT,
    CONTROL_BIT,
    CONTROL_COMMIT,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    assign_offset,
    batch_is_intact,
    build_batch,
    build_control_batch,
    compute_crc,
    control_type,
    decompress,
    encode_record,
    iter_records,
    parse_header,
    peek_batch_size,
    set_log_append_time,
    validate_produced_batch,
)

RECORDS: list[tuple[bytes | None, bytes | None]] = [
    (b"key-0", b"value-0"),
    (None, b"no key"),
    (b"no value", None),
    (None, None),
    (b"", b""),
    (b"\x00\xff" * 40, bytes(range(256)) * 3),  # multi-byte length varints
]


def crc32c_reference(data: bytes) -> int:
    """Bitwise CRC-32C (Castagnoli, reflected 0x82F63B78): independent of the crc32c package."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def resign(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed after a test edited CRC-covered fields."""
    out = bytearray(batch)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c_reference(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


def with_field(batch: bytes, fmt: str, offset: int, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    return resign(out)


def error_of(records: bytes) -> ErrorCode:
    with pytest.raises(KafkaProtocolError) as raised:
        validate_produced_batch(records)
    return raised.value.code


# -- CRC and header ----------------------------------------------------------------------------


def test_crc_reference_matches_the_standard_check_value() -> None:
    # The published CRC-32C check value; guards the reference used below.
    assert crc32c_reference(b"123456789") == 0xE3069283


def test_built_batch_carries_a_crc32c_over_attributes_to_end() -> None:
    batch = build_batch(RECORDS, base_offset=7, timestamp_ms=1_700_000_000_000)
    header = parse_header(batch)
    covered = batch[ATTRIBUTES_OFFSET:]
    assert header.crc == crc32c_reference(covered)
    assert header.crc != zlib.crc32(covered)  # Castagnoli, not the zlib polynomial
    assert compute_crc(batch) == header.crc


def test_header_fields_round_trip() -> None:
    batch = build_batch(
        [(None, b"a"), (None, b"b"), (None, b"c")],
        base_offset=1 << 40,
        timestamp_ms=1_234_567,
        attributes=TRANSACTIONAL_BIT | 2,
        producer_id=1 << 50,
        producer_epoch=32766,
        base_sequence=2**31 - 2,
        partition_leader_epoch=9,
    )
    header = parse_header(batch)
    assert header.base_offset == 1 << 40
    assert header.batch_length == len(batch) - LOG_OVERHEAD
    assert header.size == len(batch)
    assert header.partition_leader_epoch == 9
    assert header.magic == 2
    assert header.last_offset_delta == 2
    assert header.last_offset == (1 << 40) + 2
    assert header.base_timestamp == header.max_timestamp == 1_234_567
    assert (header.producer_id, header.producer_epoch) == (1 << 50, 32766)
    assert header.record_count == 3
    assert header.compression == 2
    assert header.is_transactional and not header.is_control and not header.log_append_time
    # Sequences wrap at 2^31 - 1 (old clients).
    assert header.base_sequence == 2**31 - 2
    assert header.last_sequence == 0


def test_header_of_a_batch_inside_a_buffer() -> None:
    first = build_batch([(None, b"x")], base_offset=3)
    second = build_batch([(None, b"y"), (None, b"z")], base_offset=4)
    buffer = first + second
    assert parse_header(buffer, len(first)).base_offset == 4
    assert parse_header(bytearray(buffer)).base_offset == 3
    assert parse_header(memoryview(buffer), len(first)).record_count == 2


def test_header_properties_for_each_attribute_bit() -> None:
    assert parse_header(build_batch([(None, b"")], attributes=TIMESTAMP_TYPE_BIT)).log_append_time
    control = parse_header(build_batch([(None, b"")], attributes=CONTROL_BIT | TRANSACTIONAL_BIT))
    assert control.is_control and control.is_transactional
    for codec in range(5):
        assert parse_header(build_batch([(None, b"")], attributes=codec)).compression == codec
    plain = parse_header(build_batch([(None, b"")]))
    assert plain.last_sequence == -1  # no sequence: not idempotent


def test_peek_batch_size() -> None:
    batch = build_batch([(b"k", b"v")], base_offset=11)
    assert peek_batch_size(batch, 0) == (11, len(batch), 2)
    assert peek_batch_size(b"pad" + batch, 3) == (11, len(batch), 2)
    for cut in range(17):  # baseOffset + batchLength + partitionLeaderEpoch + magic
        assert peek_batch_size(batch[:cut], 0) is None


# -- validate_produced_batch -------------------------------------------------------------------


def test_valid_batch_returns_its_header() -> None:
    batch = build_batch(RECORDS, producer_id=5, producer_epoch=1, base_sequence=0)
    header = validate_produced_batch(batch)
    assert header == parse_header(batch)
    assert header.record_count == len(RECORDS)


def test_every_corrupted_crc_covered_byte_is_corrupt_message() -> None:
    batch = build_batch([(b"k", b"value"), (None, b"other")], timestamp_ms=99)
    for position in range(CRC_OFFSET, len(batch)):
        damaged = bytearray(batch)
        damaged[position] ^= 0x01
        assert error_of(bytes(damaged)) == ErrorCode.corrupt_message, position


def test_fields_outside_the_crc_can_change() -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">q", batch, 0, 123456)
    struct.pack_into(">i", batch, 12, 77)
    header = validate_produced_batch(bytes(batch))
    assert (header.base_offset, header.partition_leader_epoch) == (123456, 77)


def test_every_truncation_is_corrupt_message() -> None:
    batch = build_batch(RECORDS)
    for cut in range(len(batch)):
        assert error_of(batch[:cut]) == ErrorCode.corrupt_message, cut


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_magic_other_than_2_is_invalid_record(magic: int) -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">b", batch, MAGIC_OFFSET, magic)  # outside the CRC
    assert error_of(bytes(batch)) == ErrorCode.invalid_record
    # Also when the record set is shorter than a v2 header (a v0/v1 message set).
    assert error_of(bytes(batch[:40])) == ErrorCode.invalid_record


@pytest.mark.parametrize("batch_length", [-1, 0, 10, HEADER_SIZE - LOG_OVERHEAD - 1])
def test_batch_length_below_the_header_is_corrupt_message(batch_length: int) -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">i", batch, 8, batch_length)
    assert error_of(bytes(batch)) == ErrorCode.corrupt_message


def test_batch_length_past_the_data_is_corrupt_message() -> None:
    batch = bytearray(build_batch([(b"k", b"v")]))
    struct.pack_into(">i", batch, 8, len(batch))  # 12 bytes more than there are
    assert error_of(bytes(batch)) == ErrorCode.corrupt_message


def test_control_batch_from_a_client_is_invalid_record() -> None:
    marker = build_control_batch(5, 0, True, 3, 1000)
    assert batch_is_intact(marker, 0) is not None  # sound, but not the client's to write
    assert error_of(marker) == ErrorCode.invalid_record


def test_more_than_one_batch_is_invalid_record() -> None:
    batch = build_batch([(b"k", b"v")])
    assert error_of(batch + batch) == ErrorCode.invalid_record
    assert error_of(batch + b"\x00") == ErrorCode.invalid_record


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_compression_is_invalid_record(codec: int) -> None:
    assert error_of(build_batch([(b"k", b"v")], attributes=codec)) == ErrorCode.invalid_record


@pytest.mark.parametrize("last_offset_delta", [0, 2, 3, -1, 2**31 - 1])
def test_record_count_must_match_last_offset_delta(last_offset_delta: int) -> None:
    batch = build_batch([(b"a", b"1"), (b"b", b"2")])  # two records: delta 1
    changed = with_field(batch, ">i", ATTRIBUTES_OFFSET + 2, last_offset_delta)
    assert error_of(changed) == ErrorCode.invalid_record


@pytest.mark.parametrize("count", [0, -1, -1000])
def test_non_positive_record_count_is_invalid_record(count: int) -> None:
    batch = build_batch([(b"a", b"1")])
    changed = with_field(batch, ">i", HEADER_SIZE - 4, count)
    changed = with_field(changed, ">i", ATTRIBUTES_OFFSET + 2, count - 1)
    assert error_of(changed) == ErrorCode.invalid_record


@pytest.mark.parametrize("count", [3, 100, 2**31 - 1])
def test_record_count_that_cannot_fit_is_invalid_record(count: int) -> None:
    body = encode_record(0, 0, None, None) + encode_record(1, 0, None, None)
    batch = build_batch([], encoded=body, record_count=count)  # lastOffsetDelta agrees
    assert parse_header(batch).last_offset_delta == count - 1
    assert error_of(batch) == ErrorCode.invalid_record


def test_smallest_possible_records_fit() -> None:
    count = 5
    body = b"".join(encode_record(i, 0, None, None) for i in range(count))
    assert len(body) == 7 * count  # the minimum record size the check relies on
    assert validate_produced_batch(build_batch([], encoded=body, record_count=count))


# -- rewriting ---------------------------------------------------------------------------------


def test_assign_offset_leaves_the_crc_covered_bytes_alone() -> None:
    original = build_batch(RECORDS, base_offset=0, partition_leader_epoch=-1, timestamp_ms=5)
    batch = bytearray(original)
    assign_offset(batch, 1_000_000_007, 42)
    assert batch[CRC_OFFSET:] == original[CRC_OFFSET:]  # CRC field and everything it covers
    assert batch[8:12] == original[8:12]  # batch length and magic untouched
    assert batch[MAGIC_OFFSET] == 2
    header = validate_produced_batch(bytes(batch))
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000_007, 42)
    assert [offset for offset, *_ in iter_records(bytes(batch))] == [
        1_000_000_007 + i for i in range(len(RECORDS))
    ]


def test_set_log_append_time_re_signs_the_batch() -> None:
    original = build_batch(RECORDS, timestamp_ms=1_000, attributes=TRANSACTIONAL_BIT)
    batch = bytearray(original)
    set_log_append_time(batch, 5_555)
    header = validate_produced_batch(bytes(batch))
    assert header.log_append_time
    assert header.is_transactional  # other attribute bits survive
    assert header.max_timestamp == 5_555
    assert header.base_timestamp == 1_000
    assert header.crc == crc32c_reference(bytes(batch[ATTRIBUTES_OFFSET:]))
    assert header.crc != parse_header(original).crc
    # Every record now reads with the append time.
    assert {timestamp for _, timestamp, _, _ in iter_records(bytes(batch))} == {5_555}


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_set_log_append_time_keeps_the_compression_codec(codec: int) -> None:
    body = compressors()[codec](encode_record(0, 0, b"k", b"v"))
    batch = bytearray(build_batch([], encoded=body, record_count=1, attributes=codec))
    set_log_append_time(batch, 9)
    header = validate_produced_batch(bytes(batch))
    assert header.compression == codec
    assert iter_records(bytes(batch)) == [(0, 9, b"k", b"v")]


# -- batch_is_intact (recovery's check) --------------------------------------------------------


def test_batch_is_intact() -> None:
    first = build_batch([(None, b"first")], base_offset=0)
    second = build_batch([(b"k", b"second")], base_offset=1)
    buffer = first + second
    intact = batch_is_intact(buffer, len(first))
    assert intact is not None and intact.base_offset == 1
    assert batch_is_intact(buffer, 0) == parse_header(first)
    for cut in range(len(second)):
        assert batch_is_intact(first + second[:cut], len(first)) is None, cut
    damaged = bytearray(buffer)
    damaged[-1] ^= 0x40
    assert batch_is_intact(bytes(damaged), len(first)) is None
    assert batch_is_intact(bytes(damaged), 0) is not None
    wrong_magic = bytearray(first)
    wrong_magic[MAGIC_OFFSET] = 1
    assert batch_is_intact(bytes(wrong_magic), 0) is None
    too_small = bytearray(first)
    struct.pack_into(">i", too_small, 8, 20)
    assert batch_is_intact(bytes(too_small), 0) is None


# -- building and reading records --------------------------------------------------------------


def test_build_and_iter_round_trip() -> None:
    batch = build_batch(RECORDS, base_offset=100, timestamp_ms=1_600_000_000_123)
    assert iter_records(batch) == [
        (100 + i, 1_600_000_000_123, key, value) for i, (key, value) in enumerate(RECORDS)
    ]


def test_many_records_use_multi_byte_offset_deltas() -> None:
    records: list[tuple[bytes | None, bytes | None]] = [
        (str(i).encode(), b"v" * (i % 7)) for i in range(300)
    ]
    batch = build_batch(records, base_offset=2**33)
    assert validate_produced_batch(batch).record_count == 300
    assert [(o, k, v) for o, _t, k, v in iter_records(batch)] == [
        (2**33 + i, key, value) for i, (key, value) in enumerate(records)
    ]


def test_an_independent_reader_accepts_built_batches() -> None:
    batch = build_batch(RECORDS, base_offset=40, timestamp_ms=1_700_000_000_000)
    reader = DefaultRecordBatch(batch)
    assert reader.validate_crc()
    assert reader.base_offset == 40
    assert [(r.offset, r.timestamp, r.key, r.value) for r in reader] == [
        (40 + i, 1_700_000_000_000, key, value) for i, (key, value) in enumerate(RECORDS)
    ]


def test_record_headers_are_encoded_and_skipped_by_iter_records() -> None:
    headers = (("trace", b"abc"), ("empty", b""), ("null", None), ("ünïcode", b"\x00" * 200))
    body = (
        encode_record(0, 0, b"k0", b"v0", headers)
        + encode_record(1, 5, None, b"v1")
        + encode_record(2, -3, b"k2", None, headers[:1])
    )
    batch = build_batch([], encoded=body, record_count=3, base_offset=10, timestamp_ms=1_000)
    assert iter_records(batch) == [
        (10, 1_000, b"k0", b"v0"),
        (11, 1_005, None, b"v1"),
        (12, 997, b"k2", None),
    ]
    reader = DefaultRecordBatch(batch)
    assert reader.validate_crc()
    assert [list(r.headers) for r in reader] == [list(headers), [], list(headers[:1])]


def xerial_snappy(data: bytes, block: int) -> bytes:
    """snappy-java's stream framing: magic, version 1, compatible version 1, then blocks of
    (int32 size, raw snappy)."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[start : start + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def compressors() -> dict[int, Callable[[bytes], bytes]]:
    return {
        1: lambda data: bytes(cramjam.gzip.compress(data)),
        2: lambda data: bytes(cramjam.snappy.compress_raw(data)),
        3: lambda data: bytes(cramjam.lz4.compress(data)),  # frame format
        4: lambda data: bytes(cramjam.zstd.compress(data)),
    }


COMPRESSED_CASES = [
    pytest.param(1, compressors()[1], id="gzip"),
    pytest.param(2, compressors()[2], id="snappy-raw"),
    pytest.param(2, lambda data: xerial_snappy(data, 1 << 15), id="snappy-xerial"),
    pytest.param(2, lambda data: xerial_snappy(data, 100), id="snappy-xerial-many-blocks"),
    pytest.param(3, compressors()[3], id="lz4-frame"),
    pytest.param(4, compressors()[4], id="zstd"),
]


@pytest.mark.parametrize(("codec", "compress"), COMPRESSED_CASES)
def test_compressed_batches_round_trip(codec: int, compress: Callable[[bytes], bytes]) -> None:
    records: list[tuple[bytes | None, bytes | None]] = [
        *RECORDS,
        *((b"key-%d" % i, b"payload " * i) for i in range(50)),
    ]
    body = b"".join(encode_record(i, i, k, v) for i, (k, v) in enumerate(records))
    compressed = compress(body)
    assert compressed != body
    assert decompress(codec, compressed) == body
    batch = build_batch(
        [],
        encoded=compressed,
        record_count=len(records),
        attributes=codec,
        base_offset=500,
        timestamp_ms=2_000,
    )
    header = validate_produced_batch(batch)
    assert header.compression == codec
    assert iter_records(batch) == [
        (500 + i, 2_000 + i, key, value) for i, (key, value) in enumerate(records)
    ]


def test_decompress_uncompressed_and_unknown_codec() -> None:
    assert decompress(0, b"plain") == b"plain"
    with pytest.raises(ValueError):
        decompress(5, b"x")


# -- control batches ---------------------------------------------------------------------------


@pytest.mark.parametrize(("commit", "expected"), [(True, CONTROL_COMMIT), (False, CONTROL_ABORT)])
def test_control_batch(commit: bool, expected: int) -> None:
    marker = build_control_batch(1234, 7, commit, 55, 1_000)
    header = parse_header(marker)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (1234, 7)
    assert header.record_count == 1
    assert header.base_sequence == -1
    assert control_type(marker) == expected
    [(_offset, timestamp, key, value)] = iter_records(marker)
    assert timestamp == 1_000
    assert key == struct.pack(">hh", 0, expected)
    assert value == struct.pack(">hi", 0, 55)


def test_control_type_needs_a_key() -> None:
    batch = build_batch([(None, b"v")], attributes=CONTROL_BIT | TRANSACTIONAL_BIT)
    with pytest.raises(ValueError):
        control_type(batch)
    with pytest.raises(ValueError):
        control_type(build_batch([(b"\x00", b"v")], attributes=CONTROL_BIT))
