"""Share-group benchmark (KIP-932): records/s through share groups of 1, 4 and 16 consumers on a
topic of 1 and of 6 partitions, acquisition-to-acknowledgement latency, and the cost of a
lock-timeout storm, against lockgate (fsync and page-cache durability) and Apache Kafka (from
`make reference-deps`), each started fresh by this run on a free loopback port with the same
share settings, side by side in one invocation.

    python -m bench.share_groups [--records N] [--consumers 1,4,16] [--partitions 1,6]
                                 [--latency-records N] [--latency-poll-records N]
                                 [--storm-consumers C]
                                 [--storm-lock-ms MS] [--storm-locks N]
                                 [--targets lockgate-page-cache,lockgate-fsync,kafka]
                                 [--gate transaction|none] [--json PATH] [--phase-timeout S]

The clients are confluent-kafka's ShareConsumer (librdkafka's share consumer), one per process
(an instance is not thread-safe, and Python threads would measure the GIL), and its Producer.
bench/README.md ("Share groups") says what each figure means and how it is measured.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import multiprocessing.synchronize
import os
import platform
import queue
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import KafkaException, Message, Producer, ShareConsumer
from confluent_kafka import version as client_version
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic, libversion

from bench.throughput import BrokerProcess, broker_version, raise_on_sigterm, running_broker

TARGETS = ("lockgate-page-cache", "lockgate-fsync", "kafka")
REFERENCE = "kafka"
# The same broker settings for every target. The heartbeat may not go below the minimum (5 s by
# default), and a member's partitions come with a heartbeat after the assignment interval (1 s
# by default): with these a consumer is reading about a second after its first poll. The
# minimum lock duration (15 s by default) is lowered so that the storm can use a short lock.
# One partition for the share coordinator's state topic (50 by default), as the tests do.
SHARE_SETTINGS = {
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.assignment.interval.ms": "0",
    "group.share.min.record.lock.duration.ms": "2000",
    "share.coordinator.state.topic.num.partitions": "1",
}
VALUE_SIZE = 100
ADMIN_TIMEOUT = 30.0
BROKER_START_TIMEOUT = 120.0  # Kafka's JVM takes 10-30 s here
SETTLE_SECONDS = 3.0  # after every consumer has polled once: time to join and be assigned
POLL_SECONDS = 0.2
CHILD_STOP_TIMEOUT = 15.0
FIRST_RECORD_TIMEOUT = 60.0  # from the commit (or the consumers' start) to the first record
MILLION = 1e6


# --- pure parts (unit-tested) -------------------------------------------------------------


def offset_runs(pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(partition, first offset, last offset) runs of consecutive offsets, in the given order:
    a poll's records as a few numbers to send to the parent instead of one per record."""
    runs: list[list[int]] = []
    for partition, offset in pairs:
        if runs and runs[-1][0] == partition and runs[-1][2] + 1 == offset:
            runs[-1][2] = offset
        else:
            runs.append([partition, offset, offset])
    return [(partition, first, last) for partition, first, last in runs]


class DistinctRecords:
    """Which (partition, offset) have been delivered, one byte per offset: deliveries counts
    every delivery, distinct the records delivered at least once."""

    def __init__(self) -> None:
        self._seen: dict[int, bytearray] = {}
        self.distinct = 0
        self.deliveries = 0

    def add(self, partition: int, first: int, last: int) -> int:
        """Records the run and returns how many of its offsets were new."""
        seen = self._seen.setdefault(partition, bytearray())
        if len(seen) <= last:
            seen.extend(bytes(last + 1 - len(seen)))
        length = last - first + 1
        new = seen[first : last + 1].count(0)
        seen[first : last + 1] = b"\x01" * length
        self.distinct += new
        self.deliveries += length
        return new

    @property
    def duplicates(self) -> int:
        return self.deliveries - self.distinct


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (fraction 0.5 = p50); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


# The figures compared with the reference, per kind of scenario: (key, label).
COMPARED = {
    "throughput": [
        ("records_per_second", "records/s"),
        ("broker_cpu_per_million", "broker CPU s/M records"),
    ],
    "latency": [("p50_ms", "p50 ms"), ("p99_ms", "p99 ms")],
    "storm": [
        ("expiry_to_last_seconds", "expiry to last redelivery s"),
        ("broker_cpu_seconds", "broker CPU s"),
    ],
}


