"""One or many fault runs: `python -m tests.faults.run --seeds 1-200 [--duration 20]`.

Each seed starts a broker behind the fault proxy, runs the workload (workload.py: transactional
writers and a consume-transform-produce stage; share_workload.py: two share consumers of a
read_committed share group on the stage's input) while a nemesis driven by the seed injects faults
(kill -9 and restart of the broker, SIGSTOP pauses longer than the session and transaction
timeouts, dropped/delayed/duplicated frames, cut connections, and the delayed EndTxn: an EndTxn
held back while the writer goes on), then heals everything, lets the clients finish, waits until
no transaction is open, reads every partition read_committed, lets the share consumers finish
(until the share group's start offsets reach the ends) and checks the history (checker.py).
Prints a table of anomaly counts per seed; exits 1 if there is any.

--tiered adds KIP-405 tiered storage: an S3Proxy server per seed, its topics (but the share
group's) copied to it with small segments and a small local retention, so that the final reads
take most of the history from the object store; the nemesis also kills the broker the moment an
upload begins; at the end, every tiered partition's objects are listed for the checker (orphans,
manifest ranges).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lockgate.client.admin import Admin
from lockgate.client.consumer import Consumer
from lockgate.storage.object_store import S3ObjectStore, S3Settings
from lockgate.tiered.layout import RemoteSegment, partition_prefix
from lockgate.tiered.listing import scan
from tests.faults import share_workload, workload
from tests.faults.checker import check, table
from tests.faults.history import History, load
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.fault_proxy import Direction, FaultProxy, broker_behind
from tests.support.object_store import S3ProxyServer
from tests.support.tiered import broker_settings, store_settings

log = logging.getLogger("faults")

PRODUCE, ADD_PARTITIONS, END_TXN, TXN_OFFSET_COMMIT = 0, 24, 26, 28
BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    # share consumers assigned within a second; a record whose holder vanished without its
    # connection closing (a paused broker) comes back after a 5 s lock
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.assignment.interval.ms": "0",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": "5000",
    # a reader that starts its consumer anew while the broker is away cannot leave the group:
    # the member it leaves behind keeps its share of the partitions until its session
    # expires, which must come well before the share consumers' finish (SHARE_FINISH_TIMEOUT_S)
    "group.share.min.session.timeout.ms": "6000",
    "group.share.session.timeout.ms": "8000",
    "share.coordinator.state.topic.num.partitions": "1",
}
SHARE_GROUP = "share"
SHARE_TOPICS = (workload.PIPE_INPUT,)
SHARE_DELIVERY_LIMIT = 5  # the group's share.delivery.count.limit (the default)
SHARE_GROUP_CONFIGS = {
    "share.auto.offset.reset": "earliest",
    "share.isolation.level": "read_committed",
    "share.delivery.count.limit": str(SHARE_DELIVERY_LIMIT),
}
FAULTS = ("kill", "pause", "drop", "delay-end-txn", "duplicate", "cut", "crash-client")
HEAL_TIMEOUT_S = 60.0

# --lifecycle: storage runs for weeks in a few seconds. Small segments everywhere (the internal
# topics too), retention checked every second, a topic with a 4 s retention, a keyed topic, and
# the broker killed more often; the keyed topic and the internal ones compacted all along.
LIFECYCLE_SETTINGS = {
    "log.segment.bytes": "16384",
    "log.retention.check.interval.ms": "1000",
    "log.cleaner.backoff.ms": "500",
    "log.cleaner.min.cleanable.ratio": "0.1",
    "offsets.topic.segment.bytes": "16384",
    "transaction.state.log.segment.bytes": "16384",
}
# internal.segment.bytes: segments below segment.bytes' minimum of 1 MiB, as Kafka's tests
RETAINED_TOPIC_CONFIG = {"retention.ms": "4000", "internal.segment.bytes": "8192"}
KEYED_TOPIC_CONFIG = {"internal.segment.bytes": "8192", "cleanup.policy": "compact"}
COMPACTED_TOPICS: list[str] = [workload.KEYED_TOPIC]
LIFECYCLE_FAULTS = (*FAULTS, "kill", "kill", "kill")

# --tiered: the topics but the share group's (share fetches read local segments only, so a
# share partition must keep its history local) copy every segment to the object store and
# keep little locally. A partition gets some 20-30 KiB in a 12 s run: 2 KiB segments make a
# dozen copies of each, and a few kills land amid them. The broker's pass runs every 200 ms
# (broker_settings), and two extra kills aim at uploads.
TIERED_TOPICS = tuple(t for t in (*workload.TOPICS, workload.PIPE_OUTPUT) if t not in SHARE_TOPICS)
TIERED_TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "internal.segment.bytes": "2048",
    "local.retention.bytes": "2048",
}
TIERED_FAULTS = ("kill-upload", "kill-upload")
UPLOAD_WATCH_S = 3.0  # how long kill-upload waits for an upload to begin
TIERED_SETTLE_S = 60.0  # how long the end waits for the last rolled segments to be copied
PASS_INTERVAL_S = 0.2  # the broker's remote.log.manager.task.interval.ms
# what the broker logs when it deletes the objects of an interrupted copy (manager.py)
CLEANUP_LINE = "objects of interrupted"


@dataclass
class SeedResult:
    anomalies: Counter[str]
    faults: Counter[str]
    disk_max_bytes: int = 0  # the data directory's largest size seen during the run
    disk_end_bytes: dict[str, int] = field(default_factory=dict)  # per topic, at the end
    # --tiered: the share of the tiered partitions' offsets held remotely at the end, and how
    # often a restarted broker found (and deleted) the objects of an interrupted copy
    remote_share: float = 0.0
    cleanups: int = 0


class ConfluentWriterProcess:
    """confluent_writer.py in a child process; each incarnation has its own history file."""

    def __init__(self, name: str, bootstrap: str, scratch: Path, seed: int) -> None:
        self.name, self.bootstrap, self.scratch, self.seed = name, bootstrap, scratch, seed
        self.stop_file = scratch / f"stop-{name}"
        self.incarnation = 0
        self.histories: list[Path] = []
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.incarnation += 1
        history = self.scratch / f"history-{self.name}-{self.incarnation}.jsonl"
        self.histories.append(history)
        command = [sys.executable, "-m", "tests.faults.confluent_writer"]
        command += ["--bootstrap", self.bootstrap, "--name", self.name, "--history", str(history)]
        command += ["--seed", str(self.seed), "--stop-file", str(self.stop_file)]
        command += ["--first-txn", str(self.incarnation * 1_000_000)]
        log_file = (self.scratch / f"{self.name}.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        log_file.close()

    def crash(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def stop(self, timeout: float) -> None:
        self.stop_file.touch()
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0f s: killed", self.name, timeout)
                self.crash()
            self.process = None


class FaultLoop:
    """A seeded fault every 1-3 s until stopped, each applied (and healed) by the subclass's
    method named after it: "kill-leader" by `_kill_leader`."""

    def __init__(
        self, rng: random.Random, client: ConfluentWriterProcess, faults: tuple[str, ...]
    ) -> None:
        self.rng = rng
        self.client = client
        self.faults = faults
        self.applied: Counter[str] = Counter()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.uniform(1.0, 3.0))
            if stop.is_set():
                return
            fault = self.rng.choice(self.faults)
            self.applied[fault] += 1
            log.info("nemesis: %s", fault)
            await getattr(self, "_" + fault.replace("-", "_"))()

    async def _crash_client(self) -> None:
        await asyncio.to_thread(self.client.crash)
        await asyncio.sleep(self.rng.uniform(0.1, 1.0))
        self.client.start()


class Nemesis(FaultLoop):
    def __init__(
        self,
        broker: BrokerProcess,
        proxy: FaultProxy,
        rng: random.Random,
        client: ConfluentWriterProcess,
        faults: tuple[str, ...] = FAULTS,
        uploads: Path | None = None,
    ) -> None:
        super().__init__(rng, client, faults)
        self.broker = broker
        self.proxy = proxy
        self.uploads = uploads  # --tiered: the directory the object store keeps objects in

    async def _kill(self) -> None:
        await asyncio.to_thread(self.broker.kill)
        await asyncio.sleep(self.rng.uniform(0.2, 1.5))
        await asyncio.to_thread(self.broker.start)

    async def _kill_upload(self) -> None:
        """kill -9 the moment a new object appears in the store: a copy has begun, and its
        manifest (written last) is likely still missing. A plain kill when none begins."""
        if self.uploads is not None:
            await asyncio.to_thread(_wait_for_new_object, self.uploads, UPLOAD_WATCH_S)
        await self._kill()

    async def _pause(self) -> None:
        # longer than the pipeline's 6 s session and the writers' 5 s transaction timeout
        process = self.broker.process
        if process is None:
            return
        os.kill(process.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(self.rng.uniform(2.0, 7.5))
        finally:
            os.kill(process.pid, signal.SIGCONT)

    async def _drop(self) -> None:
        keys = self.rng.choice([[PRODUCE], [END_TXN], [ADD_PARTITIONS], [TXN_OFFSET_COMMIT]])
        direction = self.rng.choice([Direction.REQUEST, Direction.RESPONSE])
        self.proxy.drop(direction, keys, limit=self.rng.randint(1, 3))

    async def _delay_end_txn(self) -> None:
        # the delayed-EndTxn case: the writer times out, aborts or starts anew, and the old
        # EndTxn arrives afterwards
        self.proxy.delay(Direction.REQUEST, self.rng.uniform(1.0, 6.0), [END_TXN], limit=1)

    async def _duplicate(self) -> None:
        keys = self.rng.choice([[PRODUCE], [END_TXN], [TXN_OFFSET_COMMIT]])
        self.proxy.duplicate_requests(keys, limit=self.rng.randint(1, 3))

    async def _cut(self) -> None:
        self.proxy.cut_connections()


def _wait_for_new_object(directory: Path, timeout: float) -> None:
    """Returns once a file appears under `directory` (polled every 2 ms), or after
    `timeout`."""
    before = _files(directory)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _files(directory) - before:
            return
        time.sleep(0.002)


def _files(directory: Path) -> set[str]:
    return {os.path.join(d, f) for d, _dirs, names in os.walk(directory) for f in names}


def _topic_config(topic: str, lifecycle: bool, tiered: bool) -> dict[str, str] | None:
    config: dict[str, str] = {}
    if lifecycle and topic == "events-b":
        config.update(RETAINED_TOPIC_CONFIG)
    if tiered and topic in TIERED_TOPICS:
        config.update(TIERED_TOPIC_CONFIG)
    return config or None


async def run_seed(
    seed: int, duration: float, scratch: Path, lifecycle: bool = False, tiered: bool = False
) -> SeedResult:
    if not tiered:
        return await _run_seed(seed, duration, scratch, lifecycle, None)
    server = await asyncio.to_thread(S3ProxyServer(scratch / f"s3-{seed}").start)
    try:
        return await _run_seed(seed, duration, scratch, lifecycle, server)
    finally:
        await asyncio.to_thread(server.stop)


async def _run_seed(
    seed: int, duration: float, scratch: Path, lifecycle: bool, server: S3ProxyServer | None
) -> SeedResult:
    rng = random.Random(seed)
    history_path = scratch / f"history-{seed}.jsonl"
    history = History(history_path)
    data_dir = scratch / f"data-{seed}"
    settings = {**BROKER_SETTINGS, **(LIFECYCLE_SETTINGS if lifecycle else {})}
    faults = LIFECYCLE_FAULTS if lifecycle else FAULTS
    uploads: Path | None = None
    store: S3Settings | None = None
    if server is not None:
        prefix = f"faults-{seed}"
        settings.update(broker_settings(server, prefix))
        store = store_settings(server, prefix)
        uploads = server.data_dir / server.bucket / prefix
        faults = (*faults, *TIERED_FAULTS)
    remote_share = 0.0
    disk = DiskSampler(data_dir)
    with FaultProxy() as proxy:
        broker = broker_behind(proxy, data_dir, settings).start()
        client = ConfluentWriterProcess(f"cw-{seed}", proxy.address, scratch, seed)
        try:
            for topic in (*workload.TOPICS, workload.PIPE_OUTPUT):
                config = _topic_config(topic, lifecycle, server is not None)
                await asyncio.to_thread(
                    create_topic, broker.bootstrap, topic, workload.PARTITIONS, config
                )
            if lifecycle:
                await asyncio.to_thread(
                    create_topic,
                    broker.bootstrap,
                    workload.KEYED_TOPIC,
                    workload.PARTITIONS,
                    KEYED_TOPIC_CONFIG,
                )
                history.record(
                    "lifecycle",
                    retained_topics=["events-b"],
                    compacted_topics=COMPACTED_TOPICS,
                )
            history.record(
                "pipe",
                input_topic=workload.PIPE_INPUT,
                output_topic=workload.PIPE_OUTPUT,
                group=workload.PIPE_GROUP,
            )
            await declare_share_group(broker.bootstrap, history)
            client.start()
            nemesis = Nemesis(broker, proxy, rng, client, faults, uploads)
            writers = [
                workload.Writer(f"w{i}-{seed}", proxy.address, history, seed) for i in range(3)
            ]
            if lifecycle:
                writers.append(
                    workload.Writer(
                        f"kv-{seed}",
                        proxy.address,
                        history,
                        seed,
                        topics=(workload.KEYED_TOPIC,),
                        keys=workload.KEYS,
                    )
                )
            pipeline = workload.Pipeline(proxy.address, history)
            stop_faults, stop_writers, stop_pipeline = (asyncio.Event() for _ in range(3))
            tasks = [asyncio.create_task(w.run(stop_writers)) for w in writers]
            pipe_task = asyncio.create_task(pipeline.run(stop_pipeline))
            sharers = ShareReaders(proxy.address, history, seed)
            nemesis_task = asyncio.create_task(nemesis.run(stop_faults))
            disk_task = asyncio.create_task(disk.run())
            await asyncio.sleep(duration)
            stop_faults.set()
            await nemesis_task
            proxy.clear_rules()
            if broker.process is None:
                await asyncio.to_thread(broker.start)
            stop_writers.set()
            await asyncio.wait_for(asyncio.gather(*tasks), HEAL_TIMEOUT_S)
            await asyncio.to_thread(client.stop, HEAL_TIMEOUT_S)
            await _settle(broker.bootstrap)
            await _wait_for_pipeline(broker.bootstrap)
            stop_pipeline.set()
            await asyncio.wait_for(pipe_task, HEAL_TIMEOUT_S)
            await _settle(broker.bootstrap)
            if lifecycle:
                # a last retention pass, then a crash: the final reads see what a restart
                # rebuilt from the internal topics and the trimmed logs
                await asyncio.sleep(3)
                await asyncio.to_thread(broker.kill)
                await asyncio.to_thread(broker.start)
            await _final_reads(broker.bootstrap, history, lifecycle)
            if store is not None:
                remote_share = await _remote_objects(broker.bootstrap, data_dir, store, history)
            await sharers.finish(broker.bootstrap)
            disk_task.cancel()
        finally:
            history.close()
            client.crash()
            broker.kill()
    return SeedResult(
        check(load([history_path, *client.histories])),
        nemesis.applied,
        disk.largest,
        disk.per_topic(),
        remote_share,
        broker.log().count(CLEANUP_LINE),
    )


class DiskSampler:
    """The data directory's size, sampled every half second (a lifecycle run must stay
    bounded however long it runs)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.largest = 0

    async def run(self) -> None:
        while True:
            self.largest = max(self.largest, await asyncio.to_thread(self._size, self.data_dir))
            await asyncio.sleep(0.5)

    @staticmethod
    def _size(directory: Path) -> int:
        total = 0
        for path in directory.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file():
                    total += path.stat().st_size
        return total

    def per_topic(self) -> dict[str, int]:
        sizes: Counter[str] = Counter()
        if self.data_dir.exists():
            for child in self.data_dir.iterdir():
                if child.is_dir():
                    sizes[child.name.rpartition("-")[0]] += self._size(child)
        return dict(sizes)


