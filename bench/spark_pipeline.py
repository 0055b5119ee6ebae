"""Spark pipeline benchmark: rows per second of the example pipeline (lockgate.spark.pipeline:
orders read with the lockgate source, enriched, written back) with the exactly-once sink
(KIP-939 two-phase commit per micro-batch) against the same pipeline with the at-least-once
sink (`delivery.guarantee=at_least_once`: one idempotent producer per task, no transaction),
in one run, on one broker and one local Spark session.

Each round runs both sinks, in alternating order, over the same input from a fresh checkpoint
with Trigger.AvailableNow and maxOffsetsPerTrigger, so both cut the input into the same
micro-batches. The clock runs from start() to the query's termination; the output of every
run is read back (read_committed) and must hold every input row exactly once for the
exactly-once sink, at least once for the other. Untimed warm-up queries (two micro-batches
with each sink) first start Spark's Python workers and warm the code paths, so that neither
sink pays for that in its first round.

    python -m bench.spark_pipeline [--rows 100000] [--per-trigger 10000] [--partitions 3]
                                   [--rounds 2] [--master local[2]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.spark.pipeline import build_query, session

SINKS = {"exactly-once": "exactly_once", "at-least-once": "at_least_once"}


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    bootstrap = f"127.0.0.1:{port}"
    log = open(data_dir.parent / "broker.log", "ab")  # noqa: SIM115 - handed to the child
    broker = subprocess.Popen(
        [sys.executable, "-m", "lockgate.cli", "serve", "--data-dir", str(data_dir),
         "--listen", bootstrap, "--set", "transaction.two.phase.commit.enable=true"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return broker, bootstrap
        except OSError:
            time.sleep(0.1)
    broker.kill()
    raise RuntimeError("the broker did not start")


async def feed(bootstrap: str, topic: str, rows: int, partitions: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions)
    async with Producer(bootstrap, transactional_id=f"bench-feed-{topic}", linger_ms=10) as p:
        await p.init_transactions()
        for start in range(0, rows, 10_000):
            p.begin_transaction()
            for i in range(start, min(start + 10_000, rows)):
                order = {"id": i, "customer": f"c{i % 101}", "amount_cents": (i * 37) % 20000}
                await p.send(topic, json.dumps(order).encode(), f"c{i % 101}".encode())
            await p.commit_transaction()


async def count_ids(bootstrap: str, topic: str, partitions: int) -> tuple[int, int]:
    """(records, distinct order ids) of `topic` under read_committed."""
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    ids: set[int] = set()
    records = 0
    async with Consumer(
        bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=8 << 20
    ) as c:
        c.assign(wanted)
        ends = await c.end_offsets(wanted)
        deadline = time.monotonic() + 300
        while any([await c.position(tp) < ends[tp] for tp in wanted]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} back took too long")
            for message in await c.poll(500):
                records += 1
                ids.add(int(json.loads(message.value or b"{}")["id"]))
    return records, len(ids)


def run_query(
    spark: Any,
    bootstrap: str,
    source: str,
    target: str,
    work: Path,
    per_trigger: int,
    sink: str,
    partitions: int,
) -> float:
    asyncio.run(_create(bootstrap, target, partitions))
    started = time.perf_counter()
    query = build_query(
        spark,
        bootstrap,
        source,
        target,
        str(work / f"checkpoint-{target}"),
        max_offsets_per_trigger=per_trigger,
        sink_options={"delivery.guarantee": sink},
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"the {sink} query failed: {query.exception()}")
    return elapsed


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--per-trigger", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lockgate-bench-spark-"))
    broker, bootstrap = start_broker(work / "data")
    spark = None
    try:
        print(f"broker {bootstrap}; feeding {args.rows} orders over {args.partitions} partitions")
        asyncio.run(feed(bootstrap, "orders", args.rows, args.partitions))
        # Read the input once untimed: the first reader of a log pays for it coming off disk,
        # which would land on whichever sink runs first.
        assert asyncio.run(count_ids(bootstrap, "orders", args.partitions)) == (args.rows,) * 2
        warmup = min(args.rows, 2 * args.per_trigger)
        asyncio.run(feed(bootstrap, "warmup", warmup, args.partitions))
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = session("lockgate-bench", args.master)
        for guarantee in SINKS.values():  # untimed: Python workers, imports, JVM code paths
            run_query(
                spark,
                bootstrap,
                "warmup",
                f"warmup-{guarantee}",
                work,
                args.per_trigger,
                guarantee,
                args.partitions,
            )
        times: dict[str, list[float]] = {name: [] for name in SINKS}
        for round_number in range(args.rounds):
            order = list(SINKS) if round_number % 2 == 0 else list(reversed(SINKS))
            for name in order:
                target = f"out-{SINKS[name]}-{round_number}"
                elapsed = run_query(
                    spark,
                    bootstrap,
                    "orders",
                    target,
                    work,
                    args.per_trigger,
                    SINKS[name],
                    args.partitions,
                )
                records, distinct = asyncio.run(count_ids(bootstrap, target, args.partitions))
                if distinct != args.rows or (name == "exactly-once" and records != args.rows):
                    raise AssertionError(f"{name}: {records} records, {distinct} distinct ids")
                times[name].append(elapsed)
                print(
                    f"round {round_number + 1} {name:>13}: {elapsed:6.2f} s "
                    f"{args.rows / elapsed:9,.0f} rows/s ({records} records, {distinct} ids)"
                )
        batches = -(-args.rows // args.per_trigger)
        print()
        print(
            f"{args.rows:,} rows, {batches} micro-batches of at most {args.per_trigger:,}, "
            f"{args.partitions} partitions, master {args.master}, Python "
            f"{platform.python_version()}, {os.cpu_count()} CPUs"
        )
        print(f"{'sink':>13}  {'best rows/s':>12}  {'median s':>9}")
        for name, runs in times.items():
            print(f"{name:>13}  {args.rows / min(runs):12,.0f}  {statistics.median(runs):9.2f}")
        ratio = statistics.median(times["exactly-once"]) / statistics.median(times["at-least-once"])
        print(f"exactly-once costs {ratio:.2f}x the at-least-once time (median)")
    finally:
        if spark is not None:
            spark.stop()
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
