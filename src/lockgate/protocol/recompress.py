# Re-encoding a produced batch with a topic's compression.type (Kafka's broker-side
# recompression), sans-IO.
#
# Invariants: the new batch holds the same records (bytes unchanged once decompressed) in one v2
# batch whose header keeps every field but the codec bits of the attributes and the CRC (which is
# recomputed): base offset, leader epoch, timestamps, producer id and epoch, base sequence and
# the transactional bit stay, so idempotence and transactions see the batch the client sent.
# Inner offsets must run 0..n-1, as Kafka requires of a batch it recompresses.
from __future__ import annotations

import struct

import crc32c

from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compress,
    decompress,
    parse_header,
    read_varint,
)

# Kafka's topic/broker compression.type values and their codec ids; "producer" keeps the batch
# as the client compressed it.
TOPIC_CODECS: dict[str, int] = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PRODUCER = "producer"
COMPRESSION_TYPES = (PRODUCER, *TOPIC_CODECS)

_PREFIX = struct.Struct(">qiibI")


def target_codec(compression_type: str) -> int | None:
    """The codec a topic imposes, or None when batches keep the producer's."""
    return TOPIC_CODECS.get(compression_type)


def _records_end(body: bytes, count: int) -> int:
    """Where the batch's `count` records end in the decompressed body, checking each one's
    offset delta (only the length and the deltas are read: this loop is the cost)."""
    position = 0
    try:
        for index in range(count):
            length, start = read_varint(body, position)
            if length <= 0:
                raise IndexError(length)
            _timestamp_delta, after = read_varint(body, start + 1)  # after the attributes byte
            offset_delta, _ = read_varint(body, after)
            if offset_delta != index:
                raise KafkaProtocolError(
                    ErrorCode.invalid_record,
                    f"inner record {index} has offset delta {offset_delta}, expected {index}",
                )
            position = start + length
    except IndexError:
        raise KafkaProtocolError(
            ErrorCode.corrupt_message, "records end before the batch's record count"
        ) from None
    if position > len(body):
        raise KafkaProtocolError(ErrorCode.corrupt_message, "the last record overruns the batch")
    return position


def recompress(batch: bytes, codec: int, level: int | None = None) -> tuple[bytes, BatchHeader]:
    """The batch re-encoded with `codec` (at `level`: the topic's compression.*.level), and
    its header. Raises KafkaProtocolError
    (CORRUPT_MESSAGE) if its records do not decompress or parse, INVALID_RECORD if their
    offset deltas are not consecutive from 0."""
    header = parse_header(batch)
    try:
        body = decompress(header.compression, bytes(batch[HEADER_SIZE : header.size]))
    except Exception as exc:  # each codec library has its own error type
        problem = f"records do not decompress: {exc}"
        raise KafkaProtocolError(ErrorCode.corrupt_message, problem) from None
    end = _records_end(body, header.record_count)
    payload = compress(codec, body[:end], level)
    attributes = (header.attributes & ~COMPRESSION_MASK) | codec
    after_crc = bytearray(batch[ATTRIBUTES_OFFSET:HEADER_SIZE])
    struct.pack_into(">h", after_crc, 0, attributes)
    crc = crc32c.crc32c(bytes(after_crc) + payload)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    rebuilt = (
        _PREFIX.pack(header.base_offset, batch_length, header.partition_leader_epoch, 2, crc)
        + after_crc
        + payload
    )
    return rebuilt, parse_header(rebuilt)
