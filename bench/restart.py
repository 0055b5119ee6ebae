"""Restart benchmark: how long a broker takes to load its coordinators after a long history,
and whether it answers meanwhile.

For each history size N the benchmark writes N committed transactions (Ongoing, PrepareCommit,
CompleteCommit: three __transaction_state records each, over 1,000 transactional ids) and N
offset commits (over 1,000 groups; with --live-offsets each commit a partition of its own, so
that all N stay live) through the coordinators' own record encoders and the log layer into a
fresh data directory (the on-disk format a real run writes), with coordinator
snapshots 10,000 transactions before its end (the periodic writer's) and at the clean stop.
Then it starts a new broker on the directory three times: as left (snapshots at the end),
after a crash (the last snapshots and the clean-shutdown mark removed: 10,000 transactions
and commits to replay, and every active segment's CRCs to check), and with no snapshot at all
(the whole history, as before snapshots existed), and reports for each:

- replayed batches: read from the internal topics after the snapshots

- listening: start() called → the listener is up
- loaded: start() called → both coordinators have loaded every partition
- load CPU: the process's CPU time over the same span (on a shared machine, the figure that
  depends least on what else runs there)
- worst stall: the longest the event loop went without running a 1 ms ticker during the load;
  (hold): the most CPU time the loop's thread used between two ticks, what the code itself
  holds the loop for (on a busy machine the stall also counts waits for a core)
- ApiVersions worst: the slowest ApiVersions round trip of a client polling during the load

Last, on the loaded state, one round of the periodic snapshot writer after a new record in
every internal partition: how long it took and the event loop's worst stall meanwhile.

    python -m bench.restart [--sizes 100000,300000] [--live-offsets] [--runs clean,crash,full]
                            [--baseline SRC]

--baseline SRC (another tree's lockgate, a checkout or its src) loads the same history with
both trees, one after the other, each in a child process on a fresh copy of the data.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.group.records import CommittedOffset, offset_key, offset_value
from lockgate.coordinator.snapshots import SUFFIX as SNAPSHOT_SUFFIX
from lockgate.coordinator.txn.log import encode_key, encode_value, partition_for
from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.server.broker import CLEAN_SHUTDOWN_MARK, Broker
from lockgate.storage.disk import DiskEngine
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from tests.support.kafka_wire import KafkaWire, api_versions

REPOSITORY = Path(__file__).resolve().parent.parent
OWN_SOURCE = REPOSITORY / "src"
IDS = 1000
TAIL = 10_000  # transactions and commits after the last periodic snapshot, whatever the size
PARTITIONS = 50
STATES = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)


def settings(data: Path, snapshots: bool = True) -> dict[str, str]:
    return {
        "listeners": "127.0.0.1:0",
        "log.dirs": str(data),
        "lockgate.durability": "page-cache",
        "log.segment.bytes": str(64 << 20),
        # small enough that the history spans many segments: after a crash only the active
        # one is checked batch by batch, so that check is bounded by this, not by history
        "offsets.topic.segment.bytes": str(1 << 20),
        "transaction.state.log.segment.bytes": str(1 << 20),
        # the measured broker writes none at its stop, so the runs share one history
        "lockgate.coordinator.snapshot.interval.ms": "3600000" if snapshots else "-1",
        # the runs measure loading the same history: no compaction shrinks it in between
        "log.cleaner.enable": "false",
    }


def _append(broker: Broker, topic: str, partition: int, key: bytes, value: bytes) -> None:
    target = broker.topics.get(topic, partition)
    if target is None:
        raise RuntimeError(f"{topic}-{partition} is missing")
    batch = build_batch([(key, value)], timestamp_ms=1)
    target.append(bytearray(batch), validate_produced_batch(batch), 1)


async def write_history(data: Path, size: int, live_offsets: bool) -> None:
    broker = Broker(BrokerConfig(settings(data)), DiskEngine(str(data)))
    await broker.start()
    await asyncio.sleep(0.1)
    ids = [f"writer-{i}" for i in range(IDS)]
    slots = {t: partition_for(t, PARTITIONS) for t in ids}
    for number in range(size):
        if number == size - TAIL:
            broker.snapshots.write_all()  # the periodic writer's last one before a crash
        transactional_id = ids[number % IDS]
        epoch = (number // IDS) % 30_000
        for state in STATES:
            meta = TxnMetadata(transactional_id, number % IDS, epoch, 60_000, state,
                               frozenset({("orders", number % 3)}), 1, 1)  # fmt: skip
            _append(broker, TRANSACTION_STATE_TOPIC, slots[transactional_id],
                    encode_key(transactional_id), encode_value(meta))  # fmt: skip
        group = f"group-{number % IDS}"
        committed = offset_value(CommittedOffset(number, -1, "", 1))
        index = number // IDS if live_offsets else number % 3
        _append(broker, CONSUMER_OFFSETS_TOPIC, partition_for(group, PARTITIONS),
                offset_key(group, "orders", index), committed)  # fmt: skip
    await broker.stop()


def poll_api_versions(port: int, stop: threading.Event, worst: list[float]) -> None:
    with KafkaWire(f"127.0.0.1:{port}", timeout=120) as wire:
        while not stop.is_set():
            started = time.monotonic()
            api_versions(wire)
            worst[0] = max(worst[0], time.monotonic() - started)
            time.sleep(0.005)


class Ticker:
    """The event loop's worst stall while it runs: the longest gap between 1 ms ticks; and its
    worst hold, the most CPU time the loop's thread used between two ticks (what the code
    holds the loop for, whatever else the machine runs: a stall above the hold is time the
    process waited for a core, or for the interpreter lock)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.worst_hold = 0.0
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        last = time.monotonic()
        last_cpu = time.thread_time()
        while not self._stop.is_set():
            await asyncio.sleep(0.001)
            now, now_cpu = time.monotonic(), time.thread_time()
            self.worst = max(self.worst, now - last)
            self.worst_hold = max(self.worst_hold, now_cpu - last_cpu)
            last, last_cpu = now, now_cpu

    async def stop(self) -> float:
        self._stop.set()
        await self._task
        return self.worst


