"""Throughput benchmark: plain produce and consume with confluent-kafka (librdkafka) against
lockgate (fsync durability), lockgate (page-cache durability), tansu (memory storage) and
Apache Kafka (from `make reference-deps`, its defaults), each started fresh by this run on a
free loopback port, side by side in one invocation.

For each broker and value size (100 B and 1 KiB by default) one producer writes N messages to
a 3-partition topic (acks=all, enable.idempotence=true, linger.ms=10, 1 MB batches), then one
consumer reads them back from offset 0 with assign() on the 3 partitions. Per phase it reports
messages/s, MB/s of values, the broker's CPU seconds (user+system, from psutil before and
after the phase) per GB of values moved, and the broker's peak RSS sampled every 100 ms.

    python -m bench.throughput [--messages N] [--sizes 100,1024]
                               [--targets lockgate-fsync,lockgate-page-cache,tansu]
                               [--json PATH] [--phase-timeout SECONDS]

If a broker refuses the idempotent producer (no InitProducerId), the run says so and repeats
that broker's produce phases with enable.idempotence=false.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import version as client_version
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic, libversion

from bench.transactions import tansu_binary, wait_for_port
from lockgate.tools.devcluster import free_port
from tests.support.reference_kafka import kafka_command

TARGETS = ("lockgate-fsync", "lockgate-page-cache", "tansu", "kafka")
DEFAULT_MESSAGES = {100: 3_000_000, 1024: 1_000_000}
PARTITIONS = 3
PROBE_TOPIC = "bench-probe"
ADMIN_TIMEOUT = 30.0
PROBE_TIMEOUT = 30.0
POLL_EVERY = 1000  # produce() calls between poll(0)s that serve the producer's callbacks
RSS_INTERVAL = 0.1
GB = 1e9
MB = 1e6


def topic_name(size: int) -> str:
    return f"bench-throughput-{size}"


def broker_command(
    target: str, port: int, data_dir: Path, settings: dict[str, str] | None = None
) -> list[str]:
    """The command line of `target`; `settings` (broker configs such as the share groups'
    group.share.*) go to lockgate as --set and to Kafka's server.properties; tansu takes none."""
    if target.startswith("lockgate-"):
        durability = target.removeprefix("lockgate-")
        command = [sys.executable, "-m", "lockgate.cli", "serve", "--data-dir", str(data_dir)]
        command += ["--listen", f"127.0.0.1:{port}", "--log-level", "WARNING"]
        for name, value in (settings or {}).items():
            command += ["--set", f"{name}={value}"]
        return [*command, "--set", f"lockgate.durability={durability}"]
    if target == "tansu":
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
    if target == "kafka":
        return kafka_command(port, data_dir, settings)
    raise ValueError(f"unknown target {target!r}")


class BrokerProcess:
    """A broker's process as psutil sees it: CPU time (including any child processes) and RSS,
    sampled in a background thread so that a phase's peak is known."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self._lock = threading.Lock()
        self._peak_rss = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)

    def _processes(self) -> list[psutil.Process]:
        try:
            return [self.process, *self.process.children(recursive=True)]
        except psutil.Error:
            return [self.process]

    def cpu_seconds(self) -> tuple[float, float]:
        """(user, system) CPU seconds so far."""
        user = system = 0.0
        for process in self._processes():
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            user += times.user
            system += times.system
        return user, system

    def rss(self) -> int:
        total = 0
        for process in self._processes():
            try:
                total += process.memory_info().rss
            except psutil.Error:
                continue
        return total

    def _sample(self) -> None:
        while not self._stop.wait(RSS_INTERVAL):
            rss = self.rss()
            with self._lock:
                self._peak_rss = max(self._peak_rss, rss)

    def start_sampling(self) -> None:
        self._sampler.start()

    def stop_sampling(self) -> None:
        self._stop.set()
        self._sampler.join(5)

    def reset_peak(self) -> None:
        """Starts a new phase: its peak is at least the RSS right now."""
        rss = self.rss()
        with self._lock:
            self._peak_rss = rss

    def peak_rss(self) -> int:
        rss = self.rss()
        with self._lock:
            self._peak_rss = max(self._peak_rss, rss)
            return self._peak_rss


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM by PID, SIGKILL if it has not gone after 20 s."""
    if process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)