async def _settle(bootstrap: str) -> None:
    """Waits until no transaction is open (the coordinator aborts those of dead writers after
    their timeout): only then is everything committed visible to read_committed."""
    deadline = time.monotonic() + HEAL_TIMEOUT_S
    async with Admin(bootstrap) as admin:
        while True:
            open_ones = await admin.list_transactions(
                states=["Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"]
            )
            if not open_ones:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"transactions never finished: {open_ones}")
            await asyncio.sleep(0.5)


async def _wait_for_pipeline(bootstrap: str) -> None:
    """Gives the pipeline time to process every committed input (bounded)."""
    deadline = time.monotonic() + HEAL_TIMEOUT_S
    async with Admin(bootstrap) as admin, Consumer(bootstrap) as consumer:
        inputs = [tp for tp in workload.all_partitions() if tp.topic == workload.PIPE_INPUT]
        while True:
            ends = await consumer.end_offsets(inputs)
            committed = await admin.list_group_offsets(workload.PIPE_GROUP)
            behind = {str(tp): (committed.get(tp, 0), ends[tp]) for tp in inputs}
            if all(done >= end for done, end in behind.values()):
                return
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    log.warning("the pipeline did not catch up before the deadline: (committed, end) %s", behind)


async def _final_reads(bootstrap: str, history: History, lifecycle: bool = False) -> None:
    partitions = workload.all_partitions(lifecycle)
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(partitions)
        ends = await consumer.end_offsets(partitions)
        deadline = time.monotonic() + HEAL_TIMEOUT_S
        while time.monotonic() < deadline:
            positions = {tp: await consumer.position(tp) for tp in partitions}
            if all(positions[tp] >= ends[tp] for tp in partitions):
                break
            for message in await consumer.poll(500):
                history.record(
                    "final",
                    topic=message.topic,
                    partition=message.partition,
                    offset=message.offset,
                    value=(message.value or b"").decode(),
                    key=None if message.key is None else message.key.decode(),
                )
        else:
            raise RuntimeError("the final read did not reach the last stable offsets")
        # after the scan: values that retention deleted meanwhile are below these too
        for tp, offset in (await consumer.beginning_offsets(partitions)).items():
            history.record("start", topic=tp.topic, partition=tp.partition, offset=offset)
    async with Admin(bootstrap) as admin:
        for tp, offset in (await admin.list_group_offsets(workload.PIPE_GROUP)).items():
            history.record(
                "group", group=workload.PIPE_GROUP, topic=tp.topic, partition=tp.partition,
                offset=offset,
            )  # fmt: skip


