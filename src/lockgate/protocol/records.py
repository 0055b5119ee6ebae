# Record batch v2 header: parse, validate, rewrite. Records themselves stay opaque bytes.
#
# Layout (61 bytes): baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 |
# crc u32 | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
# producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32.
# The CRC-32C covers attributes..end, so baseOffset and partitionLeaderEpoch can be rewritten
# without recomputing it.
from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from lockgate.protocol._purerecords import Decoded as Decoded  # (records of a batch, decoded)
from lockgate.protocol._purerecords import encode_record as encode_record
from lockgate.protocol._purerecords import zigzag_varint as zigzag_varint
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.fastpath import decode_records, encode_records

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
MIN_RECORD_SIZE = (
    7  # length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headers
)

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


class BatchHeader(NamedTuple):
    # a named tuple, not a frozen dataclass: built straight from struct's tuple, ~5x cheaper
    # (every produced batch and every batch a share fetch looks at is parsed)
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


_make_header = BatchHeader._make


def parse_header(data: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return _make_header(_HEADER.unpack_from(data, pos))


def peek_batch_size(data: bytes | memoryview, pos: int) -> tuple[int, int, int] | None:
    """(base offset, total size, magic) of the batch at `pos`, or None if the prefix is cut."""
    if len(data) - pos < _PREFIX.size:
        return None
    base_offset, batch_length, _epoch, magic = _PREFIX.unpack_from(data, pos)
    return base_offset, LOG_OVERHEAD + batch_length, magic


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    return int(crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))


def validate_produced_batch(records: bytes) -> BatchHeader:
    """Checks that a client's Produce records field is exactly one sound v2 batch.

    Raises KafkaProtocolError(CORRUPT_MESSAGE | INVALID_RECORD); nothing is appended then.
    """
    size = len(records)
    if size < HEADER_SIZE:
        prefix = peek_batch_size(records, 0)
        if prefix is not None and prefix[2] != 2:
            raise KafkaProtocolError(
                ErrorCode.invalid_record, f"magic {prefix[2]} is not supported"
            )
        raise KafkaProtocolError(
            ErrorCode.corrupt_message, f"record set of {size} bytes is too short"
        )
    header = parse_header(records)
    if header.magic != 2:
        raise KafkaProtocolError(ErrorCode.invalid_record, f"magic {header.magic} is not supported")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.size > size:
        raise KafkaProtocolError(
            ErrorCode.corrupt_message,
            f"batch length {header.batch_length} does not fit the {size} bytes received",
        )
    if header.size != size:
        raise KafkaProtocolError(ErrorCode.invalid_record, "exactly one record batch is allowed")
    if header.crc != compute_crc(records):
        raise KafkaProtocolError(ErrorCode.corrupt_message, "CRC-32C mismatch")
    if header.is_control:
        raise KafkaProtocolError(ErrorCode.invalid_record, "clients cannot write control batches")
    if header.compression > 4:
        raise KafkaProtocolError(ErrorCode.invalid_record, f"compression {header.compression}")
    count = header.record_count
    if count <= 0 or header.last_offset_delta != count - 1:
        raise KafkaProtocolError(
            ErrorCode.invalid_record,
            f"record count {count} does not match last offset delta {header.last_offset_delta}",
        )
    if header.compression == 0 and count * MIN_RECORD_SIZE > size - HEADER_SIZE:
        raise KafkaProtocolError(ErrorCode.invalid_record, f"{count} records cannot fit the batch")
    return header


def assign_offset(batch: bytearray, base_offset: int, leader_epoch: int) -> None:
    """Rewrites the two fields outside the CRC in place."""
    _INT64.pack_into(batch, 0, base_offset)
    _INT32.pack_into(batch, 12, leader_epoch)


def set_log_append_time(batch: bytearray, timestamp_ms: int) -> None:
    """Marks the batch LogAppendTime with maxTimestamp = now, then re-signs it (these fields
    are inside the CRC)."""
    (attributes,) = _INT16.unpack_from(batch, ATTRIBUTES_OFFSET)
    _INT16.pack_into(batch, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(batch, MAX_TIMESTAMP_OFFSET, timestamp_ms)
    _UINT32.pack_into(batch, CRC_OFFSET, compute_crc(batch))


def batch_is_intact(data: bytes | memoryview, pos: int) -> BatchHeader | None:
    """The header of a complete, CRC-valid v2 batch at `pos`, or None (torn or corrupt)."""
    prefix = peek_batch_size(data, pos)
    if prefix is None:
        return None
    _base, total, magic = prefix
    if magic != 2 or total < HEADER_SIZE or pos + total > len(data):
        return None
    header = parse_header(data, pos)
    view = memoryview(data)[pos : pos + total]
    if header.crc != compute_crc(view):
        return None
    return header


# ---------------------------------------------------------------------------------------------
# Building batches (used by control markers, tests and the client).


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    base_offset: int = 0,
    timestamp_ms: int = 0,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = -1,
    encoded: bytes | None = None,
    record_count: int | None = None,
    max_timestamp_ms: int | None = None,
) -> bytes:
    """Builds a v2 batch from (key, value) pairs, or from already encoded (and possibly
    compressed) record bytes with an explicit count. `max_timestamp_ms` defaults to
    `timestamp_ms` (the base timestamp), right when every record has timestamp delta 0."""
    if encoded is None:
        body = encode_records(records)
        count = len(records)
    else:
        body = encoded
        count = record_count if record_count is not None else len(records)
    header_after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        count - 1,
        timestamp_ms,
        timestamp_ms if max_timestamp_ms is None else max_timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = crc32c.crc32c(header_after_crc + body)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    return (
        struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc)
        + header_after_crc
        + body
    )