@dataclass
class ScenarioResult:
    target: str
    scenario: str  # e.g. "throughput 6p x 16c", "latency", "storm"
    kind: str  # a key of COMPARED
    figures: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def ratio_rows(
    results: Sequence[ScenarioResult], reference: str = REFERENCE
) -> list[dict[str, Any]]:
    """target ÷ reference for each compared figure of each scenario both ran; a reference
    figure of 0 gives no ratio (None)."""
    by_scenario = {r.scenario: r for r in results if r.target == reference}
    rows: list[dict[str, Any]] = []
    for result in results:
        base = by_scenario.get(result.scenario)
        if result.target == reference or base is None:
            continue
        for key, label in COMPARED[result.kind]:
            if key not in result.figures or key not in base.figures:
                continue
            value, reference_value = result.figures[key], base.figures[key]
            rows.append(
                {
                    "target": result.target,
                    "scenario": result.scenario,
                    "figure": label,
                    "value": value,
                    "reference": reference_value,
                    "ratio": value / reference_value if reference_value else None,
                }
            )
    return rows


def figure_text(value: float) -> str:
    """Whole numbers from 100 up (with thousands separators), three significant digits below."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_ratio_table(rows: Sequence[dict[str, Any]], reference: str = REFERENCE) -> str:
    lines = [
        f"| target | scenario | figure | target's | {reference}'s | ratio |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in rows:
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}×"
        lines.append(
            f"| {row['target']} | {row['scenario']} | {row['figure']} "
            f"| {figure_text(row['value'])} | {figure_text(row['reference'])} | {ratio} |"
        )
    return "\n".join(lines)


# --- child processes: one share consumer each ---------------------------------------------

# Messages from a child to the parent, on one queue:
#   ("polling", index, time)                          its first poll returned
#   ("batch", index, time, runs, delivery counts)     a non-empty poll: its offset runs and
#                                                     {delivery count: records}
#   ("error", index, text)
#   ("closed", index)


def _consumer(bootstrap: str, group: str, index: int, extra: dict[str, Any]) -> ShareConsumer:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": f"bench-share-{index}",
        "log_level": 3,  # not the preview notice in every process
    }
    config.update(extra)
    return ShareConsumer(config)


def _position(message: Message) -> tuple[int, int]:
    partition, offset = message.partition(), message.offset()
    if partition is None or offset is None:
        raise KafkaException(f"a record without a partition or offset: {message!r}")
    return partition, offset


def _batch_message(index: int, now: float, messages: Iterable[Message]) -> tuple[Any, ...]:
    counts: dict[int, int] = {}
    pairs = []
    for message in messages:
        if message.error() is not None:
            raise KafkaException(message.error())
        pairs.append(_position(message))
        count = message.delivery_count() or 0  # 0: the client did not say
        counts[count] = counts.get(count, 0) + 1
    return ("batch", index, now, offset_runs(pairs), counts)


def reader_main(
    bootstrap: str,
    group: str,
    topic: str,
    index: int,
    extra: dict[str, Any],
    out: multiprocessing.Queue[tuple[Any, ...]],
    stop: multiprocessing.synchronize.Event,
) -> None:
    """Polls (implicit acknowledgement unless `extra` says otherwise) and reports every
    non-empty poll until `stop`; close() then acknowledges the last poll's records."""
    consumer = _consumer(bootstrap, group, index, extra)
    try:
        consumer.subscribe([topic])
        first = True
        while not stop.is_set():
            messages = consumer.poll(POLL_SECONDS)
            now = time.monotonic()
            if first:
                out.put(("polling", index, now))
                first = False
            if messages:
                out.put(_batch_message(index, now, messages))
    except Exception as exc:  # reported to the parent, which fails the scenario
        out.put(("error", index, f"{type(exc).__name__}: {exc}"))
    finally:
        consumer.close()
        out.put(("closed", index))


