"""Producer throughput of lockgate's own client against confluent-kafka (librdkafka), both
writing to the same lockgate broker (page-cache durability, started fresh on a loopback port),
alternating in one run so that both see the same machine.

Both producers are idempotent, acks=all, linger 5 ms, batch size 1,000,000 bytes (both
clients' default, set explicitly), write N values of each size to a 3-partition topic with keys
spread over the partitions, and count until every delivery is acknowledged. Reported:
messages/s per client and size, and lockgate ÷ confluent-kafka.

Each size runs twice: one call per record (send / produce), then calls of 1,000 records
(send_batch / produce_batch). lockgate's producer runs with the implementation it would pick
(the compiled fast path when built); --pure adds a run of its pure-Python twin
(LOCKGATE_PURE_PYTHON=1) to each round. Python's garbage collector keeps its defaults.

    python -m bench.client [--messages N] [--sizes 100,1024] [--rounds R] [--pure] [--json PATH]
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
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.transactions import wait_for_port
from lockgate.client.fastpath import PURE_PYTHON_VARIABLE
from lockgate.client.producer import Producer
from lockgate.tools.devcluster import free_port

PARTITIONS = 3
BATCH_SIZE = 1_000_000
CALL_SIZE = 1_000  # records per produce_batch() / send_batch() call


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "lockgate.cli", "serve", "--data-dir", str(data_dir)]
    command += ["--listen", f"127.0.0.1:{port}", "--log-level", "WARNING"]
    command += ["--set", "lockgate.durability=page-cache"]
    process = subprocess.Popen(command)
    wait_for_port(port, process)
    return process, f"127.0.0.1:{port}"


def create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)


def run_confluent(bootstrap: str, topic: str, count: int, size: int, batched: bool) -> float:
    producer = ConfluentProducer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": BATCH_SIZE,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"x" * size
    keys = [str(i).encode() for i in range(1024)]
    producer.produce(topic, value, keys[0])  # metadata and producer id first, as for ours
    producer.flush(30)
    messages = [{"key": keys[i % 1024], "value": value} for i in range(count)] if batched else []
    start = time.perf_counter()
    if batched:
        for first in range(0, count, CALL_SIZE):
            chunk = messages[first : first + CALL_SIZE]
            if producer.produce_batch(topic, chunk) != len(chunk):
                raise RuntimeError("confluent-kafka's queue refused part of a batch")
    else:
        for i in range(count):
            while True:
                try:
                    producer.produce(topic, value, keys[i % 1024])
                    break
                except BufferError:
                    producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError("confluent-kafka did not deliver everything")
    return count / (time.perf_counter() - start)


async def run_lockgate(
    bootstrap: str, topic: str, count: int, size: int, batched: bool, pure: bool
) -> float:
    value = b"x" * size
    keys = [str(i).encode() for i in range(1024)]
    records = [(keys[i % 1024], value) for i in range(count)] if batched else []
    os.environ[PURE_PYTHON_VARIABLE] = "1" if pure else "0"  # read when a producer is built
    async with Producer(bootstrap, linger_ms=5, acks=-1, batch_size=BATCH_SIZE) as producer:
        assert (producer.implementation == "pure") == pure
        await producer.send_and_wait(topic, value, keys[0])  # metadata and producer id first
        start = time.perf_counter()
        if batched:
            for first in range(0, count, CALL_SIZE):
                await producer.send_batch(topic, records[first : first + CALL_SIZE])
        else:
            for i in range(count):
                await producer.send(topic, value, keys[i % 1024])
        await producer.flush()
        return count / (time.perf_counter() - start)


def compare(
    bootstrap: str, size: int, batched: bool, count: int, rounds: int, pure: bool
) -> dict[str, float]:
    """Alternating rounds of the clients: per-record calls (send / produce) or calls of
    CALL_SIZE records (send_batch / produce_batch)."""
    api = "batch calls" if batched else "record calls"
    clients = ["confluent-kafka", "lockgate"] + (["lockgate-pure"] if pure else [])
    rates: dict[str, list[float]] = {client: [] for client in clients}
    for round_number in range(rounds):
        for client in clients:
            topic = f"bench-client-{size}-{client}-{int(batched)}-{round_number}"
            create_topic(bootstrap, topic)
            if client.startswith("lockgate"):
                rate = asyncio.run(
                    run_lockgate(bootstrap, topic, count, size, batched, client == "lockgate-pure")
                )
            else:
                rate = run_confluent(bootstrap, topic, count, size, batched)
            rates[client].append(rate)
            print(f"{size:>5} B  {api}  {client:<16} round {round_number}: {rate:>10,.0f} msg/s")
    theirs = statistics.median(rates["confluent-kafka"])
    result = {"confluent_kafka_msg_per_s": theirs}
    for client in clients[1:]:
        ours = statistics.median(rates[client])
        name = client.replace("-", "_")
        result |= {f"{name}_msg_per_s": ours, f"{name}_ratio": ours / theirs}
        print(
            f"{size:>5} B  {api}  median {client} {ours:,.0f} msg/s, confluent-kafka "
            f"{theirs:,.0f} msg/s: ratio {ours / theirs:.2f}"
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pure", action="store_true", help="also run the pure-Python twin")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-client-") as scratch:
        process, bootstrap = start_broker(Path(scratch) / "data")
        try:
            for size in sizes:
                for batched in (False, True):
                    results[f"{size}{' batch' if batched else ''}"] = compare(
                        bootstrap, size, batched, options.messages, options.rounds, options.pure
                    )
        finally:
            process.terminate()
            process.wait(30)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