# ---------------------------------------------------------------------------------------------
# Reading records inside a batch: the coordinators' loads, and rare paths (ListOffsets by
# timestamp).

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def decompress(codec: int, data: bytes) -> bytes:
    import cramjam

    if codec == 0:
        return data
    if codec == 1:
        return bytes(cramjam.gzip.decompress(data))
    if codec == 2:
        if data.startswith(_XERIAL_MAGIC):
            out = bytearray()
            pos = 16
            while pos + 4 <= len(data):
                (size,) = struct.unpack_from(">i", data, pos)
                out += bytes(cramjam.snappy.decompress_raw(data[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec {codec}")


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    raw = 0
    while True:
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def iter_records(batch: bytes) -> Decoded:
    """(offset, timestamp, key, value) of every record in a batch (headers skipped); the
    walk over the records is protocol/fastpath.py's (compiled, or its pure twin). Raises
    ValueError when the records do not parse."""
    if type(batch) is not bytes:  # (keys and values are bytes whatever the buffer)
        batch = bytes(batch)
    header = parse_header(batch)
    append_time = header.max_timestamp if header.log_append_time else None
    if header.compression == 0:
        body, start, end = batch, HEADER_SIZE, min(header.size, len(batch))
    else:
        body = decompress(header.compression, batch[HEADER_SIZE : header.size])
        start, end = 0, len(body)
    return decode_records(
        body, start, end, header.record_count, header.base_offset, header.base_timestamp,
        append_time,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Control batches (transaction markers).

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def build_control_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value)],
        timestamp_ms=timestamp_ms,
        attributes=TRANSACTIONAL_BIT | CONTROL_BIT,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


def control_type(batch: bytes) -> int:
    """CONTROL_COMMIT or CONTROL_ABORT of a control batch (from its single record's key)."""
    return control_record(batch)[0]


def control_record(batch: bytes) -> tuple[int, int]:
    """(CONTROL_COMMIT or CONTROL_ABORT, coordinator epoch) of a control batch's single
    record. The epoch is -1 (unknown) when the value does not carry one."""
    records = iter_records(batch)
    key, value = (records[0][2], records[0][3]) if records else (None, None)
    if key is None or len(key) < _CONTROL_KEY.size:
        raise ValueError("control record without a valid key")
    epoch = -1
    if value is not None and len(value) >= _CONTROL_VALUE.size:
        epoch = int(_CONTROL_VALUE.unpack_from(value)[1])
    return int(_CONTROL_KEY.unpack_from(key)[1]), epoch


# ---------------------------------------------------------------------------------------------
# Whole records (with headers) and compression for writers: the client's producer and consumer.

COMPRESSION_CODECS: dict[str, int] = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """Compresses encoded records for a batch whose attributes carry `codec`, at `level`
    (gzip, lz4 and zstd; None: the library's default).

    Snappy is written raw rather than xerial-framed: librdkafka, kafka-python and `decompress`
    above read it, and so does the Java client, whose snappy-java SnappyInputStream treats
    input without the xerial header as one raw block. LZ4 is the frame format (magic 1+).
    """
    import cramjam

    if codec == 0:
        return data
    if codec == 1:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.compress(data, level=level))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise ValueError(f"unknown compression codec {codec}")


RecordHeaders = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: RecordHeaders


def read_records(batch: bytes) -> list[Record]:
    """Every record of one complete v2 batch, headers included; decompresses as needed.

    Raises ValueError when the records do not parse (a batch whose CRC was not checked may
    be anything)."""
    header = parse_header(batch)
    body = decompress(header.compression, bytes(batch[HEADER_SIZE : header.size]))
    records: list[Record] = []
    pos = 0
    try:
        for _ in range(header.record_count):
            length, pos = read_varint(body, pos)
            end = pos + length
            pos += 1  # record attributes: unused in v2
            timestamp_delta, pos = read_varint(body, pos)
            offset_delta, pos = read_varint(body, pos)
            key, pos = _read_nullable_bytes(body, pos)
            value, pos = _read_nullable_bytes(body, pos)
            header_count, pos = read_varint(body, pos)
            headers: list[tuple[str, bytes | None]] = []
            for _ in range(max(header_count, 0)):
                name, pos = _read_nullable_bytes(body, pos)
                header_value, pos = _read_nullable_bytes(body, pos)
                headers.append(((name or b"").decode("utf-8", errors="replace"), header_value))
            if pos > end or end > len(body):
                raise ValueError(f"record at offset delta {offset_delta} overruns its length")
            timestamp = (
                header.max_timestamp
                if header.log_append_time
                else header.base_timestamp + timestamp_delta
            )
            records.append(
                Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers))
            )
            pos = end
    except IndexError as exc:
        raise ValueError("records end before the batch's record count") from exc
    return records


def _read_nullable_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    size, pos = read_varint(data, pos)
    if size < 0:
        return None, pos
    if pos + size > len(data):
        raise ValueError("a record field runs past the end of the batch")
    return data[pos : pos + size], pos + size