async def measure_restart(data: Path, snapshot_round: bool = False) -> dict[str, float]:
    broker = Broker(BrokerConfig(settings(data, snapshots=False)), DiskEngine(str(data)))
    started = time.monotonic()
    cpu_started = time.process_time()
    await broker.start()
    listening = time.monotonic() - started
    ticking = Ticker()
    stop_polling = threading.Event()
    worst_round_trip = [0.0]
    poller = threading.Thread(
        target=poll_api_versions, args=(broker.port, stop_polling, worst_round_trip)
    )
    poller.start()
    while not (broker.transactions.loaded and broker.groups.loaded):
        await asyncio.sleep(0.001)
    loaded = time.monotonic() - started
    cpu = time.process_time() - cpu_started
    worst_stall = await ticking.stop()
    stop_polling.set()
    await asyncio.to_thread(poller.join)
    figures = {
        "replayed": broker.transactions.runtime.replayed_batches
        + broker.groups.runtime.replayed_batches,
        "listening": listening,
        "loaded": loaded,
        "cpu": cpu,
        "stall": worst_stall,
        "hold": ticking.worst_hold,
        "api_versions": worst_round_trip[0],
    }
    if snapshot_round:
        figures.update(await measure_snapshot_round(broker))
    await broker.stop()
    return figures


async def measure_snapshot_round(broker: Broker) -> dict[str, float]:
    for partition in range(PARTITIONS):  # every partition changed since its snapshot
        value = offset_value(CommittedOffset(0, -1, "", 1))
        _append(broker, CONSUMER_OFFSETS_TOPIC, partition, offset_key("new", "t", 0), value)
        meta = TxnMetadata("new", 0, 0, 60_000, TxnState.EMPTY, frozenset(), 1, 1)
        _append(broker, TRANSACTION_STATE_TOPIC, partition, encode_key("new"), encode_value(meta))
    ticking = Ticker()
    started = time.monotonic()
    await broker.snapshots.write_due()
    took = time.monotonic() - started
    stall = await ticking.stop()
    return {"snapshot": took, "snapshot_stall": stall, "snapshot_hold": ticking.worst_hold}


def newest_snapshots_removed(data: Path) -> None:
    """Leaves each partition its snapshot from before the last TAIL transactions and commits
    and no clean-shutdown mark: what a crash before the next periodic snapshot leaves."""
    for partition in data.iterdir():
        found = sorted(partition.glob(f"*{SNAPSHOT_SUFFIX}")) if partition.is_dir() else []
        for newest in found[1:]:
            newest.unlink()
    (data / CLEAN_SHUTDOWN_MARK).unlink(missing_ok=True)


def snapshots_removed(data: Path) -> None:
    for snapshot in data.glob(f"*/*{SNAPSHOT_SUFFIX}"):
        snapshot.unlink()


def left_as_is(_data: Path) -> None:
    """A clean stop's data: the snapshots at the end."""


