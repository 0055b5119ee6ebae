# client/share_records.py — one partition's ShareFetch answer turned into records: the broker
# sends whole log batches (it never splits or rewrites them) and, apart, the ranges of offsets
# this member acquired with their delivery counts; only records inside those ranges are the
# consumer's.
#
# Invariants:
# - A record is returned only if its offset lies in an acquired range; it carries that range's
#   delivery count (1 on first delivery).
# - An acquired offset inside a complete batch of the answer that yields no record for the
#   consumer (a control batch, an offset compacted away) is reported as a gap: the consumer
#   acknowledges it as GAP, as Kafka's client does, so the share-partition start offset moves
#   past it. Acquired offsets beyond the last complete batch are neither records nor gaps (the
#   data was cut): they stay acquired until their lock expires.
# - Batches are checked (CRC-32C) before their records are trusted.
from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.client.consumer import TimestampType
from lockgate.client.errors import CorruptRecordError
from lockgate.protocol.records import (
    RecordHeaders,
    batch_is_intact,
    parse_header,
    peek_batch_size,
    read_records,
)


@dataclass(frozen=True, slots=True)
class ShareRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: RecordHeaders
    leader_epoch: int
    delivery_count: int  # how many times the record has been acquired, this time included


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(slots=True)
class AcquiredPartition:
    records: list[ShareRecord]
    gaps: list[int]  # acquired offsets with no record for the consumer


def _count_at(ranges: Sequence[AcquiredRange], firsts: Sequence[int], offset: int) -> int | None:
    index = bisect.bisect_right(firsts, offset) - 1
    if index >= 0 and offset <= ranges[index].last_offset:
        return ranges[index].delivery_count
    return None


def decode_acquired(
    topic: str,
    partition: int,
    records: bytes,
    acquired: Sequence[AcquiredRange],
    *,
    check_crcs: bool = True,
) -> AcquiredPartition:
    ranges = sorted(acquired, key=lambda r: r.first_offset)
    firsts = [r.first_offset for r in ranges]
    out: list[ShareRecord] = []
    gaps: list[int] = []
    pos = 0
    while pos < len(records) and ranges:
        prefix = peek_batch_size(records, pos)
        if prefix is None:
            break
        _base, size, magic = prefix
        if pos + size > len(records):
            break
        if magic != 2:
            raise CorruptRecordError(f"{topic}-{partition}: batch with magic {magic}")
        chunk = records[pos : pos + size]
        pos += size
        header = batch_is_intact(chunk, 0) if check_crcs else parse_header(chunk)
        if header is None:
            raise CorruptRecordError(f"{topic}-{partition}: batch failed its CRC-32C check")
        seen: set[int] = set()
        if not header.is_control:
            try:
                decoded = read_records(chunk)
            except Exception as exc:  # decompressors raise their own types
                raise CorruptRecordError(
                    f"{topic}-{partition}: undecodable batch at offset {header.base_offset}: {exc}"
                ) from exc
            timestamp_type = (
                TimestampType.LOG_APPEND_TIME
                if header.log_append_time
                else TimestampType.CREATE_TIME
            )
            for record in decoded:
                count = _count_at(ranges, firsts, record.offset)
                if count is None:
                    continue
                seen.add(record.offset)
                out.append(
                    ShareRecord(
                        topic,
                        partition,
                        record.offset,
                        record.timestamp,
                        timestamp_type,
                        record.key,
                        record.value,
                        record.headers,
                        header.partition_leader_epoch,
                        count,
                    )
                )
        for r in ranges:
            low = max(r.first_offset, header.base_offset)
            high = min(r.last_offset, header.last_offset)
            gaps.extend(offset for offset in range(low, high + 1) if offset not in seen)
    gaps.sort()
    return AcquiredPartition(out, gaps)
