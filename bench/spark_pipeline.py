"""Spark pipeline benchmark: lockgate's Spark source and sinks against Spark's own Kafka
connector (`format("kafka")`, spark-sql-kafka-0-10) on the same broker, in one run.

The sources alone: each source into Spark's `noop` sink (every column of every row read, nothing
written). The example pipeline (lockgate.spark.pipeline: orders read, enriched, written back)
with lockgate's exactly-once sink (KIP-939 two-phase commit per micro-batch), its at-least-once
sink (`delivery.guarantee=at_least_once`: one idempotent producer per task, no transaction) and
Spark's sink (at least once), behind either source. One broker, one local Spark session.

Each round runs every pipeline, in a rotating order, over the same input from a fresh
checkpoint with Trigger.AvailableNow and maxOffsetsPerTrigger, so all cut the input into the
same micro-batches. The clock runs from start() to the query's termination; a source-only query
must have read every row, and the output of every pipeline is read back (read_committed) and
must hold every input row exactly once for the exactly-once sink, at least once for the others.
Untimed warm-up queries (two micro-batches with each pipeline) first start Spark's Python
workers and warm the code paths, so that no pipeline pays for that in its first round. Spark's
connector comes from `make reference-deps`; without it only lockgate's pipelines run.

    python -m bench.spark_pipeline [--rows 1000000] [--per-trigger ROWS/10] [--partitions 3]
                                   [--rounds 2] [--master local[2]] [--pipelines KEY,...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
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
from lockgate.client.columns import IMPLEMENTATION, ColumnDecoder
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.spark.pipeline import build_query, session
from lockgate.tools.devcluster import free_port, stop_process
from tests.support.reference_kafka import spark_kafka_jars


@dataclass(frozen=True)
class Pipeline:
    key: str
    name: str
    source_format: str
    sink_format: str  # "lockgate", "kafka", or "noop": the source alone
    guarantee: str = "at_least_once"  # of lockgate's sink (Spark's is at least once)

    @property
    def exactly_once(self) -> bool:
        return self.sink_format == "lockgate" and self.guarantee == "exactly_once"

    @property
    def uses_spark_kafka(self) -> bool:
        return "kafka" in (self.source_format, self.sink_format)


PIPELINES = [
    Pipeline("lockgate-noop", "lockgate source -> noop", "lockgate", "noop"),
    Pipeline("kafka-noop", "kafka source -> noop", "kafka", "noop"),
    Pipeline("lockgate-eos", "lockgate -> lockgate exactly-once", "lockgate", "lockgate",
             "exactly_once"),
    Pipeline("lockgate-alo", "lockgate -> lockgate at-least-once", "lockgate", "lockgate"),
    Pipeline("lockgate-kafka", "lockgate -> kafka", "lockgate", "kafka"),
    Pipeline("kafka-eos", "kafka -> lockgate exactly-once", "kafka", "lockgate", "exactly_once"),
    Pipeline("kafka-kafka", "kafka -> kafka", "kafka", "kafka"),
]  # fmt: skip
BY_KEY = {p.key: p for p in PIPELINES}
# The comparisons printed at the end: (what, numerator pipeline, denominator pipeline, goal)
RATIOS = [
    ("source rows/s: lockgate / Spark's (into noop)", "kafka-noop", "lockgate-noop", ">= 1"),
    ("source rows/s: lockgate / Spark's (into Spark's sink)", "kafka-kafka", "lockgate-kafka",
     ">= 1"),
    ("time: exactly-once sink / Spark's sink (Spark's source)", "kafka-eos", "kafka-kafka",
     "<= 1.1"),
    ("time: exactly-once sink / Spark's sink (lockgate's source)", "lockgate-eos",
     "lockgate-kafka", "<= 1.1"),
    ("time: exactly-once / at-least-once lockgate sink", "lockgate-eos", "lockgate-alo", ""),
]  # fmt: skip
ID = re.compile(rb'"id": ?(\d+)')


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
    """`rows` JSON orders keyed by customer, in committed transactions of 50,000."""
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions)
    async with Producer(bootstrap, transactional_id=f"bench-feed-{topic}", linger_ms=10) as p:
        await p.init_transactions()
        for start in range(0, rows, 50_000):
            p.begin_transaction()
            records = []
            for i in range(start, min(start + 50_000, rows)):
                order = {"id": i, "customer": f"c{i % 101}", "amount_cents": (i * 37) % 20000}
                records.append((f"c{i % 101}".encode(), json.dumps(order).encode()))
            await p.send_batch(topic, records)
            await p.commit_transaction()


async def count_ids(bootstrap: str, topic: str, partitions: int, rows: int) -> tuple[int, int]:
    """(records, distinct order ids 0..rows-1) of `topic` under read_committed, read in bulk
    (the Fetch columns' value buffers scanned for the ids)."""
    seen = bytearray(rows)
    records = 0
    for partition in range(partitions):
        tp = TopicPartition(topic, partition)
        decoder = ColumnDecoder(2**63 - 1)
        async with Consumer(
            bootstrap,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 << 20,
            decoder=decoder,
        ) as consumer:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            deadline = time.monotonic() + 600
            while True:
                done = await consumer.position(tp) >= end
                if done or decoder.builder.size >= 64 << 20:
                    columns = decoder.take()
                    ids = ID.findall(columns.value_data)
                    if len(ids) != columns.rows:
                        raise AssertionError(f"{topic}: a record without an order id")
                    records += columns.rows
                    for order in map(int, ids):
                        seen[order] = 1  # IndexError: an id that was never fed
                if done:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic} back took too long")
                await consumer.poll(500)
    return records, rows - seen.count(0)