async def _remote_objects(
    bootstrap: str, data_dir: Path, settings: S3Settings, history: History
) -> float:
    """--tiered, after the final reads: waits (bounded) until every tiered partition's rolled
    segments are copied (nothing is written any more, so no copy is then under way), lists
    each partition's objects twice, a few passes apart, and records its manifests' ranges, its
    end offset and the objects no manifest owns in both listings (a remote deletion in
    progress leaves its data files for a moment; an orphan outlives the broker's passes) as
    a "remote" event. Returns the share of the partitions' offsets held remotely."""
    partitions = [tp for tp in workload.all_partitions() if tp.topic in TIERED_TOPICS]
    async with Admin(bootstrap) as admin:
        ids = {d.name: d.topic_id for d in await admin.describe_topics(TIERED_TOPICS)}
    async with Consumer(bootstrap) as consumer:
        ends = await consumer.end_offsets(partitions)
        starts = await consumer.beginning_offsets(partitions)
    store = S3ObjectStore(settings)
    prefixes = {}
    for tp in partitions:
        topic_id = ids[tp.topic]
        assert topic_id is not None
        prefixes[tp] = partition_prefix(tp.topic, topic_id, tp.partition)
    first = {
        tp: await _copied(store, prefixes[tp], data_dir / f"{tp.topic}-{tp.partition}")
        for tp in partitions
    }
    await asyncio.sleep(5 * PASS_INTERVAL_S)  # a few of the broker's passes
    remote = total = 0
    for tp in partitions:
        found, orphans = await scan(store, prefixes[tp])
        segments = sorted(found, key=lambda s: s.base_offset)
        history.record(
            "remote", topic=tp.topic, partition=tp.partition, end_offset=ends[tp],
            segments=[[s.base_offset, s.end_offset] for s in segments],
            orphans=sorted(set(orphans) & set(first[tp][1])),
        )  # fmt: skip
        remote += sum(
            max(0, min(s.next_offset, ends[tp]) - max(s.base_offset, starts[tp])) for s in segments
        )
        total += ends[tp] - starts[tp]
    return remote / total if total else 0.0