RUNS: dict[str, tuple[str, Callable[[Path], None]]] = {  # --runs name: (label, preparation)
    "clean": ("clean stop, snapshots", left_as_is),
    "crash": ("crash, 10k after snapshots", newest_snapshots_removed),
    "full": ("clean stop, no snapshots", snapshots_removed),
}


def measure_in_child(source: Path, data: Path, snapshot_round: bool) -> dict[str, float]:
    """measure_restart in a child process running the lockgate of `source` (this bench)."""
    command = [sys.executable, "-m", "bench.restart", "--measure", str(data)]
    done = subprocess.run(
        command + (["--snapshot-round"] if snapshot_round else []),
        env={**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{REPOSITORY}"},
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def print_figures(size: int, name: str, figures: dict[str, float]) -> None:
    print(
        f"{size:>12,}  {size:>14,}  {name:<33}  {figures['replayed']:>15,.0f}"
        f"  {figures['listening']:>8.2f}s  {figures['loaded']:>5.2f}s"
        f"  {figures['cpu']:>7.2f}s  {figures['stall'] * 1000:>9.0f}ms"
        f" ({figures['hold'] * 1000:>3.0f}ms)"
        f"  {figures['api_versions'] * 1000:>15.0f}ms",
        flush=True,
    )
    if "snapshot" in figures:
        print(f"{'':>30}{name}: periodic snapshot round {figures['snapshot']:.2f}s, "
              f"worst stall {figures['snapshot_stall'] * 1000:.0f}ms "
              f"(hold {figures['snapshot_hold'] * 1000:.0f}ms)", flush=True)  # fmt: skip


def side_by_side(directory: Path, runs: list[tuple[str, Callable[[Path], None]]], size: int,
                 baseline: Path) -> None:  # fmt: skip
    """Each run's start with this tree, then with the baseline, on fresh copies of the data."""
    data, copy = directory / "data", directory / "copy"
    for name, prepare in runs:
        prepare(data)
        for tree, source in (("this", OWN_SOURCE), ("base", baseline)):
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(data, copy)
            figures = measure_in_child(source, copy, prepare is RUNS["clean"][1])
            print_figures(size, f"{name} [{tree}]", figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,300000", help="committed transactions")
    parser.add_argument("--live-offsets", action="store_true",
                        help="every offset commit a key of its own (N live offsets)")  # fmt: skip
    parser.add_argument("--runs", default=",".join(RUNS),
                        help="which starts, in this order (clean, crash, full: the full "
                        "replay takes longest)")  # fmt: skip
    parser.add_argument("--baseline", type=Path,
                        help="also load each history with this source tree's lockgate")  # fmt: skip
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # (a child's run)
    parser.add_argument("--snapshot-round", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.measure is not None:
        print(json.dumps(asyncio.run(measure_restart(options.measure, options.snapshot_round))))
        return
    runs = [RUNS[name] for name in options.runs.split(",")]
    baseline = options.baseline
    if baseline is not None:
        baseline = baseline.resolve()
        if (baseline / "src" / "lockgate").is_dir():
            baseline = baseline / "src"  # a checkout's root
        if not (baseline / "lockgate").is_dir():
            parser.error(f"{options.baseline} holds no lockgate package")
    print(
        "transactions  offset commits  start                              replayed batches"
        "  listening  loaded  load CPU  worst stall (hold)  ApiVersions worst"
    )
    for size in (int(s) for s in options.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="lockgate-restart-") as directory:
            data = Path(directory) / "data"
            asyncio.run(write_history(data, size, options.live_offsets))
            if baseline is not None:
                side_by_side(Path(directory), runs, size, baseline)
                continue
            snapshot_round: tuple[float, float, float] | None = None
            for name, prepare in runs:
                prepare(data)
                print_figures(size, name, asyncio.run(measure_restart(data)))
                if prepare is RUNS["clean"][1]:  # on a copy: the other runs keep their snapshots
                    shutil.copytree(data, Path(directory) / "copy")
                    copy = asyncio.run(measure_restart(Path(directory) / "copy", True))
                    snapshot_round = (copy["snapshot"], copy["snapshot_stall"],
                                      copy["snapshot_hold"])  # fmt: skip
            if snapshot_round is not None:
                print(f"periodic snapshot round of the loaded state: {snapshot_round[0]:.2f}s, "
                      f"worst stall {snapshot_round[1] * 1000:.0f}ms "
                      f"(hold {snapshot_round[2] * 1000:.0f}ms)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
