"""A coordinator's replay yields to the event loop on a time slice as well as every
REPLAY_CHUNK batches: a log of few, large batches (or a slow visitor) does not hold the loop
for the whole load, so requests meanwhile are answered (COORDINATOR_LOAD_IN_PROGRESS, Metadata)
instead of waiting for it (issue 22, pain 8)."""

from __future__ import annotations

import asyncio
import time
import uuid

from lockgate.config.log import LogConfig
from lockgate.coordinator.replay import REPLAY_CHUNK, REPLAY_SLICE_S, replay
from lockgate.log.partition import Partition
from lockgate.protocol.records import BatchHeader, build_batch, validate_produced_batch
from lockgate.storage.memory import MemoryEngine

BATCHES = 40  # far fewer than REPLAY_CHUNK: only the time slice can yield
VISIT_S = 0.003


async def test_a_replay_of_few_slow_batches_yields_on_the_time_slice() -> None:
    assert BATCHES < REPLAY_CHUNK and VISIT_S < REPLAY_SLICE_S
    partition = Partition(MemoryEngine(), "p", 0, uuid.UUID(int=1), LogConfig)
    partition.load(1)
    for number in range(BATCHES):
        batch = build_batch([(b"k", b"%d" % number)], timestamp_ms=1)
        partition.append(bytearray(batch), validate_produced_batch(batch), 1)
    visited: list[int] = []
    longest_hold = 0.0

    def visit(header: BatchHeader, _data: bytes) -> None:
        time.sleep(VISIT_S)  # a batch of many records
        visited.append(header.base_offset)

    async def ticker() -> None:
        nonlocal longest_hold
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0)
            now = time.monotonic()
            longest_hold = max(longest_hold, now - last)
            last = now

    done = asyncio.Event()
    watcher = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    assert await replay(partition, visit) == BATCHES
    done.set()
    await watcher
    assert visited == list(range(BATCHES))  # every batch once, in order
    # the loop ran other work at least every slice (plus one batch, plus slack for the machine)
    assert longest_hold < REPLAY_SLICE_S + VISIT_S + 0.05, longest_hold
