"""Metrics on against metrics off: what the Prometheus tallies cost the produce and fetch paths.

Two lockgate brokers run side by side in one invocation, page-cache durability (so fsync does
not hide the request path), each started fresh on a free loopback port: one with
`lockgate.metrics.port` set and scraped every second by a thread of this process (much more
often than Prometheus's usual 15 s, to count the scrapes' cost too), one with metrics off
(the hot-path hooks return at once). Round by round, alternating which broker goes first:

- batched: one confluent-kafka producer writes N 100-byte values (idempotent, acks=all,
  linger.ms=10, 1 MB batches) to a fresh 1-partition topic, then one consumer reads them back;
- request-bound: the same producer with linger.ms=0 and one record per batch
  (batch.num.messages=1) writes M values, so every record is its own Produce request.

Per workload it prints the median msg/s of each broker, on ÷ off, and the broker's CPU
seconds per million messages. Then it times, in this process, the hooks themselves against
prometheus_client's labels().inc()/observe() per call, and one scrape's rendering for brokers
holding 100 to 5,000 partitions.

    python -m bench.metrics [--messages N] [--requests M] [--rounds R]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.transactions import wait_for_port
from lockgate.tools.devcluster import free_port

VALUE = b"x" * 100
SCRAPE_EVERY_S = 1.0


class Broker:
    def __init__(self, name: str, metrics: bool, root: Path) -> None:
        self.name = name
        self.port = free_port()
        self.metrics_port = free_port() if metrics else -1
        command = [sys.executable, "-m", "lockgate.cli", "serve", "--data-dir",
                   str(root / name), "--listen", f"127.0.0.1:{self.port}", "--log-level",
                   "WARNING", "--set", "lockgate.durability=page-cache",
                   "--set", f"lockgate.metrics.port={self.metrics_port}",
                   "--set", "transaction.state.log.num.partitions=1",
                   "--set", "offsets.topic.num.partitions=1"]  # fmt: skip
        self.process = subprocess.Popen(command)
        wait_for_port(self.port, self.process)
        self.cpu = psutil.Process(self.process.pid)
        self.scrapes = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        times = self.cpu.cpu_times()
        return float(times.user + times.system)

    def scrape_loop(self, stop: threading.Event) -> None:
        while not stop.wait(SCRAPE_EVERY_S):
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10
            ) as answer:
                answer.read()
            self.scrapes += 1

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@contextlib.contextmanager
def brokers() -> Iterator[tuple[Broker, Broker]]:
    root = Path(tempfile.mkdtemp(prefix="lockgate-bench-metrics-"))
    started: list[Broker] = []
    stop = threading.Event()
    try:
        on = Broker("metrics-on", True, root)
        started.append(on)
        off = Broker("metrics-off", False, root)
        started.append(off)
        scraper = threading.Thread(target=on.scrape_loop, args=(stop,), daemon=True)
        scraper.start()
        yield on, off
    finally:
        stop.set()
        for broker in started:
            broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def create_topic(broker: Broker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)


def produce(broker: Broker, topic: str, count: int, per_request: bool) -> float:
    settings: dict[str, object] = {
        "bootstrap.servers": broker.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
    }
    if per_request:
        settings |= {"linger.ms": 0, "batch.num.messages": 1}
    else:
        settings |= {"linger.ms": 10, "batch.size": 1_000_000}
    producer = Producer(settings)
    producer.produce(topic, VALUE)  # connect and InitProducerId before the clock starts
    producer.flush(30)
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("messages left undelivered")
    return count / (time.perf_counter() - started)


def consume(broker: Broker, topic: str, count: int) -> float:
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "bench", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    started = time.perf_counter()
    seen = 0
    deadline = started + 120
    while seen < count + 1 and time.perf_counter() < deadline:
        batch = consumer.consume(10_000, 1.0)
        seen += sum(1 for message in batch if message.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < count + 1:
        raise RuntimeError(f"read {seen} of {count + 1}")
    return count / elapsed


def run_round(
    broker: Broker, workload: str, count: int, serial: int
) -> tuple[float, float | None, float]:
    """(produce msg/s, consume msg/s or None, broker CPU s per million messages)."""
    topic = f"bench-metrics-{workload}-{serial}"
    create_topic(broker, topic)
    cpu = broker.cpu_seconds()
    produced = produce(broker, topic, count, per_request=workload == "request-bound")
    consumed = consume(broker, topic, count) if workload == "batched" else None
    return produced, consumed, (broker.cpu_seconds() - cpu) / count * 1e6


def hook_costs() -> list[tuple[str, float]]:
    """Nanoseconds per call: lockgate's hooks against prometheus_client's labelled metrics."""
    from prometheus_client import CollectorRegistry, Counter
    from prometheus_client import Histogram as PromHistogram

    from lockgate.config.properties import BrokerConfig
    from lockgate.protocol.api import ApiKey
    from lockgate.server.broker import Broker as LockgateBroker
    from lockgate.storage.memory import MemoryEngine

    config = BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.metrics.port": "0"})
    metrics = LockgateBroker(config, MemoryEngine()).metrics
    registry = CollectorRegistry()
    counter = Counter("c", "c", ["api", "error"], registry=registry)
    histogram = PromHistogram("h", "h", ["api"], registry=registry)
    child_counter = counter.labels("PRODUCE", "NONE")
    child_histogram = histogram.labels("PRODUCE")
    entries = [("t", {"records": VALUE, "error_code": 0})]

    def labelled() -> None:
        counter.labels("PRODUCE", "NONE").inc()
        histogram.labels("PRODUCE").observe(0.001)

    def cached() -> None:
        child_counter.inc()
        child_histogram.observe(0.001)

    cases = {
        "lockgate request_done (latency + error code)": lambda: metrics.request_done(
            ApiKey.PRODUCE, 0.001, 0
        ),
        "lockgate appended (bytes + messages per topic)": lambda: metrics.appended("t", 100, 1),
        "lockgate fetched (one partition)": lambda: metrics.fetched(entries, False),
        "prometheus_client labels().inc() + labels().observe()": labelled,
        "prometheus_client cached children inc() + observe()": cached,
    }
    number = 200_000
    return [
        (name, min(timeit.repeat(case, number=number, repeat=3)) / number * 1e9)
        for name, case in cases.items()
    ]


def scrape_cost(partitions: int, groups: int) -> tuple[float, float]:
    """Milliseconds to render one scrape of a broker holding `partitions` partitions (one
    topic) and `groups` groups with a committed offset on each of 10 partitions, and the
    longest the endpoint's scrape holds the event loop at once: the registry's families, or
    one piece of the per-partition walk between two pauses (partition_metrics.CHUNK)."""
    from prometheus_client import generate_latest

    from lockgate.config.properties import BrokerConfig
    from lockgate.coordinator.group.group import Group
    from lockgate.coordinator.group.records import CommittedOffset, offset_value
    from lockgate.server import partition_metrics
    from lockgate.server.broker import Broker as LockgateBroker
    from lockgate.storage.memory import MemoryEngine

    config = BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.metrics.port": "0"})
    broker = LockgateBroker(config, MemoryEngine())
    broker.topics.create("scraped", partitions, 1, {})
    committed = offset_value(CommittedOffset(0, -1, "", 0))  # (held as the record's value)
    for group in range(groups):
        held = broker.groups.groups[f"g{group}"] = Group(f"g{group}")
        held.offsets.update({("scraped", p): committed for p in range(10)})
    broker.metrics.render()
    rounds = 5
    started = time.perf_counter()
    for _ in range(rounds):
        broker.metrics.render()
    elapsed = (time.perf_counter() - started) / rounds * 1000
    holds = []
    for _ in range(rounds):
        started = time.perf_counter()
        generate_latest(broker.metrics.registry)
        holds.append(time.perf_counter() - started)
        steps = partition_metrics.render_steps(*broker.metrics.partition_sources())
        while True:
            started = time.perf_counter()
            try:
                next(steps)
            except StopIteration:
                break
            finally:
                holds.append(time.perf_counter() - started)
    broker.topics.close()
    return elapsed, max(holds) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[tuple[str, str], list[tuple[float, float | None, float]]] = {}
    with brokers() as (on, off):
        for round_number in range(args.rounds):
            order = (on, off) if round_number % 2 == 0 else (off, on)
            for workload, count in (("batched", args.messages), ("request-bound", args.requests)):
                for broker in order:
                    outcome = run_round(broker, workload, count, round_number)
                    results.setdefault((workload, broker.name), []).append(outcome)
                    print(f"round {round_number + 1} {workload} {broker.name}: "
                          f"produce {outcome[0]:,.0f} msg/s"
                          + (f", consume {outcome[1]:,.0f} msg/s" if outcome[1] else "")
                          + f", broker CPU {outcome[2]:.2f} s per million", flush=True)  # fmt: skip
        scrapes = on.scrapes
    print(f"\n{args.rounds} rounds, medians; the metrics-on broker was scraped {scrapes} times")
    print("| workload | phase | metrics off | metrics on | on ÷ off |")
    print("|---|---|---|---|---|")
    for workload in ("batched", "request-bound"):
        phases = [("produce msg/s", 0), ("broker CPU s / M msgs", 2)]
        if workload == "batched":
            phases.insert(1, ("consume msg/s", 1))
        for phase, column in phases:
            off_value = statistics.median(
                float(r[column] or 0) for r in results[(workload, "metrics-off")]
            )
            on_value = statistics.median(
                float(r[column] or 0) for r in results[(workload, "metrics-on")]
            )
            print(f"| {workload} | {phase} | {off_value:,.2f} | {on_value:,.2f} | "
                  f"{on_value / off_value:.3f} |")  # fmt: skip
    print("\n| hook | ns per call |\n|---|---|")
    for name, nanoseconds in hook_costs():
        print(f"| {name} | {nanoseconds:,.0f} |")
    print(
        "\n| partitions | groups (10 offsets each) | ms per scrape | longest hold of the loop, ms |"
    )
    print("|---|---|---|---|")
    for partitions, groups in ((100, 10), (1000, 100), (5000, 500), (10_000, 1000)):
        total, hold = scrape_cost(partitions, groups)
        print(f"| {partitions:,} | {groups:,} | {total:,.1f} | {hold:,.1f} |")


if __name__ == "__main__":
    main()