def holder_main(
    bootstrap: str,
    group: str,
    topic: str,
    index: int,
    max_records: int,
    out: multiprocessing.Queue[tuple[Any, ...]],
    hold: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
) -> None:
    """The storm's lock holder: explicit acknowledgement, polls until one poll returns records
    (or `hold` is set), then stays in the group without polling or acknowledging until `stop`:
    its records' locks run out."""
    consumer = _consumer(
        bootstrap,
        group,
        index,
        {"share.acknowledgement.mode": "explicit", "max.poll.records": max_records},
    )
    try:
        consumer.subscribe([topic])
        first = True
        while not hold.is_set():
            messages = consumer.poll(POLL_SECONDS)
            now = time.monotonic()
            if first:
                out.put(("polling", index, now))
                first = False
            if messages:
                out.put(_batch_message(index, now, messages))
                break
        stop.wait()
    except Exception as exc:  # reported to the parent
        out.put(("error", index, f"{type(exc).__name__}: {exc}"))
    finally:
        consumer.close()
        out.put(("closed", index))


def latency_main(
    bootstrap: str,
    group: str,
    topic: str,
    records: int,
    poll_records: int,
    timeout: float,
    out: multiprocessing.Queue[tuple[Any, ...]],
) -> None:
    """Explicit acknowledgement: each poll's records accepted one by one, then commit_sync;
    reports ("latencies", [seconds from poll returned to commit_sync returned], [records per
    poll], distinct records, deliveries)."""
    extra = {"share.acknowledgement.mode": "explicit", "max.poll.records": poll_records}
    consumer = _consumer(bootstrap, group, 0, extra)
    latencies: list[float] = []
    sizes: list[int] = []
    seen = DistinctRecords()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while seen.distinct < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{seen.distinct} of {records} records after {timeout:.0f}s")
            messages = consumer.poll(POLL_SECONDS)
            if not messages:
                continue
            polled = time.perf_counter()
            for message in messages:
                if message.error() is not None:
                    raise KafkaException(message.error())
                consumer.acknowledge(message)
            answers = consumer.commit_sync(ADMIN_TIMEOUT)
            latencies.append(time.perf_counter() - polled)
            sizes.append(len(messages))
            failed = [f"{tp}: {error}" for tp, error in answers.items() if error is not None]
            if failed:
                raise KafkaException(f"commit_sync: {failed}")
            for partition, first, last in offset_runs(_position(m) for m in messages):
                seen.add(partition, first, last)
        out.put(("latencies", latencies, sizes, seen.distinct, seen.deliveries))
    except Exception as exc:  # reported to the parent
        out.put(("error", 0, f"{type(exc).__name__}: {exc}"))
    finally:
        consumer.close()


# --- the parent: topics, records, processes ----------------------------------------------


class ScenarioFailed(Exception):
    pass


class NothingReceived(ScenarioFailed):
    """No consumer received a record within FIRST_RECORD_TIMEOUT: the broker probably does not
    serve share groups, and its other scenarios would only wait out their timeouts too."""


