"""Exactly-once chain benchmark: consume → transform → produce → commit the consumed offsets in
the same transaction, by W workers of one consumer group (read_committed, one transactional id
each), until every one of N input records has been copied. Each client is run against each
broker, in one invocation, side by side:

- clients: `franz-go` (Go, franz-go 1.22.3: the program tests/go/franzcheck, built by `make
  go-deps`; kgo.GroupTransactSession, the next transaction begun as soon as the last ended),
  `confluent-kafka` (librdkafka; consume(), produce() per record, send_offsets_to_transaction()
  and commit_transaction(), one transaction per poll batch) and `lockgate` (lockgate's asyncio
  client: poll(), send_batch() per partition, send_offsets_to_transaction(),
  commit_transaction()). Every client polls at most --max-poll records per transaction, and
  each Python worker is a process of its own, as franz-go's workers each have a core to use;
- brokers: `kafka` (Apache Kafka 4.4 from `make reference-deps`, its defaults: no fsync per
  write), `lockgate` (its defaults: fsync durability) and `lockgate-page-cache`
  (lockgate.durability=page-cache, like Kafka). Each is a fresh process on a free loopback port
  with its data in a temporary directory, stopped by PID at the end; every broker forms a new
  group without the initial rebalance delay, as Kafka's test settings do.

The workers start on an empty input topic. Once every worker has partitions, franzcheck fills
the input (N records of --size bytes, round-robin over the partitions; the chain runs
meanwhile) and, after the chain, checks the output read_committed: each input record exactly
once, in input order per partition, and the group's offsets committed to the input's end. A run
that fails the check is marked in the table, its figures still shown.

Figures: records/s from the start of the filling to the last commit, so the group's forming
("join s", shown apart) is not counted; the ratios compare them, lockgate ÷ Kafka for the same
client. "Longest gap" is the longest time without a commit: a stalled chain shows there.
Before the timed runs, each broker gets an untimed franz-go chain of --warm-up records
(its internal topics are created, Kafka's JIT warms up).

    python -m bench.eos_chain [--records 60000] [--workers 2] [--partitions 4] [--max-poll 500]
                              [--size 100] [--brokers kafka,lockgate,lockgate-page-cache]
                              [--clients franz-go,confluent-kafka,lockgate] [--warm-up 5000]
                              [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing
import os
import platform
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from tests.support import franz_go
from tests.support.broker import BrokerProcess
from tests.support.franz_go import franzcheck_binary
from tests.support.reference_kafka import ReferenceKafka, reference_classpath

BROKERS = ("kafka", "lockgate", "lockgate-page-cache")
CLIENTS = ("franz-go", "confluent-kafka", "lockgate")
TIMEOUT = 60.0  # any one client call
NO_JOIN_DELAY = {"group.initial.rebalance.delay.ms": "0"}


@dataclass
class ChainOptions:
    bootstrap: str
    input: str
    output: str
    group: str
    records: int
    max_poll: int


@dataclass
class Run:
    broker: str
    client: str
    records: int = 0
    transactions: int = 0
    aborted: int = 0
    join_seconds: float = 0.0
    seconds: float = 0.0
    records_per_second: float = 0.0
    longest_gap: float = 0.0  # seconds without a commit, at most
    exactly_once: bool = False
    check: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    def row(self) -> str:
        if self.error:
            return f"| {self.broker} | {self.client} | failed: {self.error[:300]} |"
        verdict = "yes" if self.exactly_once else f"**NO** {json.dumps(self.check)[:300]}"
        return (
            f"| {self.broker} | {self.client} | {self.records:,} | {self.transactions:,} "
            f"| {self.aborted} | {self.join_seconds:.1f} | {self.seconds:.1f} "
            f"| {self.records_per_second:,.0f} | {self.longest_gap:.2f} | {verdict} |"
        )


# -- brokers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def running_broker(name: str, scratch: Path) -> Iterator[str]:
    """A fresh broker; stopped by its PID (SIGTERM, then SIGKILL) on the way out."""
    data = scratch / name / "data"
    data.parent.mkdir(parents=True)
    if name == "kafka":
        classpath = reference_classpath()
        if classpath is None:
            raise RuntimeError("Apache Kafka's jars are not resolved: run `make reference-deps`")
        kafka = ReferenceKafka(data, classpath, NO_JOIN_DELAY).start()
        try:
            yield kafka.bootstrap
        finally:
            kafka.stop()
        return
    settings = dict(NO_JOIN_DELAY)
    if name == "lockgate-page-cache":
        settings["lockgate.durability"] = "page-cache"
    elif name != "lockgate":
        raise ValueError(f"unknown broker {name!r}")
    broker = BrokerProcess(data, settings).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


# -- franz-go --------------------------------------------------------------------------------


def franzcheck(args: argparse.Namespace, options: ChainOptions, steps: str) -> dict[str, Any]:
    """Runs franzcheck's eos mode for `steps` and returns its JSON line."""
    binary = franzcheck_binary()
    if binary is None:
        raise RuntimeError("franz-go's check program is not built: run `make go-deps`")
    return franz_go.run(
        binary, "eos", timeout=args.run_timeout, brokers=options.bootstrap, input=options.input,
        output=options.output, group=options.group, records=options.records,
        workers=args.workers, partitions=args.partitions, max_poll=options.max_poll,
        value_size=args.size, steps=steps,
    )  # fmt: skip