@contextmanager
def running_broker(
    target: str,
    scratch: Path,
    settings: dict[str, str] | None = None,
    start_timeout: float = 30.0,
) -> Iterator[tuple[str, BrokerProcess]]:
    """A fresh broker on a free loopback port with its data under `scratch`; always stopped by
    its PID on the way out, whatever happened inside."""
    port = free_port()
    data_dir = scratch / f"{target}-data"
    log_path = scratch / f"{target}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            broker_command(target, port, data_dir, settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    broker: BrokerProcess | None = None
    try:
        wait_for_port(port, process, start_timeout)
        broker = BrokerProcess(process.pid)
        broker.start_sampling()
        yield f"127.0.0.1:{port}", broker
    except BaseException:
        print(f"--- last lines of {target}'s log ---", file=sys.stderr)
        print(log_path.read_text(errors="replace")[-2000:], file=sys.stderr)
        raise
    finally:
        if broker is not None:
            broker.stop_sampling()
        stop_process(process)


@dataclass
class PhaseResult:
    target: str
    size: int
    phase: str
    messages: int
    seconds: float
    broker_user_seconds: float
    broker_system_seconds: float
    client_cpu_seconds: float
    peak_rss_bytes: int
    idempotence: bool | None = None

    @property
    def broker_cpu_seconds(self) -> float:
        return self.broker_user_seconds + self.broker_system_seconds

    @property
    def value_bytes(self) -> int:
        return self.messages * self.size

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def megabytes_per_second(self) -> float:
        return self.value_bytes / MB / self.seconds if self.seconds else 0.0

    @property
    def broker_cpu_per_gb(self) -> float:
        return self.broker_cpu_seconds / (self.value_bytes / GB) if self.value_bytes else 0.0

    @property
    def client_cpu_per_gb(self) -> float:
        return self.client_cpu_seconds / (self.value_bytes / GB) if self.value_bytes else 0.0

    @property
    def broker_cpu_percent(self) -> float:
        return 100 * self.broker_cpu_seconds / self.seconds if self.seconds else 0.0

    @property
    def client_cpu_percent(self) -> float:
        return 100 * self.client_cpu_seconds / self.seconds if self.seconds else 0.0

    @property
    def broker_system_percent(self) -> float:
        """System time as a share of the broker's CPU time."""
        cpu = self.broker_cpu_seconds
        return 100 * self.broker_system_seconds / cpu if cpu else 0.0

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        for name in (
            "broker_cpu_seconds",
            "value_bytes",
            "messages_per_second",
            "megabytes_per_second",
            "broker_cpu_per_gb",
            "client_cpu_per_gb",
            "broker_cpu_percent",
            "broker_system_percent",
            "client_cpu_percent",
        ):
            data[name] = getattr(self, name)
        return data