async def _copied(
    store: S3ObjectStore, prefix: str, directory: Path
) -> tuple[list[RemoteSegment], list[str]]:
    """The partition's manifests and orphans once its rolled segments are all copied (the
    local directory read before each listing: a segment rolled and copied after the listing
    cannot pass for copied), or as they are after TIERED_SETTLE_S."""
    deadline = time.monotonic() + TIERED_SETTLE_S
    while True:
        rolled = _rolled_segments(directory)
        found, orphans = await scan(store, prefix)
        copied_end = max((s.next_offset for s in found), default=0)
        waiting = [base for base in rolled if base >= copied_end]
        if not waiting:
            return found, orphans
        if time.monotonic() > deadline:
            log.warning("%s: segments %s never copied (copied up to %d)", prefix, waiting,
                        copied_end)  # fmt: skip
            return found, orphans
        await asyncio.sleep(PASS_INTERVAL_S)


def _rolled_segments(directory: Path) -> list[int]:
    """The base offsets of a partition directory's non-empty segments but the active one."""
    sizes: dict[int, int] = {}
    for path in directory.glob("*.log"):
        with contextlib.suppress(OSError, ValueError):
            sizes[int(path.stem)] = path.stat().st_size
    active = max(sizes, default=-1)
    return sorted(base for base, size in sizes.items() if size > 0 and base != active)


