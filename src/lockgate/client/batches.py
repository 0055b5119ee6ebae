# client/batches.py — turning a producer's records into one v2 record batch (sans-IO).
#
# The batch's base timestamp is its first record's and every record carries its delta (which
# may be negative: callers may pass timestamps out of order); maxTimestamp is the largest.
# Producer id, epoch and base sequence stay "none" (-1) until the producer becomes idempotent:
# `ProducerIdentity` is where InitProducerId's answer and the per-partition sequence go then.
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
)

# The record's own framing when every varint is at its widest: length 5, attributes 1,
# timestamp delta 10, offset delta 5, key length 5, value length 5, header count 5.
RECORD_OVERHEAD_BOUND = 36
HEADER_OVERHEAD_BOUND = 10


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    key: bytes | None
    value: bytes | None
    headers: RecordHeaders
    timestamp_ms: int

    def size_bound(self) -> int:
        """An upper bound of its encoded size, for batching and buffer accounting."""
        size = RECORD_OVERHEAD_BOUND + len(self.key or b"") + len(self.value or b"")
        for name, value in self.headers:
            size += HEADER_OVERHEAD_BOUND + len(name.encode()) + len(value or b"")
        return size


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    """Who writes the batch. The defaults mean a plain (non-idempotent) producer."""

    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    transactional: bool = False


NON_IDEMPOTENT = ProducerIdentity()


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
    base_timestamp = records[0].timestamp_ms
    encoded = b"".join(
        encode_record(
            offset_delta,
            record.timestamp_ms - base_timestamp,
            record.key,
            record.value,
            record.headers,
        )
        for offset_delta, record in enumerate(records)
    )
    attributes = codec | (TRANSACTIONAL_BIT if identity.transactional else 0)
    return build_batch(
        [],
        encoded=compress(codec, encoded),
        record_count=len(records),
        timestamp_ms=base_timestamp,
        max_timestamp_ms=max(record.timestamp_ms for record in records),
        attributes=attributes,
        producer_id=identity.producer_id,
        producer_epoch=identity.producer_epoch,
        base_sequence=base_sequence,
    )