def cpu_seconds_of(pids: Iterable[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def broker_cpu(broker: BrokerProcess) -> float:
    user, system = broker.cpu_seconds()
    return user + system


@contextmanager
def children(context: SpawnContext) -> Iterator[list[SpawnProcess]]:
    """Processes started inside are stopped on the way out, by PID: joined, then SIGTERM, then
    SIGKILL if they hang."""
    started: list[SpawnProcess] = []
    try:
        yield started
    finally:
        deadline = time.monotonic() + CHILD_STOP_TIMEOUT
        for process in started:
            process.join(max(0.1, deadline - time.monotonic()))
        for process in started:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
                process.join(5)
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGKILL)
                process.join(5)


def receive(out: multiprocessing.Queue[tuple[Any, ...]], deadline: float, what: str) -> Any:
    try:
        message = out.get(timeout=max(0.01, deadline - time.monotonic()))
    except queue.Empty:
        raise TimeoutError(f"{what}: nothing from the consumers before the deadline") from None
    if message[0] == "error":
        raise ScenarioFailed(f"consumer {message[1]}: {message[2]}")
    return message


class Bench:
    """One target's broker and the clients that drive it."""

    def __init__(
        self,
        bootstrap: str,
        broker: BrokerProcess,
        context: SpawnContext,
        timeout: float,
        gate: str,
        log: Callable[[str], None],
    ) -> None:
        self.bootstrap = bootstrap
        self.broker = broker
        self.context = context
        self.timeout = timeout
        self.gate = gate
        self.log = log
        # log_level 4: no notice when the client is destroyed with its background queue unserved.
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})

    def names(self, label: str) -> tuple[str, str]:
        suffix = uuid.uuid4().hex[:8]
        return f"share-bench-{label}-{suffix}", f"share-bench-{label}-{suffix}"

    def create_topic(self, topic: str, partitions: int) -> None:
        futures = self.admin.create_topics(
            [NewTopic(topic, partitions, 1)], operation_timeout=ADMIN_TIMEOUT
        )
        for future in futures.values():
            future.result(ADMIN_TIMEOUT)

    def set_group_configs(self, group: str, configs: dict[str, str]) -> None:
        """IncrementalAlterConfigs on the GROUP resource, before any member exists."""
        entries = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ]
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        for future in self.admin.incremental_alter_configs([resource]).values():
            future.result(ADMIN_TIMEOUT)

    def producer(self, transactional: bool, batch_messages: int | None = None) -> Producer:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "client.id": "bench-share-producer",
            "linger.ms": 10,
            "batch.size": 1_000_000,
            "batch.num.messages": batch_messages or 100_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "compression.type": "none",
            "log_level": 4,
        }
        if transactional:
            config["transactional.id"] = f"share-bench-{uuid.uuid4().hex[:8]}"
            config["transaction.timeout.ms"] = 600_000
        producer = Producer(config)
        if transactional:
            producer.init_transactions(ADMIN_TIMEOUT)
            producer.begin_transaction()
        return producer

    def produce(self, producer: Producer, topic: str, records: int, partitions: int) -> None:
        value = os.urandom(VALUE_SIZE)
        deadline = time.monotonic() + self.timeout
        for index in range(records):
            while True:
                try:
                    producer.produce(topic, value, partition=index % partitions)
                    break
                except BufferError:
                    producer.poll(0.005)
                    if time.monotonic() > deadline:
                        raise TimeoutError("produce: the local queue stayed full") from None
            if index % 1000 == 0:
                producer.poll(0)
        remaining = producer.flush(max(1.0, deadline - time.monotonic()))
        if remaining:
            raise TimeoutError(f"produce: {remaining} records undelivered")

    def start(
        self, started: list[SpawnProcess], target: Callable[..., None], *args: Any
    ) -> SpawnProcess:
        process = self.context.Process(target=target, args=args, daemon=True)
        process.start()
        started.append(process)
        return process

    def wait_polling(
        self, out: multiprocessing.Queue[tuple[Any, ...]], count: int, deadline: float
    ) -> dict[int, float]:
        """Until `count` consumers have returned from their first poll; a batch already
        received then is an error (the records were to be held back by the gate)."""
        polling: dict[int, float] = {}
        while len(polling) < count:
            message = receive(out, deadline, "joining")
            if message[0] == "polling":
                polling[message[1]] = message[2]
            elif message[0] == "batch" and self.gate == "transaction":
                raise ScenarioFailed("a consumer read a record before the transaction committed")
        return polling

    # -- records/s ------------------------------------------------------------------------

    def throughput(self, records: int, partitions: int, consumers: int) -> ScenarioResult:
        name = f"throughput {partitions}p x {consumers}c"
        result = ScenarioResult("", name, "throughput")
        topic, group = self.names(f"t{partitions}x{consumers}")
        self.create_topic(topic, partitions)
        configs = {"share.auto.offset.reset": "earliest"}
        if self.gate == "transaction":
            configs["share.isolation.level"] = "read_committed"
        self.set_group_configs(group, configs)
        deadline = time.monotonic() + self.timeout
        transactional = self.gate == "transaction"
        producer = self.producer(transactional)
        self.produce(producer, topic, records, partitions)
        out: multiprocessing.Queue[tuple[Any, ...]] = self.context.Queue()
        stop = self.context.Event()
        seen = DistinctRecords()
        with children(self.context) as started:
            try:
                for index in range(consumers):
                    self.start(
                        started, reader_main, self.bootstrap, group, topic, index, {}, out, stop
                    )
                if transactional:
                    self.wait_polling(out, consumers, deadline)
                    time.sleep(SETTLE_SECONDS)
                    producer.commit_transaction(ADMIN_TIMEOUT)
                first_at = last_new_at = 0.0
                cpu_start = clients_start = 0.0
                readers: set[int] = set()
                first_deadline = min(deadline, time.monotonic() + FIRST_RECORD_TIMEOUT)
                while seen.distinct < records:
                    if not first_at:
                        try:
                            message = receive(out, first_deadline, name)
                        except TimeoutError:
                            raise NothingReceived(
                                f"{name}: no record within {FIRST_RECORD_TIMEOUT:.0f}s"
                            ) from None
                    else:
                        progress = f"{name}: {seen.distinct} of {records}"
                        message = receive(out, deadline, progress)
                    if message[0] != "batch":
                        continue
                    if not first_at:
                        cpu_start = broker_cpu(self.broker)
                        clients_start = cpu_seconds_of(p.pid for p in started if p.pid)
                        first_at = message[2]
                    first_at = min(first_at, message[2])
                    readers.add(message[1])
                    new = sum(seen.add(*run) for run in message[3])
                    if new:
                        last_new_at = max(last_new_at, message[2])
                cpu = broker_cpu(self.broker) - cpu_start
                clients = cpu_seconds_of(p.pid for p in started if p.pid) - clients_start
            finally:
                stop.set()
                drain(out, started, seen)
        seconds = last_new_at - first_at
        result.figures = {
            "records": records,
            "seconds": seconds,
            "records_per_second": records / seconds if seconds > 0 else 0.0,
            "duplicates": seen.duplicates,
            "broker_cpu_seconds": cpu,
            "broker_cpu_per_million": cpu / (records / MILLION),
            "consumers_cpu_seconds": clients,
            "consumers_that_read": len(readers),
        }
        return result

    # -- acquisition to acknowledgement ---------------------------------------------------

    def latency(self, records: int, poll_records: int) -> ScenarioResult:
        """One consumer, explicit acknowledgement, polls of about `poll_records` (log batches
        of that many records: whole batches are acquired)."""
        result = ScenarioResult("", "latency", "latency")
        topic, group = self.names("latency")
        self.create_topic(topic, 1)
        self.set_group_configs(group, {"share.auto.offset.reset": "earliest"})
        producer = self.producer(False, batch_messages=poll_records)
        self.produce(producer, topic, records, 1)
        out: multiprocessing.Queue[tuple[Any, ...]] = self.context.Queue()
        deadline = time.monotonic() + self.timeout
        with children(self.context) as started:
            self.start(
                started,
                latency_main,
                self.bootstrap,
                group,
                topic,
                records,
                poll_records,
                self.timeout,
                out,
            )
            message = receive(out, deadline + 5, "latency")
        _, latencies, sizes, distinct, deliveries = message
        result.figures = {
            "polls": len(latencies),
            "records": distinct,
            "duplicates": deliveries - distinct,
            "records_per_poll": sum(sizes) / len(sizes) if sizes else 0.0,
            "p50_ms": 1000 * percentile(latencies, 0.50),
            "p99_ms": 1000 * percentile(latencies, 0.99),
            "max_ms": 1000 * max(latencies, default=0.0),
        }
        return result

    # -- lock-timeout storm ---------------------------------------------------------------

    def storm(self, consumers: int, locks: int, lock_ms: int) -> ScenarioResult:
        """`consumers` holders acquire a partition's `locks` records and hold them; when the
        locks run out a fresh consumer must receive them all again (delivery count 2). One
        partition: the members share it, so the fresh consumer is assigned it too (of several
        partitions it would get some, and those of holders that no longer poll would stay
        unread)."""
        partitions = 1
        result = ScenarioResult("", "storm", "storm")
        topic, group = self.names("storm")
        self.create_topic(topic, partitions)
        transactional = self.gate == "transaction"
        configs = {
            "share.auto.offset.reset": "earliest",
            "share.record.lock.duration.ms": str(lock_ms),
            "share.partition.max.record.locks": str(locks),
        }
        if transactional:
            configs["share.isolation.level"] = "read_committed"
        self.set_group_configs(group, configs)
        total = locks * partitions
        share = math.ceil(total / consumers)
        # Log batches no larger than a holder's share: whole batches are acquired, so larger ones
        # would let one holder take more than its max.poll.records.
        producer = self.producer(transactional, batch_messages=min(share, 100))
        self.produce(producer, topic, total, partitions)
        deadline = time.monotonic() + self.timeout
        out: multiprocessing.Queue[tuple[Any, ...]] = self.context.Queue()
        hold, stop, fresh_stop = self.context.Event(), self.context.Event(), self.context.Event()
        held = DistinctRecords()
        seen = DistinctRecords()
        delivery_counts: dict[int, int] = {}
        with children(self.context) as started:
            try:
                for index in range(consumers):
                    self.start(
                        started,
                        holder_main,
                        self.bootstrap,
                        group,
                        topic,
                        index,
                        share,
                        out,
                        hold,
                        stop,
                    )
                if transactional:
                    self.wait_polling(out, consumers, deadline)
                    time.sleep(SETTLE_SECONDS)
                    producer.commit_transaction(ADMIN_TIMEOUT)
                acquired: list[float] = []
                hold_deadline = min(deadline, time.monotonic() + FIRST_RECORD_TIMEOUT)
                while held.distinct < total and time.monotonic() < hold_deadline:
                    try:
                        message = receive(out, hold_deadline, "storm: acquiring")
                    except TimeoutError:
                        break
                    if message[0] == "batch":
                        acquired.append(message[2])
                        for run in message[3]:
                            held.add(*run)
                hold.set()
                if not acquired:
                    raise NothingReceived("storm: the holders acquired nothing")
                fresh = consumers
                self.start(
                    started, reader_main, self.bootstrap, group, topic, fresh, {}, out, fresh_stop
                )
                expiry = max(acquired) + lock_ms / 1000
                fresh_polling = 0.0
                cpu_at_expiry: float | None = None
                last_at = 0.0
                while seen.distinct < total:
                    wait = expiry - time.monotonic()
                    if cpu_at_expiry is None and wait <= 0:
                        cpu_at_expiry = broker_cpu(self.broker)
                    step = min(deadline, time.monotonic() + wait) if wait > 0 else deadline
                    try:
                        message = receive(out, step, f"storm: {seen.distinct} of {total}")
                    except TimeoutError:
                        if time.monotonic() >= deadline:
                            raise
                        continue
                    if message[0] == "polling" and message[1] == fresh:
                        fresh_polling = message[2]
                    if message[0] != "batch" or message[1] != fresh:
                        continue
                    for count, number in message[4].items():
                        delivery_counts[count] = delivery_counts.get(count, 0) + number
                    if sum(seen.add(*run) for run in message[3]):
                        last_at = max(last_at, message[2])
                cpu = broker_cpu(self.broker) - (
                    cpu_at_expiry if cpu_at_expiry is not None else broker_cpu(self.broker)
                )
            finally:
                stop.set()
                fresh_stop.set()
                hold.set()
                drain(out, started, DistinctRecords())
        redelivered = sum(number for count, number in delivery_counts.items() if count >= 2)
        result.figures = {
            "locked_records": held.distinct,
            "redelivered": redelivered,
            "delivered_first_time": delivery_counts.get(1, 0),
            "acquisition_spread_seconds": max(acquired) - min(acquired),
            "fresh_polling_before_expiry_seconds": expiry - fresh_polling if fresh_polling else 0,
            "expiry_to_last_seconds": last_at - expiry,
            "broker_cpu_seconds": cpu,
        }
        if held.distinct < total:
            result.notes.append(
                f"the holders acquired {held.distinct} of {total} records; the rest went to the "
                "fresh consumer at delivery count 1"
            )
        if fresh_polling and fresh_polling > expiry:
            result.notes.append("the fresh consumer's first poll returned after the expiry")
        return result


