"""Produce throughput with compression.type=producer against a forced recompression.

One lockgate broker (page-cache durability, so fsync does not hide the request path) on a free
loopback port. Round by round, alternating the order, one confluent-kafka producer (gzip,
idempotent, acks=all, linger.ms=10) writes N values of 100 bytes (a run of text, compressible
like log lines) into a fresh 1-partition topic of each kind:

- `producer`: stored as sent (the default);
- `zstd`: every gzip batch is decompressed and compressed again with zstd on the broker;
- `uncompressed`: every batch is decompressed and stored as it is.

It prints the median msg/s of each kind and its ratio to `producer`, the broker's CPU seconds
per million messages, and then, in this process, the cost of recompress() for one 1 MB batch.

    python -m bench.compression [--messages N] [--rounds R]
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.transactions import wait_for_port
from lockgate.protocol.recompress import recompress
from lockgate.protocol.records import build_batch, compress, encode_record
from lockgate.tools.devcluster import free_port

KINDS = ("producer", "zstd", "uncompressed")


def value(i: int) -> bytes:
    return (b"2026-11-26 request %08d served from cache in 3 ms by worker " % i).ljust(100, b".")


def produce(bootstrap: str, topic: str, count: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "gzip",
            "enable.idempotence": True,
            "linger.ms": 10,
            "batch.size": 1_000_000,
        }
    )
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value(i), partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lockgate-bench-compression-"))
    port = free_port()
    command = [sys.executable, "-m", "lockgate.cli", "serve", "--data-dir", str(root / "data"),
               "--listen", f"127.0.0.1:{port}", "--log-level", "WARNING",
               "--set", "lockgate.durability=page-cache",
               "--set", "transaction.state.log.num.partitions=1",
               "--set", "offsets.topic.num.partitions=1"]  # fmt: skip
    process = subprocess.Popen(command)
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_for_port(port, process)
        broker = psutil.Process(process.pid)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
        cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for round_number in range(args.rounds):
            order = KINDS if round_number % 2 == 0 else tuple(reversed(KINDS))
            for kind in order:
                topic = f"bench-{kind}-{round_number}"
                futures = admin.create_topics(
                    [NewTopic(topic, 1, 1, config={"compression.type": kind})]
                )
                for future in futures.values():
                    future.result(timeout=30)
                before = sum(broker.cpu_times()[:2])
                rates[kind].append(produce(bootstrap, topic, args.messages))
                cpu[kind].append((sum(broker.cpu_times()[:2]) - before) / args.messages * 1_000_000)
        del admin  # its connections close before the broker stops
        base = statistics.median(rates["producer"])
        print(f"{args.messages:,} messages of 100 B, gzip from the producer, {args.rounds} rounds")
        print(f"{'compression.type':<18}{'msg/s':>12}{'ratio':>8}{'broker CPU s/M msg':>22}")
        for kind in KINDS:
            rate = statistics.median(rates[kind])
            print(
                f"{kind:<18}{rate:>12,.0f}{rate / base:>8.2f}{statistics.median(cpu[kind]):>22.2f}"
            )
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    body = b"".join(encode_record(i, 0, None, value(i)) for i in range(10_000))
    batch = build_batch([], encoded=compress(1, body), record_count=10_000, attributes=1)
    for codec, name in ((4, "zstd"), (0, "uncompressed"), (3, "lz4")):
        once = functools.partial(recompress, batch, codec)
        seconds = min(timeit.repeat(once, number=5, repeat=3)) / 5
        print(
            f"recompress() gzip -> {name}: {seconds * 1000:.1f} ms per batch of 10,000 records "
            f"({len(body) / seconds / 1e6:.0f} MB/s of records)"
        )


if __name__ == "__main__":
    main()