SHARE_FINISH_TIMEOUT_S = 30.0


async def declare_share_group(bootstrap: str, history: History) -> None:
    """Configures the share group and tells the checker about it."""
    await share_workload.configure_group(bootstrap, SHARE_GROUP, SHARE_GROUP_CONFIGS)
    history.record(
        "share", group=SHARE_GROUP, topics=list(SHARE_TOPICS), limit=SHARE_DELIVERY_LIMIT
    )


class ShareReaders:
    """The run's two share consumers (share_workload.py), running from their creation."""

    def __init__(self, bootstrap: str, history: History, seed: int) -> None:
        self.history = history
        self.stop = asyncio.Event()
        self.readers = [
            share_workload.ShareReader(
                f"s{i}-{seed}", bootstrap, history, SHARE_GROUP, SHARE_TOPICS
            )
            for i in range(2)
        ]
        self.tasks = [asyncio.create_task(reader.run(self.stop)) for reader in self.readers]

    async def finish(self, bootstrap: str) -> None:
        """After the final reads: lets them finish (_share_end), then stops them."""
        try:
            await _share_end(bootstrap, self.history, self.readers)
        finally:
            self.stop.set()
            await asyncio.wait_for(asyncio.gather(*self.tasks), HEAL_TIMEOUT_S)


