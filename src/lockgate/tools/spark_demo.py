# tools/spark_demo.py — `lockgate demo`: the exactly-once Spark pipeline end to end, with a crash.
# Starts a broker (2PC enabled) in a child process, feeds orders transactionally (plus one aborted
# transaction that must never surface), runs the pipeline of pipeline.py as its own Spark driver,
# SIGKILLs that driver (JVM and Python workers: the whole process group) while a micro-batch has
# written but not committed, restarts it from its checkpoint and checks the output: every
# committed order id exactly once, no aborted one. Exit status 0 only when that holds.
#
# Everything it starts is a child it kills by pid/process group; nothing leaves 127.0.0.1.
from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, Message
from lockgate.client.producer import Producer
from lockgate.tools.devcluster import DevCluster, etcd_available, free_port, stop_process

INPUT, OUTPUT = "orders", "orders-enriched"
DRIVER_TIMEOUT_S = 600.0
TRANSACTION_COORDINATOR = 1  # FindCoordinator's key type for transactional ids
# The cluster's brokers: the sinks' two-phase commit, and failover in about 3 s (a broker's
# lease lapses after 3 s without a heartbeat) so that the demo does not wait long for it.
CLUSTER_SETTINGS = (
    "transaction.two.phase.commit.enable=true",
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.lag.time.max.ms=3000",
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "demo",
        help="exactly-once Spark pipeline demo: crash the driver mid-batch, restart, verify",
        description="Needs the spark extra (pip install 'lockgate[spark]') and Java.",
    )
    parser.add_argument("--records", type=int, default=3000, help="orders to feed (committed)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of both topics")
    parser.add_argument(
        "--per-trigger", type=int, default=400, help="maxOffsetsPerTrigger of the pipeline"
    )
    parser.add_argument(
        "--kill-after-batches",
        type=int,
        default=2,
        help="kill the driver during the first micro-batch after this many have committed",
    )
    parser.add_argument(
        "--master",
        help="run the pipeline's driver through spark-submit on this cluster (spark://host:port); "
        "default: local[2] inside the driver",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="start 3 etcd members and 3 brokers (needs etcd) and give the topics 3 replicas",
    )
    parser.add_argument(
        "--kill",
        choices=("driver", "broker", "both"),
        help="what is killed mid-batch: the Spark driver (the default on one broker), the "
        "broker that matters most to the batch (the default with --cluster), or both at once",
    )
    parser.add_argument("--work-dir", help="broker data, checkpoint and logs (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir afterwards")
    parser.set_defaults(func=_run)


# ---------------------------------------------------------------------------------------------
# Progress display: one rewritten line on a terminal, a line every few seconds otherwise.


class Progress:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.last_line = 0.0
        self.width = 0

    def show(self, text: str) -> None:
        if self.tty:
            self.out.write("\r" + text.ljust(self.width))
            self.width = len(text)
            self.out.flush()
        elif time.monotonic() - self.last_line >= 5:
            self.last_line = time.monotonic()
            print(f"  … {text}", file=self.out, flush=True)

    def say(self, text: str) -> None:
        if self.tty and self.width:
            self.out.write("\r" + " " * self.width + "\r")
            self.width = 0
        print(text, file=self.out, flush=True)


# ---------------------------------------------------------------------------------------------
# Children: the broker and the Spark driver


