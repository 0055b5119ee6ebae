# Finding a producer's earlier batch in the log, so that a resend of it is answered with its
# original offset. Producer state keeps only the latest batch per (producer, partition)
# (KAFKA-12207); Kafka keeps five and answers a resend of any of them with its offsets, and
# clients with five requests in flight resend older batches whenever a connection is cut.
# Rather than keeping more in memory, the batch is looked up where it already is: a
# producer's batches lie in the log in sequence order, so the one sought is below the
# producer's latest batch, usually a few batches back (other producers' batches between).
#
# The search walks the sparse offset index backward from the latest batch, one index entry's
# stretch of log (about index.interval.bytes) at a time, forward through the 61-byte v2
# headers of the batches there; records are never decoded. Headers are read through a window
# of at most READ_AHEAD bytes of the stretch: a read of a page costs what a read of a header
# costs (the page cache copies pages), so a stretch of small batches takes one read instead
# of one per batch, and a large batch costs one window, not its size. It ends:
# - found: a data batch with the same producer id and epoch and the same first and last
#   sequence, at or above the log start offset;
# - not there: the log start offset (retention, DeleteRecords), a batch of the producer that
#   starts before the one sought (so no batch of the log starts where it does: compaction
#   removed it, or the resend is cut differently), a data batch of an older epoch, or a batch
#   starting at the same sequence but ending elsewhere;
# - the bound: MAX_HEADERS headers examined (so at most MAX_HEADERS reads of at most
#   READ_AHEAD bytes), whatever the log holds.
# "Not there" and the bound leave the caller to answer DUPLICATE_SEQUENCE_NUMBER.
#
# Invariants: reads only, synchronously on the event loop (nothing changes the segments
# meanwhile; the cleaner's worker thread only reads sealed ones); nothing is kept between
# searches, so producer state stays one row per producer.
from __future__ import annotations

import bisect
import logging
import struct
from collections.abc import Sequence

from lockgate.log.producer_state import SEQUENCE_MODULUS, Duplicate, ProducerEntry
from lockgate.log.segment import Segment
from lockgate.protocol.records import (
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
)

log = logging.getLogger(__name__)

# Headers examined per search at most. A client resends batches at most four behind its
# latest (five in flight), so this covers about 250 producers writing to the partition
# between them; the search then stalls the event loop about a millisecond at worst
# (bench/duplicate_lookup.py has the figures).
MAX_HEADERS = 1024
# The most read at once within a stretch: one page.
READ_AHEAD = 4096

# The header fields the search needs, the rest skipped: base offset, batch length, magic,
# attributes, last offset delta, max timestamp, producer id, producer epoch, base sequence.
_FIELDS = struct.Struct(">qi4xb4xhi8xqqhi4x")
assert _FIELDS.size == HEADER_SIZE


def find_earlier_batch(
    segments: Sequence[Segment],
    log_start_offset: int,
    latest: ProducerEntry,
    first_sequence: int,
    last_sequence: int,
    max_headers: int = MAX_HEADERS,
) -> Duplicate | None:
    """The batch of `latest`'s producer and epoch running from `first_sequence` to
    `last_sequence`, stored below the producer's latest batch, as a Duplicate (its base
    offset, and its log append time if it has one, else -1); None when it is not in the log
    or not within `max_headers` headers."""
    latest_first = latest.first_offset
    if latest.last_sequence < 0 or latest_first <= log_start_offset or not segments:
        return None
    # how far behind the latest sequence: the batch sought ends before the latest one starts
    latest_span = (latest.last_sequence - latest.first_sequence) % SEQUENCE_MODULUS
    sought = (latest.last_sequence - first_sequence) % SEQUENCE_MODULUS
    sought_end = (latest.last_sequence - last_sequence) % SEQUENCE_MODULUS
    if not latest_span < sought_end <= sought:
        return None
    producer_id, epoch = latest.producer_id, latest.epoch
    holding = max(0, bisect.bisect_right([s.base_offset for s in segments], latest_first) - 1)
    upper = latest_first  # only batches below the latest one
    budget = max_headers
    for segment in reversed(segments[: holding + 1]):
        index = segment.offset_index
        relative = index.relative_offsets
        entry = bisect.bisect_left(relative, upper - segment.base_offset) - 1
        while entry >= 0:
            start = index.positions[entry]
            end = index.positions[entry + 1] if entry + 1 < len(relative) else segment.log.size
            position = start
            window, window_start = b"", start
            passed = False
            while position + HEADER_SIZE <= end:
                if budget == 0:
                    log.debug(
                        "producer %d: sequence %d not within %d batch headers",
                        producer_id,
                        first_sequence,
                        max_headers,
                    )
                    return None
                budget -= 1
                at = position - window_start
                if at + HEADER_SIZE > len(window):
                    window = segment.log.read(position, min(READ_AHEAD, end - position))
                    window_start, at = position, 0
                    if len(window) < HEADER_SIZE:
                        return None  # the file ends before the index says
                (
                    base_offset,
                    batch_length,
                    magic,
                    attributes,
                    last_offset_delta,
                    max_timestamp,
                    batch_producer,
                    batch_epoch,
                    base_sequence,
                ) = _FIELDS.unpack_from(window, at)
                size = LOG_OVERHEAD + batch_length
                if magic != 2 or size < HEADER_SIZE:
                    return None  # not a batch boundary: the index and the log disagree
                if base_offset >= upper:
                    break
                position += size
                if base_offset < log_start_offset:
                    passed = True
                    continue
                if batch_producer != producer_id or attributes & CONTROL_BIT:
                    continue
                if batch_epoch != epoch:
                    passed = True  # an older epoch: the sought one started after it
                    continue
                behind = (latest.last_sequence - base_sequence) % SEQUENCE_MODULUS
                if behind > sought:
                    passed = True  # the producer's batches before the one sought
                elif behind == sought:
                    ends = (base_sequence + last_offset_delta) % SEQUENCE_MODULUS
                    if ends != last_sequence:
                        return None  # cut differently: not a copy of this batch
                    appended = max_timestamp if attributes & TIMESTAMP_TYPE_BIT else -1
                    return Duplicate(base_offset, appended)
            if passed:
                return None
            entry -= 1
        upper = segment.base_offset
        if upper <= log_start_offset:
            return None
    return None