async def _share_end(
    bootstrap: str, history: History, readers: list[share_workload.ShareReader]
) -> None:
    """Lets the share consumers finish: waits (bounded) until the share group's start offset of
    every partition of its topics reaches the partition's end (everything answered, archived
    or skipped), then records each as a share_end event for the checker."""
    partitions = [tp for tp in workload.all_partitions() if tp.topic in SHARE_TOPICS]
    async with Consumer(bootstrap) as consumer:
        found = await consumer.end_offsets(partitions)
    ends = {(tp.topic, tp.partition): offset for tp, offset in found.items()}
    deadline = time.monotonic() + SHARE_FINISH_TIMEOUT_S
    starts: dict[tuple[str, int], int] = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # a broker still settling: asked again
            starts = await share_workload.share_start_offsets(bootstrap, SHARE_GROUP, SHARE_TOPICS)
        if all(starts.get(key, -1) >= end for key, end in ends.items()):
            break
        await asyncio.sleep(0.5)
    else:
        log.warning("the share consumers did not finish: start offsets %s, ends %s", starts, ends)
        await _share_diagnosis(bootstrap, readers)
    for (topic, partition), end in sorted(ends.items()):
        history.record("share_end", topic=topic, partition=partition,
                       start_offset=starts.get((topic, partition), -1), end_offset=end)  # fmt: skip