def _start_broker(data_dir: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    with open(log, "ab") as out:
        broker = subprocess.Popen(
            [sys.executable, "-m", "lockgate.cli", "serve", "--data-dir", str(data_dir),
             "--listen", bootstrap, "--set", "transaction.two.phase.commit.enable=true"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if broker.poll() is not None:
            raise RuntimeError(f"the broker exited ({broker.returncode}); see {log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return broker, bootstrap
        except OSError:
            time.sleep(0.1)
    broker.kill()
    raise RuntimeError(f"the broker did not listen on {bootstrap} within 30 s; see {log}")


def _start_driver(
    args: argparse.Namespace, bootstrap: str, checkpoint: Path, log: Path
) -> subprocess.Popen[bytes]:
    """A new session (process group), so that one killpg takes the JVM and the Python workers
    with the driver, as a machine failure would. With --master, the driver goes through
    spark-submit to that cluster, whose executors run this interpreter too."""
    pipeline = ["--bootstrap", bootstrap, "--input", INPUT, "--output", OUTPUT, "--checkpoint",
                str(checkpoint), "--max-offsets-per-trigger", str(args.per_trigger)]  # fmt: skip
    if args.master:
        import pyspark

        from lockgate.spark import pipeline as module

        submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        command = [str(submit), "--master", args.master, "--conf", "spark.speculation=false",
                   "--conf", f"spark.pyspark.python={sys.executable}",
                   str(module.__file__)]  # fmt: skip
    else:
        command = [sys.executable, "-m", "lockgate.spark.pipeline"]
    with open(log, "ab") as out:
        return subprocess.Popen(
            command + pipeline, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def _batches(checkpoint: Path, kind: str) -> set[int]:
    """Batch ids Spark has planned ("offsets") or committed ("commits")."""
    folder = checkpoint / kind
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


# ---------------------------------------------------------------------------------------------
# Data: feeding and reading back


def _order(order_id: int) -> bytes:
    return json.dumps(
        {"id": order_id, "customer": f"c{order_id % 17}", "amount_cents": (order_id * 37) % 20000}
    ).encode()


async def _wait_for_brokers(bootstrap: str, count: int, timeout: float = 60.0) -> None:
    """Until metadata lists `count` brokers: topics of `count` replicas are refused before."""
    deadline = time.monotonic() + timeout
    async with Admin(bootstrap) as admin:
        while len((await admin.cluster.refresh_metadata(())).brokers) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {count} brokers registered after {timeout} s")
            await asyncio.sleep(0.2)


async def _feed(
    bootstrap: str, records: int, partitions: int, replication: int, progress: Progress
) -> int:
    """Committed orders 0..records-1 in transactions of 250, and one aborted transaction of
    orders with negative ids in the middle; returns how many were aborted."""
    # With replicas, two of them in sync: an acknowledged write survives the loss of a broker.
    configs = {"min.insync.replicas": "2"} if replication > 2 else {}
    async with Admin(bootstrap) as admin:
        for topic in (INPUT, OUTPUT):
            await admin.create_topic(topic, partitions, replication, configs)
    aborted = 0
    async with Producer(bootstrap, transactional_id="lockgate-demo-feeder") as producer:
        await producer.init_transactions()
        for start in range(0, records, 250):
            producer.begin_transaction()
            for order_id in range(start, min(start + 250, records)):
                await producer.send(INPUT, _order(order_id), f"c{order_id % 17}".encode())
            await producer.commit_transaction()
            progress.show(f"feeding orders: {min(start + 250, records)}/{records} committed")
            if start == (records // 500) * 250:
                producer.begin_transaction()
                for order_id in range(-1, -101, -1):
                    await producer.send(INPUT, _order(order_id), b"rejected")
                await producer.flush()  # in the log, so only read_committed keeps it out
                await producer.abort_transaction()
                aborted = 100
    return aborted


async def _read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[Message]:
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    found: list[Message] = []
    async with Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as c:
        c.assign(wanted)
        ends = await c.end_offsets(wanted)
        deadline = time.monotonic() + 60
        while any([await c.position(tp) < ends[tp] for tp in wanted]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} back took more than 60 s")
            found.extend(await c.poll(500))
    return found


async def _open_output_records(bootstrap: str, partitions: int) -> int:
    """High watermark minus last stable offset over the output: records written by a
    transaction that is still open (written or prepared, not completed)."""
    wanted = [TopicPartition(OUTPUT, p) for p in range(partitions)]
    async with (
        Consumer(bootstrap, isolation_level="read_uncommitted") as dirty,
        Consumer(bootstrap, isolation_level="read_committed") as clean,
    ):
        high = await dirty.end_offsets(wanted)
        stable = await clean.end_offsets(wanted)
    return sum(high[tp] - stable[tp] for tp in wanted)


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class Outcome:
    killed_in_batch: int | None = None
    open_records_at_kill: int = 0
    committed_before_kill: int = 0
    killed_driver: bool = False
    killed_broker: int | None = None
    broker_roles: list[str] = field(default_factory=list)
    driver_runs: int = 0
    batches: int = 0
    notes: list[str] = field(default_factory=list)


class Run:
    """One demo run: the drivers it starts, what it kills and when, what it saw."""

    def __init__(
        self,
        args: argparse.Namespace,
        work: Path,
        bootstrap: str,
        cluster: DevCluster | None,
        progress: Progress,
    ) -> None:
        self.args = args
        self.work = work
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.progress = progress
        self.checkpoint = work / "checkpoint"
        self.kill = args.kill or ("broker" if cluster is not None else "driver")
        self.outcome = Outcome()

    def start_driver(self) -> subprocess.Popen[bytes]:
        self.outcome.driver_runs += 1
        log = self.work / f"driver-{self.outcome.driver_runs}.log"
        return _start_driver(self.args, self.bootstrap, self.checkpoint, log)

    async def pipeline(self) -> None:
        """The first driver until the kill point, then whatever it takes to finish: the
        first driver still running, or a new one from the checkpoint."""
        driver = self.start_driver()
        try:
            await self._until_kill_point(driver)
            if driver.poll() is None:
                await self._wait(driver)
        finally:
            if driver.poll() is None:
                _kill_group(driver)
        outcome = self.outcome
        if driver.returncode != 0:
            if not outcome.killed_driver:
                outcome.notes.append(
                    f"the first driver failed (exit {driver.returncode}; see driver-1.log) and "
                    "was restarted from its checkpoint"
                )
            again = self.start_driver()
            try:
                await self._wait(again)
            finally:
                if again.poll() is None:
                    _kill_group(again)
            if again.returncode != 0:
                log = self.work / f"driver-{outcome.driver_runs}.log"
                raise RuntimeError(
                    f"the restarted driver failed (exit {again.returncode}); see {log}"
                )
        elif outcome.killed_broker is not None:
            outcome.notes.append("the driver carried on through the broker's failover")
        self._restart_broker()  # if the pipeline finished without it
        outcome.batches = len(_batches(self.checkpoint, "commits"))

    async def _until_kill_point(self, driver: subprocess.Popen[bytes]) -> None:
        """Watches the first driver until a micro-batch after --kill-after-batches has written
        output it has not committed, then kills what --kill names."""
        outcome = self.outcome
        deadline = time.monotonic() + DRIVER_TIMEOUT_S
        while driver.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the first driver ran for {DRIVER_TIMEOUT_S} s")
            planned = _batches(self.checkpoint, "offsets")
            committed = _batches(self.checkpoint, "commits")
            running = sorted(planned - committed)
            open_records = await _open_output_records(self.bootstrap, self.args.partitions)
            self.progress.show(
                f"run 1: {len(committed)} micro-batches committed"
                + (f", batch {running[0]} running, {open_records} output records uncommitted"
                   if running else ", starting")
            )  # fmt: skip
            if len(committed) >= self.args.kill_after_batches and running and open_records > 0:
                outcome.killed_in_batch = running[0]
                outcome.open_records_at_kill = open_records
                outcome.committed_before_kill = len(committed)
                if self.kill in ("broker", "both"):
                    await self._kill_broker()
                if self.kill in ("driver", "both"):
                    _kill_group(driver)
                    outcome.killed_driver = True
                return
            await asyncio.sleep(0.05)
        outcome.notes.append(
            f"the first driver finished (exit {driver.returncode}) before a kill point came; "
            "use more --records or a smaller --per-trigger"
        )

    async def _kill_broker(self) -> None:
        """kill -9 of the broker with the most to do for the batch being written: coordinating
        the sink's transactions first, then leading output partitions."""
        assert self.cluster is not None
        roles = await _roles(self.bootstrap, self.checkpoint, self.args.partitions)
        victim = max(
            roles,
            key=lambda node: (
                sum(role.startswith("transaction coordinator") for role in roles[node]),
                len(roles[node]),
            ),
        )
        self.cluster.kill_broker(victim)
        self.outcome.killed_broker = victim
        self.outcome.broker_roles = roles[victim]

    def _restart_broker(self) -> None:
        """Starts the killed broker again (once): it rejoins and catches up as a follower."""
        node = self.outcome.killed_broker
        if self.cluster is not None and node is not None and self.cluster.brokers[node] is None:
            self.cluster.start_broker(node)
            committed = len(_batches(self.checkpoint, "commits"))
            self.outcome.notes.append(
                f"broker {node} started again after {committed} micro-batches had committed"
            )

    async def _wait(self, driver: subprocess.Popen[bytes]) -> None:
        """Until `driver` exits (bounded). The killed broker is started again once the batch
        it was killed in has committed."""
        run = self.outcome.driver_runs
        deadline = time.monotonic() + DRIVER_TIMEOUT_S
        while driver.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"driver {run} ran for {DRIVER_TIMEOUT_S} s")
            committed = _batches(self.checkpoint, "commits")
            if self.outcome.killed_in_batch in committed:
                self._restart_broker()
            down = self.outcome.killed_broker
            self.progress.show(
                f"run {run}{' (restarted from the checkpoint)' if run > 1 else ''}: "
                f"{len(committed)} micro-batches committed"
                + (f", broker {down} down" if down is not None and self.cluster is not None
                   and self.cluster.brokers[down] is None else "")
            )  # fmt: skip
            await asyncio.sleep(0.25)


async def _roles(bootstrap: str, checkpoint: Path, partitions: int) -> dict[int, list[str]]:
    """What each broker does for the micro-batch being written: the transaction coordinator
    of which of the sink's ids (one per write task: the pipeline writes from each input
    partition's task), the leader of which output partitions."""
    from lockgate.spark.source import stream_prefix

    prefix = stream_prefix({"checkpointLocation": str(checkpoint)})
    roles: dict[int, list[str]] = collections.defaultdict(list)
    async with Admin(bootstrap) as admin:
        for task in range(partitions):
            transactional_id = f"{prefix}-{task}"
            node = await admin.cluster.find_coordinator(TRANSACTION_COORDINATOR, transactional_id)
            roles[node].append(f"transaction coordinator of {transactional_id}")
        (output,) = await admin.describe_topics([OUTPUT])
        for partition in output.partitions:
            roles[partition.leader_id].append(f"leader of {OUTPUT}-{partition.partition}")
    return roles


async def _demo(args: argparse.Namespace, work: Path, progress: Progress) -> int:
    cluster: DevCluster | None = None
    broker: subprocess.Popen[bytes] | None = None
    if args.cluster:
        cluster = DevCluster(work / "cluster", settings=CLUSTER_SETTINGS)
    try:
        if cluster is not None:
            bootstrap = cluster.start().bootstrap
            await _wait_for_brokers(bootstrap, len(cluster.brokers))
            replication = len(cluster.brokers)
            progress.say(
                f"cluster of {replication} brokers on {bootstrap} and {len(cluster.etcd.members)} "
                f"etcd members (two-phase commit enabled), work dir {work}"
            )
        else:
            broker, bootstrap = _start_broker(work / "broker", work / "broker.log")
            replication = 1
            progress.say(f"broker on {bootstrap} (two-phase commit enabled), work dir {work}")
        aborted = await _feed(bootstrap, args.records, args.partitions, replication, progress)
        progress.say(
            f"fed {args.records} orders in committed transactions and {aborted} in an aborted one"
            + (f" (topics of {replication} replicas, 2 in sync)" if replication > 1 else "")
        )
        run = Run(args, work, bootstrap, cluster, progress)
        await run.pipeline()
        outcome = run.outcome
        where = (
            f"in micro-batch {outcome.killed_in_batch}, after {outcome.committed_before_kill} "
            f"committed batches, with {outcome.open_records_at_kill} output records written but "
            "not committed"
        )
        if outcome.killed_broker is not None:
            progress.say(
                f"killed broker {outcome.killed_broker} (kill -9) {where}; it was "
                + ", ".join(outcome.broker_roles)
            )
        if outcome.killed_driver:
            progress.say(f"killed the Spark driver (kill -9, JVM and workers) {where}")
        progress.say(
            f"{outcome.batches} micro-batches in all, {outcome.driver_runs} driver run(s)"
            + (" (restarted from the checkpoint)" if outcome.driver_runs > 1 else "")
        )
        return _report(
            args,
            outcome,
            aborted,
            await _read_all(bootstrap, OUTPUT, args.partitions, "read_committed"),
            await _read_all(bootstrap, OUTPUT, args.partitions, "read_uncommitted"),
            progress,
        )
    finally:
        if cluster is not None:
            cluster.stop()
        if broker is not None:
            stop_process(broker)


def _report(
    args: argparse.Namespace,
    outcome: Outcome,
    aborted: int,
    committed: list[Message],
    everything: list[Message],
    progress: Progress,
) -> int:
    counts = collections.Counter(json.loads(m.value or b"{}").get("id") for m in committed)
    expected = set(range(args.records))
    missing = expected - set(counts)
    duplicated = {i: n for i, n in counts.items() if n > 1}
    unexpected = set(counts) - expected
    ok = not missing and not duplicated and not unexpected
    killed = [
        *([f"broker {outcome.killed_broker}"] if outcome.killed_broker is not None else []),
        *(["the Spark driver"] if outcome.killed_driver else []),
    ]
    lines = [
        "",
        "report",
        f"  killed (kill -9) mid-batch         {' and '.join(killed) or 'nothing'}",
        f"  orders committed to the input      {args.records}",
        f"  orders aborted in the input        {aborted} (must not appear)",
        f"  output records, read_committed     {len(committed)}",
        f"  distinct order ids in the output   {len(counts)}",
        f"  missing ids                        {len(missing)}",
        f"  duplicated ids                     {len(duplicated)}",
        f"  ids that were never committed      {len(unexpected)}",
        f"  output records in the log, incl. aborted transactions (read_uncommitted) "
        f"{len(everything)}",
        *(f"  note: {n}" for n in outcome.notes),
        "",
        "EXACTLY ONCE: every committed order appears once in the output"
        if ok
        else "NOT EXACTLY ONCE — see above",
    ]
    for line in lines:
        progress.say(line)
    return 0 if ok else 1


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop the children


def _run(args: argparse.Namespace) -> int:
    if shutil.which("java") is None:
        print("lockgate demo: Spark needs Java (e.g. apt install openjdk-17-jre-headless)")
        return 2
    if args.cluster and not etcd_available():
        print("lockgate demo --cluster: needs etcd and etcdctl (Debian: etcd-server etcd-client)")
        return 2
    if args.kill in ("broker", "both") and not args.cluster:
        print(f"lockgate demo: --kill {args.kill} needs --cluster (one broker cannot fail over)")
        return 2
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("lockgate demo: needs PySpark: pip install 'lockgate[spark]'")
        return 2
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="lockgate-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    progress = Progress(sys.stdout)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        return asyncio.run(_demo(args, work, progress))
    finally:
        if args.keep or args.work_dir:
            progress.say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
