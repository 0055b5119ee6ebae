"""Hot-path cost: the broker's CPU time per Produce and per Fetch request, for one or more
source trees of lockgate compared side by side (a change's before and after).

The client is this tree's own connection, pipelining requests it builds once: Produce (acks
all, three partitions, one uncompressed batch of 10 × 100 B records each) and Fetch (the same
three partitions, 64 KiB each, at offsets that walk the log). The figure is the broker
process's user+system CPU seconds per 10,000 requests (psutil, read before and after the
phase): what the request path costs the broker, whatever the client's or the machine's speed.
Each round starts every tree's broker fresh (page-cache durability: no fsync to wait on), in
an order that alternates between rounds, so drift on a shared machine hits every tree alike.

    python -m bench.hot_path --tree new=src --tree base=../base/src [--rounds 6]
                             [--requests 20000] [--json PATH]

With two trees it prints, per phase, the median over rounds and the ratio of the first tree's
median CPU to each other's (above 1: the first tree costs less).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench.throughput import stop_process
from bench.transactions import wait_for_port
from lockgate.client.connection import BrokerConnection
from lockgate.protocol.api import ApiKey
from lockgate.protocol.records import build_batch
from lockgate.tools.devcluster import free_port

TOPIC = "hot-path"
PARTITIONS = 3
RECORDS_PER_BATCH = 10
VALUE = b"v" * 100
WINDOW = 64  # requests in flight on the one connection
FETCH_PARTITION_BYTES = 64 * 1024
PER = 10_000  # the figure is CPU seconds per this many requests


def broker_command(port: int, data_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lockgate.cli",
        "serve",
        "--data-dir",
        str(data_dir),
        "--listen",
        f"127.0.0.1:{port}",
        "--log-level",
        "WARNING",
        "--set",
        "lockgate.durability=page-cache",
    ]


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def pipelined(
    connection: BrokerConnection,
    bodies: list[dict[str, Any]],
    key: int,
    version: int,
    errors: Callable[[Any], set[int]],
) -> set[int]:
    """Sends every body with at most WINDOW in flight; the error codes of the responses (each
    response is dropped once read: a phase's fetched data would not fit in memory)."""
    slots = asyncio.Semaphore(WINDOW)
    seen: set[int] = set()

    async def one(body: dict[str, Any]) -> None:
        async with slots:
            seen.update(errors(await connection.request(key, body, version=version)))

    await asyncio.gather(*(one(body) for body in bodies))
    return seen


def produce_errors(answer: Any) -> set[int]:
    return {p.error_code for t in answer.responses for p in t.partition_responses}


def fetch_errors(answer: Any) -> set[int]:
    return {answer.error_code} | {p.error_code for t in answer.responses for p in t.partitions}


def produce_body() -> dict[str, Any]:
    batch = build_batch([(None, VALUE)] * RECORDS_PER_BATCH)
    partitions = [{"index": i, "records": batch} for i in range(PARTITIONS)]
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 30_000,
        "topic_data": [{"name": TOPIC, "partition_data": partitions}],
    }


def fetch_body(offset: int) -> dict[str, Any]:
    partitions = [
        {
            "partition": i,
            "current_leader_epoch": -1,
            "fetch_offset": offset,
            "last_fetched_epoch": -1,
            "log_start_offset": -1,
            "partition_max_bytes": FETCH_PARTITION_BYTES,
        }
        for i in range(PARTITIONS)
    ]
    return {
        "cluster_id": None,
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 0,
        "max_bytes": 50 * 2**20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": TOPIC, "partitions": partitions}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


async def measure(port: int, process: psutil.Process, requests: int) -> dict[str, float]:
    connection = BrokerConnection("127.0.0.1", port)
    await connection.connect()
    try:
        created = await connection.request(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": TOPIC,
                        "num_partitions": PARTITIONS,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 30_000,
                "validate_only": False,
            },
        )
        assert created.topics[0].error_code == 0, created
        produce_version = connection.version_for(ApiKey.PRODUCE, max_version=12)
        fetch_version = connection.version_for(ApiKey.FETCH, max_version=12)
        body = produce_body()
        warm_up = [body] * 200
        await pipelined(connection, warm_up, ApiKey.PRODUCE, produce_version, produce_errors)
        before = cpu_seconds(process)
        errors = await pipelined(
            connection, [body] * requests, ApiKey.PRODUCE, produce_version, produce_errors
        )
        produce = cpu_seconds(process) - before
        assert errors == {0}, errors
        end = (requests + 200) * RECORDS_PER_BATCH
        # offsets spread over the log, about 50 batches (60 KiB) apart: every fetch reads data
        step = RECORDS_PER_BATCH * 50
        bodies = [fetch_body((i * step) % (end - step)) for i in range(requests)]
        await pipelined(connection, bodies[:200], ApiKey.FETCH, fetch_version, fetch_errors)
        before = cpu_seconds(process)
        errors = await pipelined(connection, bodies, ApiKey.FETCH, fetch_version, fetch_errors)
        fetch = cpu_seconds(process) - before
        assert errors == {0}, errors
        return {"produce": produce * PER / requests, "fetch": fetch * PER / requests}
    finally:
        await connection.close()


def run_tree(source: Path, requests: int, scratch: Path) -> dict[str, float]:
    port = free_port()
    environment = {**os.environ, "PYTHONPATH": str(source.resolve())}
    with tempfile.TemporaryDirectory(dir=scratch) as data_dir:
        process = subprocess.Popen(
            broker_command(port, Path(data_dir)), env=environment, stdin=subprocess.DEVNULL
        )
        try:
            wait_for_port(port, process)
            return asyncio.run(measure(port, psutil.Process(process.pid), requests))
        finally:
            stop_process(process)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tree",
        action="append",
        required=True,
        metavar="LABEL=SRC",
        help="a source tree of lockgate (the directory holding lockgate/)",
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.tree)
    labels = list(trees)
    results: dict[str, list[dict[str, float]]] = {label: [] for label in labels}
    with tempfile.TemporaryDirectory(prefix="bench-hot-path-") as scratch:
        for round_index in range(args.rounds):
            order = labels if round_index % 2 == 0 else labels[::-1]
            for label in order:
                figures = run_tree(Path(trees[label]), args.requests, Path(scratch))
                results[label].append(figures)
                print(
                    f"round {round_index + 1} {label}: produce {figures['produce']:.3f} s, "
                    f"fetch {figures['fetch']:.3f} s per {PER:,} requests",
                    flush=True,
                )
    summary: dict[str, dict[str, float]] = {}
    print(f"\nbroker CPU seconds per {PER:,} requests, median of {args.rounds} rounds")
    for phase in ("produce", "fetch"):
        medians = {label: statistics.median(r[phase] for r in results[label]) for label in labels}
        summary[phase] = medians
        line = ", ".join(f"{label} {value:.3f}" for label, value in medians.items())
        ratios = ", ".join(
            f"{medians[other] / medians[labels[0]]:.3f} vs {other}" for other in labels[1:]
        )
        print(f"{phase}: {line}" + (f"; {labels[0]} speed ratio {ratios}" if ratios else ""))
    if args.json:
        args.json.write_text(json.dumps({"rounds": results, "medians": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
