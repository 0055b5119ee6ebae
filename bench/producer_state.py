"""Producer-state memory and snapshot benchmark (KAFKA-12207 layout).

Creates N (producer, partition) entries spread over P partitions exactly as the broker holds
them (one ProducerStateTable per partition), then reports bytes per entry (tracemalloc and
RSS growth), and the time to snapshot and to load every table.

    python -m bench.producer_state [--entries 1000000] [--partitions 1000]
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc

import psutil

from lockgate.log.producer_state import ProducerStateTable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=1_000)
    args = parser.parse_args()
    per_partition = args.entries // args.partitions
    rng = random.Random(42)
    process = psutil.Process()
    gc.collect()
    rss_before = process.memory_info().rss
    tracemalloc.start()
    started = time.perf_counter()
    tables = []
    for partition in range(args.partitions):
        table = ProducerStateTable()
        # producers arrive in random id order, the worst case for the sorted layout
        ids = rng.sample(range(10_000_000), per_partition)
        for offset, producer_id in enumerate(ids):
            table.record_append(
                producer_id,
                rng.randrange(5),
                0,
                rng.randrange(1 << 20),
                partition * per_partition + offset,
                1_700_000_000_000 + offset,
                -1,
            )
        tables.append(table)
    build_seconds = time.perf_counter() - started
    traced, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    rss_after = process.memory_info().rss
    entries = sum(len(t) for t in tables)

    started = time.perf_counter()
    snapshots = [t.snapshot(1) for t in tables]
    snapshot_seconds = time.perf_counter() - started
    started = time.perf_counter()
    loaded = [ProducerStateTable.from_snapshot(s) for s in snapshots]
    load_seconds = time.perf_counter() - started
    assert all(item is not None for item in loaded)
    snapshot_bytes = sum(len(s) for s in snapshots)

    print(f"entries                  {entries:>12,} over {args.partitions:,} partitions")
    print(f"bytes/entry (tracemalloc){traced / entries:>12.1f}   (target <= 150)")
    print(f"bytes/entry (RSS growth) {(rss_after - rss_before) / entries:>12.1f}")
    print(f"build                    {build_seconds:>12.2f} s")
    on_disk = snapshot_bytes / entries
    print(f"snapshot all             {snapshot_seconds:>12.2f} s  ({on_disk:.0f} B/entry on disk)")
    print(f"load all                 {load_seconds:>12.2f} s")


if __name__ == "__main__":
    main()