@dataclass
class TargetReport:
    target: str
    version: str = ""
    idempotence_note: str = ""
    error: str = ""
    results: list[PhaseResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Measurement:
    """Broker CPU, driver CPU, wall time and the broker's peak RSS over one phase."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.driver = psutil.Process()

    def __enter__(self) -> Measurement:
        self.broker.reset_peak()
        self._driver_cpu = self._driver_seconds()
        self._broker_cpu = self.broker.cpu_seconds()
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self._started
        user, system = self.broker.cpu_seconds()
        self.broker_user = user - self._broker_cpu[0]
        self.broker_system = system - self._broker_cpu[1]
        self.client_cpu = self._driver_seconds() - self._driver_cpu
        self.peak_rss = self.broker.peak_rss()

    def _driver_seconds(self) -> float:
        times = self.driver.cpu_times()
        return float(times.user + times.system)


def create_topics(bootstrap: str, sizes: list[int]) -> None:
    # log_level 4: no notice when the client is destroyed with its background queue unserved.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    topics = [NewTopic(topic_name(size), PARTITIONS, 1) for size in sizes]
    topics.append(NewTopic(PROBE_TOPIC, 1, 1))
    for future in admin.create_topics(topics, operation_timeout=ADMIN_TIMEOUT).values():
        future.result(ADMIN_TIMEOUT)


class ProducerRefused(Exception):
    """The producer could not deliver a probe message (typically: no idempotence support)."""


def producer_config(
    bootstrap: str, idempotence: bool, batch_messages: int | None = None
) -> dict[str, Any]:
    """With `batch_messages`, batches are cut by count alone (a linger of a second that the
    loop outruns): every broker's log then holds the same batches, and the consume phase
    compares the brokers on the same data. Without it each broker gets the batches its own
    speed makes (a broker that acknowledges sooner gets smaller ones)."""
    config = {
        "bootstrap.servers": bootstrap,
        "client.id": "bench-throughput",
        "acks": "all",
        "enable.idempotence": idempotence,
        "linger.ms": 10,
        "batch.size": 1_000_000,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "compression.type": "none",
        "message.timeout.ms": 300_000,
        # A Python callback per delivered message would cost the driver more than the broker
        # spends on it; failures are still reported, success is what flush() returning 0 means.
        "delivery.report.only.error": True,
    }
    if batch_messages is not None:
        config.update({"linger.ms": 1000, "batch.num.messages": batch_messages})
    return config


class DeliveryFailures:
    """Failed deliveries and fatal client errors, as the producer's callbacks report them."""

    def __init__(self) -> None:
        self.failed = 0
        self.first_error = ""
        self.fatal = ""

    def on_delivery(self, error: KafkaError | None, _message: object) -> None:
        if error is not None:
            self.failed += 1
            self.first_error = self.first_error or str(error)

    def on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = self.fatal or str(error)

    def describe(self) -> str:
        return self.fatal or self.first_error or "no error reported"


def ready_producer(
    bootstrap: str, idempotence: bool, batch_messages: int | None = None
) -> tuple[Producer, DeliveryFailures]:
    """A producer that has delivered one probe message, so that connecting, Metadata and
    (with idempotence) InitProducerId happen before the clock starts."""
    failures = DeliveryFailures()
    config = producer_config(bootstrap, idempotence, batch_messages)
    config["error_cb"] = failures.on_error
    config["on_delivery"] = failures.on_delivery
    producer = Producer(config)
    producer.produce(PROBE_TOPIC, b"probe")
    remaining = producer.flush(PROBE_TIMEOUT)
    if remaining == 0 and not failures.failed and not failures.fatal:
        return producer, failures
    if remaining and not failures.failed and not failures.fatal:
        reason = f"the probe message was not delivered within {PROBE_TIMEOUT:.0f}s"
    else:
        reason = failures.describe()
    close_producer(producer)  # its purge reports more failures: read the first ones before
    raise ProducerRefused(reason)


def close_producer(producer: Producer) -> None:
    """Drops anything still queued (after a failure) so that close() does not wait on it."""
    producer.purge()
    producer.flush(5)
    producer.close()


def produce_phase(
    producer: Producer,
    failures: DeliveryFailures,
    topic: str,
    count: int,
    size: int,
    timeout: float,
) -> None:
    payload = os.urandom(size)
    deadline = time.monotonic() + timeout
    produce = producer.produce
    poll = producer.poll
    for index in range(count):
        while True:
            try:
                produce(topic, payload, partition=index % PARTITIONS)
                break
            except BufferError as exc:
                poll(0.005)
                if time.monotonic() > deadline:
                    message = f"produce: local queue still full after {timeout}s"
                    raise TimeoutError(message) from exc
        if index % POLL_EVERY == 0:
            poll(0)
            if failures.fatal or failures.failed:
                raise KafkaException(f"produce: {failures.describe()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"produce: {index:,} of {count:,} queued after {timeout}s")
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    if remaining:
        raise TimeoutError(f"produce: {remaining} messages undelivered after {timeout}s")
    if failures.fatal or failures.failed:
        raise KafkaException(f"produce: {failures.failed} failed: {failures.describe()}")


@contextmanager
def connected_consumer(bootstrap: str, topic: str) -> Iterator[Consumer]:
    """A consumer that has fetched the topic's metadata (so it is connected) but has no
    assignment yet; closed on the way out."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "bench-throughput",
            # The client wants a group id; assign() uses no group coordinator.
            "group.id": "bench-throughput",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 4_194_304,
            # librdkafka stops fetching once queued.min.messages are queued and then backs off
            # fetch.queue.backoff.ms (1 s by default): that would leave the broker idle.
            "queued.min.messages": 1_000_000,
            "queued.max.messages.kbytes": 262_144,
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        consumer.list_topics(topic, ADMIN_TIMEOUT)
        yield consumer
    finally:
        consumer.close()


def partitions_of(topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, partition, 0) for partition in range(PARTITIONS)]


def consume_phase(consumer: Consumer, topic: str, count: int, size: int, timeout: float) -> None:
    """Assigns the topic's partitions from offset 0 and reads until `count` messages arrived."""
    consumer.assign(partitions_of(topic))
    deadline = time.monotonic() + timeout
    received = 0
    while received < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"consume: {received} of {count} read after {timeout}s")
        batch = consumer.consume(10_000, 0.5)
        for message in batch:
            error = message.error()
            if error is None:
                received += 1
            elif error.fatal() or not error.retriable():
                raise KafkaException(error)
        if batch and batch[0].error() is None and len(batch[0].value() or b"") != size:
            raise RuntimeError(f"consume: a value of {len(batch[0].value() or b'')} B")
    if received != count:
        raise RuntimeError(f"consume: read {received} messages, produced {count}")


def check_consumed(consumer: Consumer, topic: str, count: int) -> str:
    """Fails unless the consumer's positions add up to `count` (each offset read once); returns
    a note when the broker's high watermarks (ListOffsets) disagree with what it served."""
    positions = consumer.position(partitions_of(topic))
    read_up_to = sum(partition.offset for partition in positions)
    if read_up_to != count:
        raise RuntimeError(f"consume: positions add up to {read_up_to}, produced {count}")
    high_watermarks = [
        consumer.get_watermark_offsets(partition, ADMIN_TIMEOUT)[1]
        for partition in partitions_of(topic)
    ]
    if sum(high_watermarks) == count:
        return ""
    return (
        f"ListOffsets(latest) reports high watermarks {high_watermarks} (sum "
        f"{sum(high_watermarks):,}) after serving {count:,} messages at offsets "
        f"{[partition.offset for partition in positions]}"
    )


def broker_version(target: str) -> str:
    if target == "tansu":
        completed = subprocess.run(
            [str(tansu_binary()), "--version"], capture_output=True, timeout=10, check=False
        )
        return completed.stdout.decode(errors="replace").strip()
    if target == "kafka":
        return "Apache Kafka (the version tests/reference/pom.xml pins)"
    from lockgate import __version__

    return f"lockgate {__version__}"


def bench_target(
    target: str,
    counts: dict[int, int],
    scratch: Path,
    timeout: float,
    log: Callable[[str], None],
    batch_messages: int | None = None,
) -> TargetReport:
    report = TargetReport(target)
    try:
        report.version = broker_version(target)
    except (OSError, ImportError, subprocess.SubprocessError, RuntimeError) as exc:
        report.version = f"unknown ({exc})"
    try:
        with running_broker(target, scratch) as (bootstrap, broker):
            create_topics(bootstrap, list(counts))
            idempotence = True
            for size, count in counts.items():
                topic = topic_name(size)
                try:
                    producer, failures = ready_producer(bootstrap, idempotence, batch_messages)
                except ProducerRefused as exc:
                    if not idempotence:
                        raise
                    idempotence = False
                    report.idempotence_note = (
                        f"enable.idempotence=true refused ({exc}); "
                        "FELL BACK to enable.idempotence=false"
                    )
                    log(f"{target}: {report.idempotence_note}")
                    producer, failures = ready_producer(bootstrap, idempotence, batch_messages)
                log(f"{target}: producing {count:,} x {size} B")
                try:
                    with Measurement(broker) as measured:
                        produce_phase(producer, failures, topic, count, size, timeout)
                finally:
                    close_producer(producer)
                report.results.append(
                    PhaseResult(
                        target,
                        size,
                        "produce",
                        count,
                        measured.seconds,
                        measured.broker_user,
                        measured.broker_system,
                        measured.client_cpu,
                        measured.peak_rss,
                        idempotence,
                    )
                )
                log(f"{target}: consuming {count:,} x {size} B")
                with connected_consumer(bootstrap, topic) as consumer:
                    with Measurement(broker) as measured:
                        consume_phase(consumer, topic, count, size, timeout)
                    note = check_consumed(consumer, topic, count)
                if note:
                    report.notes.append(f"{size} B: {note}")
                    log(f"{target}: NOTE: {note}")
                report.results.append(
                    PhaseResult(
                        target,
                        size,
                        "consume",
                        count,
                        measured.seconds,
                        measured.broker_user,
                        measured.broker_system,
                        measured.client_cpu,
                        measured.peak_rss,
                    )
                )
    except (KafkaException, RuntimeError, TimeoutError, OSError, ProducerRefused) as exc:
        report.error = f"{type(exc).__name__}: {exc}"
        log(f"{target}: FAILED: {report.error}")
    return report


IDEMPOTENCE = {True: "on", False: "OFF", None: ""}


def print_table(reports: list[TargetReport]) -> None:
    print(
        "| broker | value | phase | idempotence | messages | seconds | msg/s | MB/s "
        "| broker CPU % | broker sys % | broker CPU s/GB | client CPU % | client CPU s/GB "
        "| broker peak RSS MiB |"
    )
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for report in reports:
        if report.error and not report.results:
            print(f"| {report.target} | | | failed: {report.error} |")
        for result in report.results:
            print(
                f"| {result.target} | {result.size} B | {result.phase} "
                f"| {IDEMPOTENCE[result.idempotence]} | {result.messages:,} "
                f"| {result.seconds:.1f} | {result.messages_per_second:,.0f} "
                f"| {result.megabytes_per_second:.1f} | {result.broker_cpu_percent:.0f} "
                f"| {result.broker_system_percent:.0f} "
                f"| {result.broker_cpu_per_gb:.1f} | {result.client_cpu_percent:.0f} "
                f"| {result.client_cpu_per_gb:.1f} "
                f"| {result.peak_rss_bytes / 2**20:.0f} |"
            )
        if report.error and report.results:
            print(f"| {report.target} | | | failed part-way: {report.error} |")


def cpu_ratios(reports: list[TargetReport]) -> list[dict[str, Any]]:
    """lockgate CPU s/GB divided by tansu's, per (lockgate configuration, size, phase)."""
    tansu = {
        (result.size, result.phase): result
        for report in reports
        if report.target == "tansu"
        for result in report.results
    }
    ratios = []
    for report in reports:
        if not report.target.startswith("lockgate"):
            continue
        for result in report.results:
            reference = tansu.get((result.size, result.phase))
            if reference is None or reference.broker_cpu_per_gb <= 0:
                continue
            ratios.append(
                {
                    "target": result.target,
                    "size": result.size,
                    "phase": result.phase,
                    "ratio": result.broker_cpu_per_gb / reference.broker_cpu_per_gb,
                }
            )
    return ratios


def parse_counts(args: argparse.Namespace) -> dict[int, int]:
    sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    if args.messages is not None:
        return dict.fromkeys(sizes, args.messages)
    return {size: DEFAULT_MESSAGES.get(size, 300_000_000 // size) for size in sizes}


def raise_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    """Turns SIGTERM into SystemExit so that the brokers are stopped on the way out."""
    raise SystemExit(128 + signum)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--messages",
        type=int,
        help="messages per (broker, value size) run; default 3,000,000 for 100 B and "
        "1,000,000 for 1 KiB (300 MB / size for other sizes)",
    )
    parser.add_argument("--sizes", default="100,1024", help="value sizes in bytes")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument(
        "--batch-messages",
        type=int,
        help="cut the producer's batches at this many messages (linger 1 s), so that every "
        "broker's log holds the same batches for the consume phase",
    )
    parser.add_argument(
        "--phase-timeout", type=float, default=900.0, help="seconds allowed per phase"
    )
    args = parser.parse_args()
    targets = [target.strip() for target in args.targets.split(",") if target.strip()]
    unknown = set(targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}; choose from {', '.join(TARGETS)}")
    counts = parse_counts(args)
    signal.signal(signal.SIGTERM, raise_on_sigterm)

    def log(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    machine = (
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.1f} GiB RAM, "
        f"confluent-kafka {client_version()} (librdkafka {libversion()[0]})"
    )
    print(machine)
    batching = (
        f"linger.ms=1000, batch.num.messages={args.batch_messages}"
        if args.batch_messages
        else "linger.ms=10"
    )
    print(
        f"{PARTITIONS} partitions, acks=all, {batching}, batch.size=1000000; "
        + ", ".join(f"{count:,} x {size} B" for size, count in counts.items())
    )
    reports = []
    scratch = Path(tempfile.mkdtemp(prefix="lockgate-bench-throughput-"))
    try:
        for target in targets:
            log(f"{target}: starting")
            reports.append(
                bench_target(target, counts, scratch, args.phase_timeout, log, args.batch_messages)
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print()
    for report in reports:
        print(f"{report.target}: {report.version}")
        if report.idempotence_note:
            print(f"  NOTE: {report.idempotence_note}")
        for note in report.notes:
            print(f"  NOTE: {note}")
    print()
    print_table(reports)
    if any(r.broker_cpu_seconds < 0.3 for report in reports for r in report.results):
        print(
            "\nnote: CPU times come in 10 ms clock ticks; phases with under 0.3 s of broker "
            "CPU give rough CPU s/GB figures (use more --messages)"
        )
    ratios = cpu_ratios(reports)
    if ratios:
        print()
        print("broker CPU s/GB relative to tansu (same value size and phase):")
        for ratio in ratios:
            print(
                f"  {ratio['target']:<20} {ratio['size']:>5} B {ratio['phase']:<8} "
                f"{ratio['ratio']:.2f}x"
            )
    if args.json is not None:
        document = {
            "machine": machine,
            "partitions": PARTITIONS,
            "targets": [
                {
                    "target": report.target,
                    "version": report.version,
                    "idempotence_note": report.idempotence_note,
                    "error": report.error,
                    "notes": report.notes,
                    "results": [result.as_json() for result in report.results],
                }
                for report in reports
            ],
            "cpu_ratio_vs_tansu": ratios,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    if any(report.error for report in reports):
        sys.exit(1)


if __name__ == "__main__":
    main()
