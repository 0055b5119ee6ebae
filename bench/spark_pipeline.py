"""Spark pipeline benchmark: rows per second of the example pipeline (lockgate.spark.pipeline:
orders read, enriched, written back) with lockgate's exactly-once sink (KIP-939 two-phase commit
per micro-batch), its at-least-once sink (`delivery.guarantee=at_least_once`: one idempotent
producer per task, no transaction), and with Spark's own Kafka connector (`format("kafka")`,
spark-sql-kafka-0-10, at least once) as the source, the sink or both, in one run, on one broker
and one local Spark session.

Each round runs every pipeline, in a rotating order, over the same input from a fresh
checkpoint with Trigger.AvailableNow and maxOffsetsPerTrigger, so all cut the input into the
same micro-batches. The clock runs from start() to the query's termination; the output of
every run is read back (read_committed) and must hold every input row exactly once for the
exactly-once sink, at least once for the others. Untimed warm-up queries (two micro-batches
with each pipeline) first start Spark's Python workers and warm the code paths, so that no
pipeline pays for that in its first round. Spark's connector comes from `make reference-deps`;
without it only lockgate's pipelines run.

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
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.spark.pipeline import build_query, session
from lockgate.tools.devcluster import free_port, stop_process
from tests.support.reference_kafka import spark_kafka_jars


@dataclass(frozen=True)
class Pipeline:
    name: str
    source_format: str
    sink_format: str
    guarantee: str = "at_least_once"  # of lockgate's sink (Spark's is at least once)

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly_once"

    @property
    def uses_spark_kafka(self) -> bool:
        return "kafka" in (self.source_format, self.sink_format)


PIPELINES = [
    Pipeline("lockgate -> lockgate exactly-once", "lockgate", "lockgate", "exactly_once"),
    Pipeline("lockgate -> lockgate at-least-once", "lockgate", "lockgate"),
    Pipeline("kafka -> lockgate exactly-once", "kafka", "lockgate", "exactly_once"),
    Pipeline("lockgate -> kafka", "lockgate", "kafka"),
    Pipeline("kafka -> kafka", "kafka", "kafka"),
]


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
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
    pipeline: Pipeline,
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
        source_format=pipeline.source_format,
        sink_format=pipeline.sink_format,
        sink_options={"delivery.guarantee": pipeline.guarantee},
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{pipeline.name} failed: {query.exception()}")
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
        jars = spark_kafka_jars()
        pipelines = [p for p in PIPELINES if jars or not p.uses_spark_kafka]
        if not jars:
            print("Spark's Kafka connector is not resolved (make reference-deps): lockgate only")
        spark = session("lockgate-bench", args.master, jars=jars)
        for number, pipeline in enumerate(pipelines):  # untimed: workers, imports, JVM paths
            run_query(
                spark,
                bootstrap,
                "warmup",
                f"warmup-{number}",
                work,
                args.per_trigger,
                pipeline,
                args.partitions,
            )
        times: dict[str, list[float]] = {p.name: [] for p in pipelines}
        for round_number in range(args.rounds):
            shift = round_number % len(pipelines)
            for pipeline in pipelines[shift:] + pipelines[:shift]:
                target = f"out-{PIPELINES.index(pipeline)}-{round_number}"
                elapsed = run_query(
                    spark,
                    bootstrap,
                    "orders",
                    target,
                    work,
                    args.per_trigger,
                    pipeline,
                    args.partitions,
                )
                records, distinct = asyncio.run(count_ids(bootstrap, target, args.partitions))
                if distinct != args.rows or (pipeline.exactly_once and records != args.rows):
                    raise AssertionError(f"{pipeline.name}: {records} records, {distinct} ids")
                times[pipeline.name].append(elapsed)
                print(
                    f"round {round_number + 1} {pipeline.name:>34}: {elapsed:6.2f} s "
                    f"{args.rows / elapsed:9,.0f} rows/s ({records} records, {distinct} ids)"
                )
        batches = -(-args.rows // args.per_trigger)
        print()
        print(
            f"{args.rows:,} rows, {batches} micro-batches of at most {args.per_trigger:,}, "
            f"{args.partitions} partitions, master {args.master}, Python "
            f"{platform.python_version()}, {os.cpu_count()} CPUs"
        )
        # The anchor: Spark's own (at-least-once) sink behind lockgate's source, if it ran.
        anchor_name = PIPELINES[3].name if PIPELINES[3].name in times else PIPELINES[1].name
        anchor = statistics.median(times[anchor_name])
        print(f"time relative to {anchor_name!r} (median)")
        print(f"{'pipeline':>34}  {'best rows/s':>12}  {'median s':>9}  {'ratio':>6}")
        for name, runs in times.items():
            median = statistics.median(runs)
            print(
                f"{name:>34}  {args.rows / min(runs):12,.0f}  {median:9.2f}  {median / anchor:6.2f}"
            )
    finally:
        if spark is not None:
            spark.stop()
        stop_process(broker)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