def drain(
    out: multiprocessing.Queue[tuple[Any, ...]], started: list[SpawnProcess], seen: DistinctRecords
) -> None:
    """After `stop`: reads what the consumers still send (so that none blocks on a full pipe,
    and late deliveries count as duplicates) until each has closed or the timeout."""
    deadline = time.monotonic() + CHILD_STOP_TIMEOUT
    open_children = {p.pid for p in started if p.is_alive()}
    closed = 0
    while closed < len(open_children) and time.monotonic() < deadline:
        try:
            message = out.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if message[0] == "closed":
            closed += 1
        elif message[0] == "batch":
            for run in message[3]:
                seen.add(*run)


# --- the run ------------------------------------------------------------------------------


@dataclass
class TargetReport:
    target: str
    version: str = ""
    error: str = ""
    results: list[ScenarioResult] = field(default_factory=list)


def bench_target(
    target: str, args: argparse.Namespace, scratch: Path, log: Callable[[str], None]
) -> TargetReport:
    report = TargetReport(target)
    try:
        report.version = broker_version(target)
    except (OSError, ImportError, RuntimeError) as exc:
        report.version = f"unknown ({exc})"
    context = multiprocessing.get_context("spawn")
    scenarios: list[tuple[str, Callable[[Bench], ScenarioResult]]] = []
    for partitions in args.partitions:
        for consumers in args.consumers:
            run = partial(Bench.throughput, records=args.records, partitions=partitions,
                          consumers=consumers)  # fmt: skip
            scenarios.append((f"throughput {partitions}p x {consumers}c", run))
    if args.latency_records:
        latency = partial(Bench.latency, records=args.latency_records,
                          poll_records=args.latency_poll_records)  # fmt: skip
        scenarios.append(("latency", latency))
    if args.storm_consumers:
        storm = partial(Bench.storm, consumers=args.storm_consumers, locks=args.storm_locks,
                        lock_ms=args.storm_lock_ms)  # fmt: skip
        scenarios.append(("storm", storm))
    try:
        with running_broker(target, scratch, SHARE_SETTINGS, BROKER_START_TIMEOUT) as (
            bootstrap,
            broker,
        ):
            bench = Bench(bootstrap, broker, context, args.phase_timeout, args.gate, log)
            if args.warm_up and scenarios:
                # Not reported: the JVM's JIT, the share coordinator's state topic and the first
                # share partition are paid for here rather than in the first scenario.
                scenarios.insert(0, ("warm-up", partial(Bench.throughput, records=args.warm_up,
                                                        partitions=1, consumers=1)))  # fmt: skip
            for name, scenario in scenarios:
                log(f"{target}: {name}")
                try:
                    result = scenario(bench)
                except (KafkaException, ScenarioFailed, TimeoutError, OSError) as exc:
                    failed = ScenarioResult(target, name, name.split()[0])
                    failed.notes.append(f"FAILED: {type(exc).__name__}: {exc}")
                    report.results.append(failed)
                    report.error = report.error or f"{name}: {exc}"
                    log(f"{target}: {name} FAILED: {exc}")
                    if isinstance(exc, NothingReceived):
                        log(f"{target}: no share-group records at all; its other scenarios skipped")
                        break
                    continue
                result.target = target
                if name == "warm-up":
                    log(f"{target}: warm-up: {describe(result)} (not reported)")
                    continue
                report.results.append(result)
                log(f"{target}: {name}: {describe(result)}")
    except (KafkaException, RuntimeError, TimeoutError, OSError) as exc:
        report.error = f"{type(exc).__name__}: {exc}"
        log(f"{target}: FAILED: {report.error}")
    return report