def exactly_once(check: dict[str, Any], records: int) -> bool:
    return (
        check["output_records"] == records
        and check["missing"] == check["duplicates"] == check["foreign"] == 0
        and check["in_order"]
        and check["offsets_committed"]
        and not check["failures"]
    )


CHECKED = ("output_records", "missing", "duplicates", "foreign", "in_order",
           "offsets_committed", "failures")  # fmt: skip


# -- the Python clients' workers (each in a process of its own) -------------------------------


@dataclass
class WorkerReport:
    commits: list[tuple[float, int]]  # (time.monotonic() at the commit's end, records)
    aborted: int


# what a worker tells the parent: ("assigned", worker, None) once it has partitions, then
# ("done", worker, its report) or ("failed", worker, why)
Report = tuple[str, int, WorkerReport | str | None]


def positions_after(records: list[tuple[int, int]]) -> dict[int, int]:
    """{partition: the offset after the last of `records` (partition, offset) there}."""
    positions: dict[int, int] = {}
    for partition, offset in records:
        positions[partition] = max(positions.get(partition, 0), offset + 1)
    return positions


class Joined:
    """Tells the parent, once, that the worker has partitions."""

    def __init__(self, worker: int, reports: Queue[Report]) -> None:
        self.worker, self.reports, self.told = worker, reports, False

    def check(self, assignment: list[Any]) -> None:
        if assignment and not self.told:
            self.told = True
            self.reports.put(("assigned", self.worker, None))


def confluent_chain(
    options: ChainOptions, worker: int, committed: Synchronized[int], stop: Event, joined: Joined
) -> WorkerReport:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": options.bootstrap,
            "group.id": options.group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": options.bootstrap,
            "transactional.id": f"{options.group}-{worker}",
        }
    )
    producer.init_transactions(TIMEOUT)
    consumer.subscribe([options.input])
    report = WorkerReport([], 0)
    while not stop.is_set():
        records: list[tuple[int, int, bytes | None, bytes | None]] = []
        for message in consumer.consume(options.max_poll, 0.1):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(error)
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None  # set on every record
            records.append((partition, offset, message.key(), message.value()))
        joined.check(consumer.assignment())
        if not records:
            continue
        group_metadata = consumer.consumer_group_metadata()
        producer.begin_transaction()
        for partition, _offset, key, value in records:
            producer.produce(options.output, b"out:" + (value or b""), key, partition=partition)
        read = [(partition, offset) for partition, offset, _key, _value in records]
        offsets = [
            TopicPartition(options.input, partition, offset)
            for partition, offset in positions_after(read).items()
        ]
        try:
            producer.send_offsets_to_transaction(offsets, group_metadata, TIMEOUT)
            producer.commit_transaction(TIMEOUT)
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(TIMEOUT)
            report.aborted += 1
            for tp in consumer.committed(consumer.assignment(), timeout=TIMEOUT):
                consumer.seek(TopicPartition(options.input, tp.partition, max(tp.offset, 0)))
            continue
        report.commits.append((time.monotonic(), len(records)))
        add(committed, len(records), options.records, stop)
    consumer.close()
    return report