async def _share_diagnosis(bootstrap: str, readers: list[share_workload.ShareReader]) -> None:
    """Where an unfinished share group stands, for the log of a failed run: each member's
    assignment as the coordinator holds it, and what each reader has seen."""
    with contextlib.suppress(Exception):
        async with Admin(bootstrap) as admin:
            described = (await admin.describe_share_groups([SHARE_GROUP]))[SHARE_GROUP]
        log.warning("share group: %s", described)
    for reader in readers:
        log.warning("%s: %s", reader.name, reader.diagnosis())


def discard_clean(data: Path, result: SeedResult) -> None:
    """A seed's broker data goes once it checked clean (a long run would fill the disk with
    it); a seed with anomalies keeps its data beside its history."""
    if not sum(result.anomalies.values()):
        shutil.rmtree(data, ignore_errors=True)


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds.extend(range(int(first), int(last or first) + 1))
    return seeds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-3", help="e.g. 1-200 or 4,9,12")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of faults per seed")
    parser.add_argument(
        "--keep", type=Path, help="keep histories here (and data of seeds with anomalies)"
    )
    parser.add_argument(
        "--lifecycle",
        action="store_true",
        help="small segments, retention, a keyed topic and more broker kills (storage lifecycle)",
    )
    parser.add_argument(
        "--tiered",
        action="store_true",
        help="tiered storage: most of the history copied to an S3 server (S3Proxy) and read back",
    )
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    results: dict[int, Counter[str]] = {}
    with tempfile.TemporaryDirectory(prefix="lockgate-faults-") as temporary:
        scratch = options.keep or Path(temporary)
        scratch.mkdir(parents=True, exist_ok=True)
        for seed in parse_seeds(options.seeds):
            started = time.monotonic()
            result = asyncio.run(
                run_seed(seed, options.duration, scratch, options.lifecycle, options.tiered)
            )
            results[seed] = result.anomalies
            discard_clean(scratch / f"data-{seed}", result)
            discard_clean(scratch / f"s3-{seed}", result)  # (--tiered: the object store's)
            disk = ""
            if options.lifecycle:
                ends = ", ".join(
                    f"{topic} {size / 2**20:.2f}"
                    for topic, size in sorted(result.disk_end_bytes.items())
                )
                disk = (
                    f"; disk max {result.disk_max_bytes / 2**20:.1f} MiB, at the end (MiB) {ends}"
                )
            if options.tiered:
                disk += (
                    f"; remote {result.remote_share:.0%} of the tiered offsets, "
                    f"{result.cleanups} interrupted copies cleaned up"
                )
            print(
                f"seed {seed}: {sum(result.anomalies.values())} anomalies in "
                f"{time.monotonic() - started:.0f}s; faults {dict(result.faults)}{disk}",
                flush=True,
            )
    print(table(results))
    if options.tiered:
        time.sleep(0.2)  # obstore's runtime thread must not outlive the interpreter (it aborts)
    return 1 if any(sum(c.values()) for c in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