def describe(result: ScenarioResult) -> str:
    f = result.figures
    if not f:
        return "; ".join(result.notes)
    if result.kind == "throughput":
        return (
            f"{f['records_per_second']:,.0f} records/s ({f['records']:,.0f} in "
            f"{f['seconds']:.2f} s), {f['duplicates']:,.0f} duplicates, broker CPU "
            f"{f['broker_cpu_seconds']:.2f} s, consumers' CPU {f['consumers_cpu_seconds']:.2f} s, "
            f"{f['consumers_that_read']:.0f} consumers read"
        )
    if result.kind == "latency":
        return (
            f"{f['polls']:.0f} polls of {f['records_per_poll']:.0f} records: p50 "
            f"{f['p50_ms']:.1f} ms, p99 {f['p99_ms']:.1f} ms, max {f['max_ms']:.1f} ms"
        )
    return (
        f"{f['locked_records']:.0f} locked, {f['redelivered']:.0f} redelivered (count >= 2), "
        f"{f['delivered_first_time']:.0f} at count 1; last redelivery "
        f"{f['expiry_to_last_seconds']:+.3f} s after the expiry; broker CPU "
        f"{f['broker_cpu_seconds']:.2f} s; acquisitions spread over "
        f"{f['acquisition_spread_seconds']:.3f} s"
    )