async def lockgate_chain(
    options: ChainOptions, worker: int, committed: Synchronized[int], stop: Event, joined: Joined
) -> WorkerReport:
    from lockgate.client.cluster import TopicPartition
    from lockgate.client.consumer import Consumer
    from lockgate.client.errors import KafkaError
    from lockgate.client.producer import Producer

    consumer = Consumer(
        options.bootstrap,
        group_id=options.group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    producer = Producer(options.bootstrap, transactional_id=f"{options.group}-{worker}")
    report = WorkerReport([], 0)
    async with consumer, producer:
        await producer.init_transactions()
        consumer.subscribe([options.input])
        while not stop.is_set():
            batch = await consumer.poll(100)
            joined.check(consumer.assignment())
            # a poll brings whatever its fetches did: cut into transactions of --max-poll
            for start in range(0, len(batch), options.max_poll):
                chunk = batch[start : start + options.max_poll]
                by_partition: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
                for message in chunk:
                    by_partition.setdefault(message.partition, []).append(
                        (message.key, b"out:" + (message.value or b""))
                    )
                group_metadata = consumer.group_metadata()
                producer.begin_transaction()
                try:
                    sent = [
                        await producer.send_batch(options.output, records, partition=partition)
                        for partition, records in by_partition.items()
                    ]
                    read = [(m.partition, m.offset) for m in chunk]
                    offsets = {
                        TopicPartition(options.input, partition): offset
                        for partition, offset in positions_after(read).items()
                    }
                    await producer.send_offsets_to_transaction(offsets, group_metadata)
                    await producer.commit_transaction()
                    await asyncio.gather(*sent)
                except KafkaError:
                    await producer.abort_transaction()  # raises when the producer is fenced
                    report.aborted += 1
                    assigned = consumer.assignment()
                    for tp, at in (await consumer.committed(assigned)).items():
                        if at is not None:
                            consumer.seek(tp, at.offset)
                        else:
                            await consumer.seek_to_beginning([tp])
                    break
                report.commits.append((time.monotonic(), len(chunk)))
                add(committed, len(chunk), options.records, stop)
    return report


def add(committed: Synchronized[int], records: int, total: int, stop: Event) -> None:
    with committed.get_lock():
        committed.value += records
        if committed.value >= total:
            stop.set()


def chain_worker(
    client: str,
    options: ChainOptions,
    worker: int,
    committed: Synchronized[int],
    stop: Event,
    reports: Queue[Report],
) -> None:
    joined = Joined(worker, reports)
    try:
        if client == "confluent-kafka":
            report = confluent_chain(options, worker, committed, stop, joined)
        else:
            report = asyncio.run(lockgate_chain(options, worker, committed, stop, joined))
        reports.put(("done", worker, report))
    except BaseException as exc:  # the parent reports it
        stop.set()
        reports.put(("failed", worker, f"worker {worker}: {type(exc).__name__}: {exc}"))


def python_chain(client: str, args: argparse.Namespace, options: ChainOptions, run: Run) -> None:
    """Runs `args.workers` worker processes of `client`; once each has partitions, fills the
    input (franzcheck), and waits until every record is committed."""
    context = multiprocessing.get_context("spawn")
    committed = context.Value("q", 0)
    stop = context.Event()
    reports: Queue[Report] = context.Queue()
    joining = time.monotonic()
    workers = [
        context.Process(
            target=chain_worker, args=(client, options, n, committed, stop, reports), daemon=True
        )
        for n in range(args.workers)
    ]
    for process in workers:
        process.start()
    assigned: set[int] = set()
    collected: list[WorkerReport] = []
    failures: list[str] = []
    started = 0.0
    try:
        while len(collected) + len(failures) < len(workers):
            what, worker, detail = reports.get(timeout=args.run_timeout)
            if what == "assigned":
                assigned.add(worker)
                if len(assigned) == len(workers):
                    started = time.monotonic()
                    run.join_seconds = started - joining
                    franzcheck(args, options, "fill")
            elif isinstance(detail, WorkerReport):
                collected.append(detail)
            else:
                failures.append(str(detail))
    except queue.Empty:
        failures.append(f"no word from the workers within {args.run_timeout} s")
    finally:
        stop.set()
        for process in workers:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join(10)
    if failures:
        raise RuntimeError("; ".join(failures))
    commits = sorted(commit for report in collected for commit in report.commits)
    run.transactions = len(commits)
    run.aborted = sum(report.aborted for report in collected)
    if commits and started:
        run.seconds = commits[-1][0] - started
        run.records_per_second = sum(count for _, count in commits) / run.seconds
        times = [started] + [at for at, _ in commits]
        run.longest_gap = max(later - earlier for earlier, later in itertools.pairwise(times))


# -- one run ---------------------------------------------------------------------------------


def bench_run(broker: str, client: str, bootstrap: str, args: argparse.Namespace) -> Run:
    run = Run(broker, client, records=args.records)
    options = ChainOptions(
        bootstrap, f"{client}-in", f"{client}-out", f"{client}-chain", args.records, args.max_poll
    )
    try:
        if client == "franz-go":
            result = franzcheck(args, options, "create,chain,fill,check")
            run.transactions, run.aborted = result["transactions"], result["aborted"]
            run.join_seconds, run.seconds = result["join_seconds"], result["seconds"]
            run.records_per_second = result["records_per_second"]
            run.longest_gap = result["longest_gap_seconds"]
        else:
            franzcheck(args, options, "create")
            python_chain(client, args, options, run)
            result = franzcheck(args, options, "check")
    except (RuntimeError, AssertionError, subprocess.TimeoutExpired) as exc:
        run.error = str(exc)
        return run
    run.check = {name: result[name] for name in CHECKED}
    run.exactly_once = exactly_once(result, args.records)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-poll", type=int, default=500, help="records per transaction")
    parser.add_argument("--size", type=int, default=100, help="input value bytes")
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--run-timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument(
        "--warm-up", type=int, default=5000, help="records of an untimed franz-go chain first"
    )
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    brokers = [name.strip() for name in args.brokers.split(",") if name.strip()]
    clients = [name.strip() for name in args.clients.split(",") if name.strip()]
    for name in clients:
        if name not in CLIENTS:
            parser.error(f"unknown client {name!r}: {', '.join(CLIENTS)}")

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(
        f"{args.records:,} records of {args.size} B over {args.partitions} partitions, "
        f"{args.workers} workers per client, at most {args.max_poll} records per transaction, "
        f"after a franz-go chain of {args.warm_up:,} records on each broker"
    )
    print(
        f"lockgate {commit or '?'}, {platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    print()
    runs: list[Run] = []
    scratch = Path(tempfile.mkdtemp(prefix="lockgate-bench-eos-"))
    try:
        for broker in brokers:
            print(f"running {broker} ...", file=sys.stderr, flush=True)
            try:
                with running_broker(broker, scratch) as bootstrap:
                    if args.warm_up:
                        # the broker's first transactions and groups (its internal topics,
                        # and Kafka's JIT) are not what is measured
                        warm_up = ChainOptions(bootstrap, "warm-up-in", "warm-up-out",
                                               "warm-up", args.warm_up, args.max_poll)  # fmt: skip
                        franzcheck(args, warm_up, "create,chain,fill")
                    for client in clients:
                        print(f"  {client} ...", file=sys.stderr, flush=True)
                        runs.append(bench_run(broker, client, bootstrap, args))
            except (RuntimeError, ValueError) as exc:
                runs += [Run(broker, client, error=str(exc)) for client in clients]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(
        "| broker | client | records | transactions | aborted | join s | seconds | records/s "
        "| longest gap s | exactly once |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for run in runs:
        print(run.row())
    print()
    print("records/s, lockgate ÷ Kafka, same client:")
    by_key = {(run.broker, run.client): run for run in runs if not run.error}
    for client in clients:
        kafka = by_key.get(("kafka", client))
        for broker in brokers:
            ours = by_key.get((broker, client))
            if broker == "kafka" or ours is None or kafka is None:
                continue
            if kafka.records_per_second > 0:
                ratio = ours.records_per_second / kafka.records_per_second
                print(f"  {client:<16} {broker:<20} {ratio:.2f}×")
    if args.json:
        args.json.write_text(json.dumps([asdict(run) for run in runs], indent=2))
    if any(run.error or not run.exactly_once for run in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
