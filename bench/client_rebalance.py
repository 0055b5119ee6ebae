"""Rebalance benchmark for lockgate's own consumer: group_protocol="classic" (cooperative-sticky,
the client's default order puts range first: it is chosen) against group_protocol="consumer"
(KIP-848, the broker's uniform assignor), on one lockgate broker.

For each group size N, with lockgate's asyncio consumers polling in their own tasks on a
24-partition topic:

- join: N consumers subscribe at once; the clock stops when every partition is owned by
  exactly one of them and the assignment is balanced (sizes differ by at most one);
- one more: an (N+1)th consumer subscribes; the clock stops when the assignment is balanced
  again. Also counted: how many of the first N members had no partition at some moment
  during that rebalance.

Both protocols heartbeat every 500 ms (the classic consumer's heartbeat_interval_ms, the
broker's group.consumer.heartbeat.interval.ms), with no initial rebalance delay. The broker
is a fresh process on a free loopback port with its data in a temporary directory, stopped
by PID at the end. Each measurement is repeated (`--repeat`, each time with a new group) and
the median is reported.

    python -m bench.client_rebalance [--sizes 2,4] [--partitions 24] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from lockgate.client.consumer import Consumer
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

TIMEOUT = 60.0
HEARTBEAT_MS = 500
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "10000",
    "lockgate.durability": "page-cache",
}


def consumer(bootstrap: str, group: str, protocol: str) -> Consumer:
    return Consumer(
        bootstrap,
        group_id=group,
        group_protocol=protocol,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        heartbeat_interval_ms=HEARTBEAT_MS,
        session_timeout_ms=10_000,
    )


def balanced(members: list[Consumer], partitions: int) -> bool:
    sets = [set(c.assignment()) for c in members]
    sizes = [len(s) for s in sets]
    union = set().union(*sets)
    return (
        sum(sizes) == partitions == len(union) and max(sizes) - min(sizes) <= 1 and min(sizes) > 0
    )


async def wait_balanced(
    members: list[Consumer], partitions: int, watch: int = 0
) -> tuple[float, int]:
    """Seconds until balanced, and how many of the first `watch` members were seen with no
    partition meanwhile."""
    started = time.monotonic()
    emptied: set[int] = set()
    stop = asyncio.Event()

    async def keep_polling(c: Consumer) -> None:
        while not stop.is_set():
            await c.poll(20)

    tasks = [asyncio.create_task(keep_polling(c)) for c in members]
    try:
        while time.monotonic() - started < TIMEOUT:
            for index in range(watch):
                if not members[index].assignment():
                    emptied.add(index)
            if balanced(members, partitions):
                return time.monotonic() - started, len(emptied)
            await asyncio.sleep(0.005)
        raise TimeoutError("the group did not balance")
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def run(
    bootstrap: str, protocol: str, size: int, topic: str, partitions: int, attempt: int
) -> dict[str, float]:
    group = f"bench-{protocol}-{size}-{attempt}"
    members = [consumer(bootstrap, group, protocol) for _ in range(size)]
    extra = consumer(bootstrap, group, protocol)
    for c in [*members, extra]:
        await c.start()
    try:
        for c in members:
            c.subscribe([topic])
        join, _ = await wait_balanced(members, partitions)
        extra.subscribe([topic])
        one_more, emptied = await wait_balanced([*members, extra], partitions, watch=size)
    finally:
        await asyncio.gather(*(c.close() for c in [*members, extra]))
    return {"join": join, "one_more": one_more, "emptied": emptied}


async def measure(sizes: list[int], partitions: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-rebalance-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", SETTINGS).start()
        try:
            topic = "bench-client-rebalance"
            create_topic(broker.bootstrap, topic, partitions)
            rows = []
            for size in sizes:
                for protocol in ("classic", "consumer"):
                    runs = [
                        await run(broker.bootstrap, protocol, size, topic, partitions, attempt)
                        for attempt in range(repeat)
                    ]
                    result = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                    rows.append((size, protocol, result))
                    print(f"N={size} {protocol}: {runs}", flush=True)
        finally:
            broker.kill()
    print()
    print("| consumers | protocol | join (s) | one more joins (s) | members left with nothing |")
    print("|---|---|---|---|---|")
    for size, protocol, result in rows:
        print(f"| {size} | {protocol} | {result['join']:.2f} | {result['one_more']:.2f} | "
              f"{result['emptied']:g} of {size} |")  # fmt: skip
    for size in sizes:
        classic = next(r for s, p, r in rows if s == size and p == "classic")
        new = next(r for s, p, r in rows if s == size and p == "consumer")
        print(f"N={size}: consumer/classic join {new['join'] / classic['join']:.2f}, "
              f"one more {new['one_more'] / classic['one_more']:.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,4")
    parser.add_argument("--partitions", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(measure([int(s) for s in args.sizes.split(",")], args.partitions, args.repeat))


if __name__ == "__main__":
    main()