def print_tables(reports: Sequence[TargetReport]) -> None:
    for report in reports:
        print(f"\n{report.target}: {report.version}")
        if report.error and not report.results:
            print(f"  FAILED: {report.error}")
            continue
        print(
            "\n| scenario | records | seconds | records/s | duplicates | broker CPU s "
            "| broker CPU s/M records | consumers' CPU s | consumers that read |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in report.results:
            f = r.figures
            if r.kind == "throughput" and f:
                print(
                    f"| {r.scenario} | {f['records']:,.0f} | {f['seconds']:.2f} "
                    f"| {f['records_per_second']:,.0f} | {f['duplicates']:,.0f} "
                    f"| {f['broker_cpu_seconds']:.2f} | {f['broker_cpu_per_million']:.2f} "
                    f"| {f['consumers_cpu_seconds']:.2f} | {f['consumers_that_read']:.0f} |"
                )
            elif r.kind == "throughput":
                print(f"| {r.scenario} | {'; '.join(r.notes)} |")
        for r in report.results:
            if r.kind != "throughput":
                print(f"\n{r.scenario}: {describe(r)}")
                for note in r.notes:
                    print(f"  note: {note}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )

    def numbers(text: str) -> list[int]:
        return [int(item) for item in text.split(",") if item.strip()]

    parser.add_argument(
        "--records", type=int, default=300_000, help="records per throughput scenario (100 B)"
    )
    parser.add_argument("--consumers", type=numbers, default=[1, 4, 16])
    parser.add_argument("--partitions", type=numbers, default=[1, 6])
    parser.add_argument(
        "--warm-up",
        type=int,
        default=30_000,
        help="records of an unreported 1-partition, 1-consumer run first on each broker (0: none)",
    )
    parser.add_argument(
        "--latency-records", type=int, default=20_000, help="records of the latency run (0: skip)"
    )
    parser.add_argument(
        "--latency-poll-records",
        type=int,
        default=100,
        help="records per poll in the latency run (max.poll.records, and the log batches' size)",
    )
    parser.add_argument(
        "--storm-consumers", type=int, default=4, help="lock holders in the storm (0: skip)"
    )
    parser.add_argument(
        "--storm-locks",
        type=int,
        default=2000,
        help="records locked at once: the partition's record-lock limit "
        "(share.partition.max.record.locks, at most group.share.max.partition.max.record.locks)",
    )
    parser.add_argument(
        "--storm-lock-ms",
        type=int,
        default=5000,
        help="share.record.lock.duration.ms of the storm's group (at least 2000); the fresh "
        "consumer must have joined within it",
    )
    parser.add_argument(
        "--gate",
        choices=("transaction", "none"),
        default="transaction",
        help="transaction: the records are written in one transaction, committed once every "
        "consumer polls (the group reads read_committed), so that all start together; none: "
        "the records are there before the consumers join",
    )
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument(
        "--phase-timeout", type=float, default=180.0, help="seconds allowed per scenario"
    )
    args = parser.parse_args()
    targets = [target.strip() for target in args.targets.split(",") if target.strip()]
    unknown = set(targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}; choose from {', '.join(TARGETS)}")
    if args.storm_lock_ms < int(SHARE_SETTINGS["group.share.min.record.lock.duration.ms"]):
        parser.error("--storm-lock-ms is below group.share.min.record.lock.duration.ms")
    signal.signal(signal.SIGTERM, raise_on_sigterm)

    def log(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    machine = (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.1f} GiB RAM, "
        f"confluent-kafka {client_version()} (librdkafka {libversion()[0]}), "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(machine)
    print(
        f"{args.records:,} records of {VALUE_SIZE} B per throughput scenario (warm-up "
        f"{args.warm_up:,}), gate "
        f"{args.gate}; latency {args.latency_records:,} records; storm {args.storm_consumers} "
        f"holders x {args.storm_locks} locks on 1 partition, lock {args.storm_lock_ms} ms"
    )
    reports: list[TargetReport] = []
    scratch = Path(tempfile.mkdtemp(prefix="lockgate-bench-share-"))
    try:
        for target in targets:
            log(f"{target}: starting")
            reports.append(bench_target(target, args, scratch, log))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print_tables(reports)
    results = [result for report in reports for result in report.results if result.figures]
    rows = ratio_rows(results)
    if rows:
        print(f"\nratios to {REFERENCE} (same scenario, same run):\n")
        print(format_ratio_table(rows))
    if args.json is not None:
        document = {
            "machine": machine,
            "settings": SHARE_SETTINGS,
            "arguments": {key: value for key, value in vars(args).items() if key != "json"}
            | {"json": str(args.json)},
            "targets": [
                {
                    "target": report.target,
                    "version": report.version,
                    "error": report.error,
                    "results": [asdict(result) for result in report.results],
                }
                for report in reports
            ],
            "ratios": rows,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    if any(report.error for report in reports):
        sys.exit(1)


if __name__ == "__main__":
    main()
