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
# - Batches are checked (CRC-32C) before their records are trusted (fetched.py).
from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.client.consumer import Message
from lockgate.client.fetched import batch_records, whole_batches


@dataclass(frozen=True, slots=True)
class ShareRecord(Message):
    """A consumed record (as the plain consumer's), with its delivery count."""

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
    if not ranges:  # nothing acquired: no batch of the answer is looked at
        return AcquiredPartition(out, gaps)
    where = f"{topic}-{partition}"
    for chunk, header in whole_batches(records, where, check_crcs=check_crcs):
        seen: set[int] = set()
        if not header.is_control:
            decoded, timestamp_type = batch_records(chunk, header, where)
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
