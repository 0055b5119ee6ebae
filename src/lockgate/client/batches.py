# client/batches.py — turning a producer's records into one v2 record batch (sans-IO).
#
# The batch's base timestamp is its first record's and every record carries its delta (which
# may be negative: callers may pass timestamps out of order); maxTimestamp is the largest.
# Producer id, epoch and base sequence stay "none" (-1) until the producer becomes idempotent:
# `ProducerIdentity` is where InitProducerId's answer and the per-partition sequence go then.
#
# This runs once per record on the producer's hot path, so records are plain tuples and the
# common record (no headers, small deltas and lengths) is framed from a table of ready-made
# varints; anything else goes through the general encoder in protocol/records.py.
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.protocol.records import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
    RecordHeaders,
    build_batch,
    compress,
    encode_record,
    zigzag_varint,
)

# (key, value, headers, timestamp_ms). A plain tuple, not a class: the producer builds one per
# record, and a named tuple or dataclass costs several times more to build.
OutgoingRecord = tuple[bytes | None, bytes | None, RecordHeaders, int]

# The record's own framing when every varint is at its widest: length 5, attributes 1,
# timestamp delta 10, offset delta 5, key length 5, value length 5, header count 5.
RECORD_OVERHEAD_BOUND = 36
HEADER_OVERHEAD_BOUND = 10

# Zigzag varints of -4096..4095 (one or two bytes), indexed by value + _TABLE_OFFSET.
_TABLE_OFFSET = 1 << 12
_VARINTS = [zigzag_varint(v) for v in range(-_TABLE_OFFSET, _TABLE_OFFSET)]


def size_bound(key: bytes | None, value: bytes | None, headers: RecordHeaders) -> int:
    """An upper bound of a record's encoded size, for batching and buffer accounting."""
    size = RECORD_OVERHEAD_BOUND + len(key or b"") + len(value or b"")
    for name, header_value in headers:
        size += HEADER_OVERHEAD_BOUND + len(name.encode()) + len(header_value or b"")
    return size


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    """Who writes the batch. The defaults mean a plain (non-idempotent) producer."""

    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    transactional: bool = False


NON_IDEMPOTENT = ProducerIdentity()


def encode_records(records: Sequence[OutgoingRecord], base_timestamp: int) -> bytes:
    """The records' v2 encodings, concatenated, offset deltas from 0."""
    varints = _VARINTS
    offset = _TABLE_OFFSET
    out: list[bytes] = []
    append = out.append
    join = b"".join
    for offset_delta, (key, value, headers, timestamp) in enumerate(records):
        delta = timestamp - base_timestamp
        # Lengths and offset deltas are never negative, so only the timestamp delta can index
        # below the table; an index past its end raises IndexError.
        if headers or key is None or value is None or not -offset <= delta < offset:
            append(encode_record(offset_delta, delta, key, value, headers))
            continue
        try:
            body = join(
                (
                    b"\x00",  # attributes
                    varints[delta + offset],
                    varints[offset_delta + offset],
                    varints[len(key) + offset],
                    key,
                    varints[len(value) + offset],
                    value,
                    b"\x00",  # no headers
                )
            )
            append(varints[len(body) + offset])
        except IndexError:  # a long key, value or batch
            append(encode_record(offset_delta, delta, key, value, headers))
            continue
        append(body)
    return join(out)


def build_producer_batch(
    records: Sequence[OutgoingRecord],
    *,
    codec: int = 0,
    identity: ProducerIdentity = NON_IDEMPOTENT,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """One v2 batch holding `records` in order, compressed with `codec` (0 = none)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_timestamp = records[0][3]
    return build_framed_batch(
        encode_records(records, base_timestamp),
        len(records),
        base_timestamp,
        max(record[3] for record in records),
        codec=codec,
        identity=identity,
        base_sequence=base_sequence,
    )


def build_framed_batch(
    encoded: bytes,
    record_count: int,
    base_timestamp: int,
    max_timestamp: int,
    *,
    codec: int = 0,
    identity: ProducerIdentity = NON_IDEMPOTENT,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """The batch around records already framed (encode_records, or the producer's fast path's
    RecordRun.frame), compressed with `codec` (0 = none)."""
    attributes = codec | (TRANSACTIONAL_BIT if identity.transactional else 0)
    return build_batch(
        [],
        encoded=compress(codec, encoded),
        record_count=record_count,
        timestamp_ms=base_timestamp,
        max_timestamp_ms=max_timestamp,
        attributes=attributes,
        producer_id=identity.producer_id,
        producer_epoch=identity.producer_epoch,
        base_sequence=base_sequence,
    )
