"""The share partition's own cost (share/partition.py, in-flight state per log batch) beside
the per-offset implementation it replaced (tests/support/share_model.py), in one process: what
the share-partition leader does per ShareFetch and ShareAcknowledge, without I/O.

One share partition, log batches of `--batch` records: each step acquires up to `--window`
records (whole log batches, batch_optimized, as librdkafka's share consumer gets them), then
acknowledges each acquired log batch whole with ACCEPT and commits it (the write succeeded),
with the calls the manager makes around them (can_acquire, next_fetch_offset, next_deadline
after each change). `--partial` acknowledges each batch as two halves of different types
instead (ACCEPT then RELEASE, re-acquired later): the split path. Figures: records per second
through acquire + acknowledge + commit for each implementation, best of `--rounds` rounds run
alternately, and the ratio new ÷ old.

    python -m bench.share_partition [--records 200000] [--batch 500] [--window 2000]
                                    [--rounds 5] [--partial] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from types import ModuleType
from typing import Any

from lockgate.share import partition as new
from tests.support import share_model as old


def run(module: ModuleType, records: int, batch: int, window: int, partial: bool) -> float:
    """Seconds to move `records` records through acquire, acknowledge and commit."""
    limits: Any = module.Limits(max_record_locks=max(window, batch))
    share: Any = module.SharePartition(0)
    produced = 0  # the log's end: log batches of `batch` records from 0
    now = 0
    began = time.perf_counter()
    while share.start_offset < records:
        now += 1
        if share.can_acquire(limits):
            start = share.next_fetch_offset()
            first = start - start % batch
            upper = min(records, max(produced, first + window + batch))
            produced = max(produced, upper)
            log = (module.LogBatch(f, f + batch - 1) for f in range(first, upper, batch))
            acquired = share.acquire("m", log, window, now, limits, read_from=start)
            share.next_deadline()
            ranges = [(r.first_offset, r.last_offset) for r in acquired.ranges]
        else:
            ranges = []
        if not ranges and not share.can_acquire(limits):
            raise RuntimeError(f"stuck at offset {share.start_offset}")
        for low, high in ranges:
            for f in range(low - low % batch, high + 1, batch):
                a, b = max(low, f), min(high, f + batch - 1)
                if partial and b > a:
                    middle = (a + b) // 2
                    acks = [
                        module.AckBatch(a, middle, (module.ACCEPT,)),
                        module.AckBatch(middle + 1, b, (module.RELEASE,)),
                    ]
                else:
                    acks = [module.AckBatch(a, b, (module.ACCEPT,))]
                transition = share.acknowledge("m", acks, now, limits)
                share.commit(transition)
                share.next_deadline()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--window", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partial", action="store_true")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    best: dict[str, float] = {}
    for round_index in range(args.rounds):
        order = [("new", new), ("old", old)]
        if round_index % 2:
            order.reverse()  # alternate: drift on a shared machine hits both alike
        for name, module in order:
            seconds = run(module, args.records, args.batch, args.window, args.partial)
            best[name] = min(best.get(name, seconds), seconds)
    rates = {name: args.records / seconds for name, seconds in best.items()}
    kind = "halves ACCEPT + RELEASE" if args.partial else "whole ACCEPT"
    print(
        f"{args.records:,} records, log batches of {args.batch}, window {args.window}, "
        f"acknowledged as {kind}; best of {args.rounds} rounds"
    )
    for name in ("new", "old"):
        print(f"  {name}: {rates[name]:>12,.0f} records/s ({best[name]:.3f} s)")
    print(f"  ratio new / old: {rates['new'] / rates['old']:.1f}x")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "seconds": best, "records_per_s": rates}, out, indent=2)


if __name__ == "__main__":
    main()
