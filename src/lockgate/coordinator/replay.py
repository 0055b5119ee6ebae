# Replays an internal partition for a coordinator without holding the event loop: batches are
# read in order, a large chunk of the segment at a time (Segment.batches: a read per batch cost
# more than its records), and the loop is yielded to every REPLAY_CHUNK batches and after every
# REPLAY_SLICE_S of replaying (batches of many records, offset commits of many partitions say,
# would otherwise hold it for long: requests meanwhile, Metadata included, wait). The replay ends
# only after a pass from where it stopped finds nothing new, with no await in that pass, so a
# coordinator that marks the partition loaded right after has seen every record appended
# meanwhile (markers written to an offsets partition while it loads, say).
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lockgate.log.partition import Partition
from lockgate.protocol.records import BatchHeader, Decoded

REPLAY_CHUNK = 200
REPLAY_SLICE_S = 0.01

BatchVisitor = Callable[[BatchHeader, bytes], None]
# A coordinator's replay of one batch: its header, its bytes and its records, decoded once
# (protocol.records.iter_records) for the coordinator and the snapshot image alike; a control
# batch's records are not decoded ([]): its bytes say what it marks.
RecordsVisitor = Callable[[BatchHeader, bytes, Decoded], None]


async def replay(partition: Partition, visit: BatchVisitor, start: int | None = None) -> int:
    """Calls `visit(header, batch)` for every batch from `start` (the log start by default)
    to the log end, yielding to the event loop as it goes; returns how many it visited."""
    partition.scans += 1  # the log cleaner does not swap segments under a replay
    try:
        return await _replay(partition, visit, start)
    finally:
        partition.scans -= 1


async def _replay(partition: Partition, visit: BatchVisitor, start: int | None) -> int:
    next_offset = max(partition.log_start_offset, start or 0)
    visited = 0
    slice_ends = time.monotonic() + REPLAY_SLICE_S
    while True:
        progressed = False
        for segment in list(partition.segments[partition.segment_for(next_offset) :]):
            position = segment.position_of(max(next_offset, segment.base_offset))
            if position is None:
                continue
            for header, data in segment.batches(position):
                if header.last_offset < next_offset:
                    continue
                visit(header, data)
                next_offset = header.last_offset + 1
                visited += 1
                progressed = True
                if visited % REPLAY_CHUNK == 0 or time.monotonic() >= slice_ends:
                    await asyncio.sleep(0)
                    slice_ends = time.monotonic() + REPLAY_SLICE_S
        if not progressed:
            return visited
