"""Rebalance benchmark: the classic group protocol against the consumer group protocol
(KIP-848), side by side on one lockgate broker.

For each group size N, with confluent-kafka consumers (librdkafka) on a 24-partition topic:

- join: N consumers subscribe at once; the clock stops when every partition is assigned to
  exactly one of them and the assignment is balanced (sizes differ by at most one);
- one more: an (N+1)th consumer subscribes; the clock stops when the assignment is balanced
  again over N+1 members. Also counted: how many of the first N members had no partition
  for a moment during that rebalance (the classic eager protocol revokes everything).

Both protocols get the same heartbeat interval (500 ms: the classic client's
heartbeat.interval.ms and the broker's group.consumer.heartbeat.interval.ms) and no initial
rebalance delay. The broker is a fresh process on a free loopback port with its data in a
temporary directory, stopped by PID at the end.

Each measurement is repeated (`--repeat`, 3 by default, each time with a new group) and the
median is reported.

    python -m bench.consumer_groups [--sizes 2,4,8] [--partitions 24] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

TIMEOUT = 120.0
HEARTBEAT_MS = 500
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "10000",
}


def consumer(bootstrap: str, group: str, protocol: str) -> Consumer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config["heartbeat.interval.ms"] = HEARTBEAT_MS
        config["session.timeout.ms"] = 10_000
    return Consumer(config)


def balanced(members: list[Consumer], partitions: int) -> bool:
    sets = [{p.partition for p in c.assignment()} for c in members]
    sizes = [len(s) for s in sets]
    union = set().union(*sets)
    return (
        sum(sizes) == partitions == len(union) and max(sizes) - min(sizes) <= 1 and min(sizes) > 0
    )


def wait_balanced(members: list[Consumer], partitions: int, watch: int = 0) -> tuple[float, int]:
    """Seconds until balanced, and how many of the first `watch` members were seen with no
    partition meanwhile."""
    started = time.monotonic()
    emptied: set[int] = set()
    while time.monotonic() - started < TIMEOUT:
        for c in members:
            c.poll(0.005)
        for index in range(watch):
            if not members[index].assignment():
                emptied.add(index)
        if balanced(members, partitions):
            return time.monotonic() - started, len(emptied)
    raise RuntimeError(f"not balanced after {TIMEOUT:.0f} s")


def run(
    bootstrap: str, protocol: str, size: int, topic: str, partitions: int, attempt: int
) -> dict[str, float]:
    group = f"bench-{protocol}-{size}-{attempt}"
    members = [consumer(bootstrap, group, protocol) for _ in range(size)]
    try:
        started = time.monotonic()
        for c in members:
            c.subscribe([topic])
        join, _ = wait_balanced(members, partitions)
        join = time.monotonic() - started
        members.append(consumer(bootstrap, group, protocol))
        members[-1].subscribe([topic])
        one_more, emptied = wait_balanced(members, partitions, watch=size)
        return {"join": join, "one_more": one_more, "emptied": emptied}
    finally:
        for c in members:
            c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,4,8")
    parser.add_argument("--partitions", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-groups-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", SETTINGS).start()
        try:
            topic = "bench-groups"
            create_topic(broker.bootstrap, topic, args.partitions)
            rows = []
            for size in sizes:
                for protocol in ("classic", "consumer"):
                    runs = [
                        run(broker.bootstrap, protocol, size, topic, args.partitions, attempt)
                        for attempt in range(args.repeat)
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


if __name__ == "__main__":
    main()
