"""Log cleaner benchmark: how fast one compaction pass goes and what it costs the event loop.

A compacted partition on disk gets N records of 100 bytes (batches of 10, over K keys, 8 MiB
segments); then one pass cleans it in the worker thread, as the broker does, while a 1 ms
ticker runs on the event loop. The ticker also runs alone for the same time first, so the
loop's lateness with and without a pass in the background is compared in one run.

    python -m bench.cleaner [--records 1000000] [--keys 1000,100000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from lockgate.config.log import LogConfig
from lockgate.log.cleaner import LogCleaner
from lockgate.log.partition import Partition
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.storage.disk import DiskEngine

BATCH = 10
VALUE = b"v" * 90
CONFIG = LogConfig(
    segment_bytes=8 << 20,
    compact=True,
    delete_policy=False,
    min_cleanable_dirty_ratio=0.0,
    retention_ms=-1,
)


def fill(data: Path, records: int, keys: int) -> Partition:
    partition = Partition(DiskEngine(str(data)), "kv", 0, uuid.UUID(int=1), lambda: CONFIG)
    partition.load(0)
    for first in range(0, records, BATCH):
        pairs: list[tuple[bytes | None, bytes | None]] = [
            (b"key-%08d" % ((first + i) % keys), VALUE) for i in range(BATCH)
        ]
        batch = build_batch(pairs, timestamp_ms=1)
        partition.append(bytearray(batch), validate_produced_batch(batch), 1)
    partition.roll(1)
    partition.advance_high_watermark(partition.log_end_offset)
    return partition


async def ticks(seconds: float, until: asyncio.Future[object] | None = None) -> list[float]:
    """The lateness (ms) of each 1 ms sleep, for `seconds` or until `until` is done."""
    late: list[float] = []
    deadline = time.monotonic() + seconds
    while (until is None and time.monotonic() < deadline) or (
        until is not None and not until.done()
    ):
        started = time.monotonic()
        await asyncio.sleep(0.001)
        late.append((time.monotonic() - started) * 1000 - 1)
    return late


def summary(late: list[float]) -> str:
    p99 = statistics.quantiles(late, n=100)[98] if len(late) > 100 else max(late)
    return f"p99 {p99:5.1f} ms, worst {max(late):6.1f} ms"


async def measure(partition: Partition) -> tuple[float, int, int, list[float], list[float]]:
    before = partition.size_bytes
    cleaner = LogCleaner(lambda: [partition], lambda: 2, 1.0, 10_000_000)
    started = time.monotonic()
    task: asyncio.Future[object] = asyncio.ensure_future(cleaner.clean_once())
    busy = await ticks(0, task)
    seconds = time.monotonic() - started
    if task.result() is None:
        raise RuntimeError("the pass did not run")
    idle = await ticks(seconds)
    return seconds, before, partition.size_bytes, idle, busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", default="1000,100000")
    options = parser.parse_args()
    print(f"{options.records:,} records of 100 B")
    for keys in (int(k) for k in options.keys.split(",")):
        with tempfile.TemporaryDirectory(prefix="lockgate-cleaner-") as directory:
            partition = fill(Path(directory) / "data", options.records, keys)
            seconds, before, after, idle, busy = asyncio.run(measure(partition))
            rate = options.records / seconds
            print(
                f"{keys:>7,} keys: pass {seconds:5.2f} s ({rate / 1000:6.0f}k records/s, "
                f"{before / seconds / 2**20:5.1f} MiB/s), {before / 2**20:6.1f} → "
                f"{after / 2**20:5.2f} MiB; loop idle {summary(idle)}; "
                f"during the pass {summary(busy)}"
            )


if __name__ == "__main__":
    main()