def run_query(
    spark: Any,
    bootstrap: str,
    source: str,
    target: str,
    work: Path,
    per_trigger: int,
    pipeline: Pipeline,
    partitions: int,
) -> tuple[float, int]:
    """(seconds from start() to termination, input rows the query reported)."""
    checkpoint = str(work / f"checkpoint-{target}")
    if pipeline.sink_format == "noop":
        reader = (
            spark.readStream.format(pipeline.source_format)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("maxOffsetsPerTrigger", str(per_trigger))
        )
        started = time.perf_counter()
        query = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    else:
        asyncio.run(_create(bootstrap, target, partitions))
        started = time.perf_counter()
        query = build_query(
            spark,
            bootstrap,
            source,
            target,
            checkpoint,
            max_offsets_per_trigger=per_trigger,
            source_format=pipeline.source_format,
            sink_format=pipeline.sink_format,
            sink_options={"delivery.guarantee": pipeline.guarantee},
        )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{pipeline.name} failed: {query.exception()}")
    return elapsed, sum(int(p["numInputRows"]) for p in query.recentProgress)


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, partitions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-trigger", type=int, help="maxOffsetsPerTrigger (default rows/10)")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--pipelines",
        default=",".join(BY_KEY),
        help=f"comma-separated, of: {', '.join(BY_KEY)}",
    )
    args = parser.parse_args()
    per_trigger = args.per_trigger or max(1, args.rows // 10)
    chosen = [BY_KEY[key] for key in args.pipelines.split(",")]
    work = Path(tempfile.mkdtemp(prefix="lockgate-bench-spark-"))
    broker, bootstrap = start_broker(work / "data")
    spark = None
    try:
        print(f"broker {bootstrap}; feeding {args.rows:,} orders over {args.partitions} partitions")
        fed = time.perf_counter()
        asyncio.run(feed(bootstrap, "orders", args.rows, args.partitions))
        print(f"fed in {time.perf_counter() - fed:.1f} s")
        # Read the input once untimed: the first reader of a log pays for it coming off disk,
        # which would land on whichever pipeline runs first.
        counted = asyncio.run(count_ids(bootstrap, "orders", args.partitions, args.rows))
        assert counted == (args.rows,) * 2, counted
        warmup = min(args.rows, 2 * min(per_trigger, 10_000))
        asyncio.run(feed(bootstrap, "warmup", warmup, args.partitions))
        os.environ["PYSPARK_PYTHON"] = sys.executable
        jars = spark_kafka_jars()
        pipelines = [p for p in chosen if jars or not p.uses_spark_kafka]
        if not jars:
            print("Spark's Kafka connector is not resolved (make reference-deps): lockgate only")
        spark = session("lockgate-bench", args.master, jars=jars)
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        for number, pipeline in enumerate(pipelines):  # untimed: workers, imports, JVM paths
            run_query(
                spark,
                bootstrap,
                "warmup",
                f"warmup-{number}",
                work,
                min(per_trigger, 10_000),
                pipeline,
                args.partitions,
            )
        times: dict[str, list[float]] = {p.key: [] for p in pipelines}
        for round_number in range(args.rounds):
            shift = round_number % len(pipelines)
            for pipeline in pipelines[shift:] + pipelines[:shift]:
                target = f"out-{pipeline.key}-{round_number}"
                elapsed, read = run_query(
                    spark,
                    bootstrap,
                    "orders",
                    target,
                    work,
                    per_trigger,
                    pipeline,
                    args.partitions,
                )
                if read != args.rows:
                    raise AssertionError(f"{pipeline.name}: read {read} rows of {args.rows}")
                if pipeline.sink_format == "noop":
                    check = f"({read:,} rows read)"
                else:
                    records, distinct = asyncio.run(
                        count_ids(bootstrap, target, args.partitions, args.rows)
                    )
                    if distinct != args.rows or (pipeline.exactly_once and records != args.rows):
                        raise AssertionError(f"{pipeline.name}: {records} records, {distinct} ids")
                    check = f"({records:,} records, {distinct:,} ids)"
                times[pipeline.key].append(elapsed)
                print(
                    f"round {round_number + 1} {pipeline.name:>34}: {elapsed:7.2f} s "
                    f"{args.rows / elapsed:10,.0f} rows/s {check}",
                    flush=True,
                )
        batches = -(-args.rows // per_trigger)
        print()
        print(
            f"{args.rows:,} rows, {batches} micro-batches of at most {per_trigger:,}, "
            f"{args.partitions} partitions, master {args.master}, Python "
            f"{platform.python_version()}, {os.cpu_count()} CPUs, decoder {IMPLEMENTATION}"
        )
        print(f"{'pipeline':>34}  {'median s':>9}  {'rows/s (median)':>16}  runs (s)")
        for key, runs in times.items():
            median = statistics.median(runs)
            print(
                f"{BY_KEY[key].name:>34}  {median:9.2f}  {args.rows / median:16,.0f}  "
                + " ".join(f"{run:.2f}" for run in runs)
            )
        print()
        for what, numerator, denominator, goal in RATIOS:
            if numerator in times and denominator in times:
                ratio = statistics.median(times[numerator]) / statistics.median(times[denominator])
                print(f"{what}: {ratio:.2f}" + (f" (goal {goal})" if goal else ""))
    finally:
        if spark is not None:
            spark.stop()
        stop_process(broker)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
