"""Tiered storage (KIP-405) against the same broker without it: one lockgate broker
(page-cache durability, tiered storage on, a pass every 200 ms) copying to an S3Proxy server
(filesystem backend), both started by this run on 127.0.0.1, side by side in one invocation.

Each round writes N MiB of 1 KiB values with confluent-kafka (acks=all, idempotent, linger
10 ms, 1 MB batches) to two fresh one-partition topics with the same segment size: `local`
(every record stays on disk) and `tiered` (remote.storage.enable, local.retention.bytes of
one segment, so that all but the last segments or so go to the object store while the
producer writes). Then, once the tiered topic's rolled segments are copied and deleted
locally, it reads each topic from offset 0 to its end with lockgate's Consumer and with
confluent-kafka. Reported per round and as medians: produce MB/s with uploads running
against without, and catch-up read MB/s from the object store against from local disk (MB:
10^6 bytes of values), with the ratios tiered ÷ local. While the tiered topic is written, its
partition directory's size is sampled every 100 ms: its largest size against
local.retention.bytes (local retention keeps less than the bound plus the active segment
and the segments not copied yet).

--hold SECONDS adds a longer run: a producer paced at --hold-rate MB/s writes to a tiered
topic for that long while the directory is sampled (the bound must hold however long it runs).

    python -m bench.tiered [--mib 200] [--segment-mib 8] [--rounds 1] [--hold 0]
                           [--hold-rate 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentPartition

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, IsolationLevel
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.object_store import S3ProxyServer
from tests.support.tiered import broker_settings

MIB = 1 << 20
MB = 1e6
VALUE_SIZE = 1024
EARLIEST_LOCAL = -4  # ListOffsets: the first offset on the broker's disk (KIP-405)
SETTLE_TIMEOUT_S = 300.0
SAMPLE_EVERY_S = 0.1


@dataclass
class Options:
    mib: int = 200
    segment_mib: int = 8
    rounds: int = 1
    hold: float = 0.0
    hold_rate: float = 10.0
    json: Path | None = None


def parse_args(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mib", type=int, default=200, help="MiB of values per topic")
    parser.add_argument("--segment-mib", type=int, default=8, help="segment size of both topics")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--hold", type=float, default=0.0, help="seconds of the paced run")
    parser.add_argument("--hold-rate", type=float, default=10.0, help="MB/s of the paced run")
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args(argv)
    if arguments.mib < 1 or arguments.segment_mib < 1 or arguments.rounds < 1:
        parser.error("--mib, --segment-mib and --rounds must be at least 1")
    return Options(**vars(arguments))


@dataclass
class Round:
    """One round's figures (MB/s of values)."""

    produce_local: float
    produce_tiered: float
    read_local: dict[str, float]  # client → MB/s
    read_tiered: dict[str, float]
    remote_share: float  # of the tiered topic's offsets, when it was read
    disk_max: int  # the tiered partition directory's largest size while written
    copy_wait_s: float  # from the produce's end until the copies were done


@dataclass
class Hold:
    seconds: float
    written: int
    disk_max: int
    disk_end: int
    bound: int
    segment: int
    samples: list[int] = field(default_factory=list)


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


def table(rounds: list[Round]) -> str:
    """The medians over the rounds: each figure tiered, local and their ratio."""
    rows = [("produce (confluent-kafka)", [(r.produce_tiered, r.produce_local) for r in rounds])]
    for client in rounds[0].read_local:
        pairs = [(r.read_tiered[client], r.read_local[client]) for r in rounds]
        rows.append((f"catch-up read ({client})", pairs))
    lines = [f"{'MB/s (median of ' + str(len(rounds)) + ')':<32}{'tiered':>10}{'local':>10}"
             f"{'tiered ÷ local':>16}"]  # fmt: skip
    for name, pairs in rows:
        tiered = statistics.median(t for t, _ in pairs)
        local = statistics.median(loc for _, loc in pairs)
        lines.append(f"{name:<32}{tiered:>10.1f}{local:>10.1f}{ratio(tiered, local):>15.2f}×")
    return "\n".join(lines)


def disk_line(rounds: list[Round], bound: int, segment: int) -> str:
    largest = max(r.disk_max for r in rounds)
    share = statistics.median(r.remote_share for r in rounds)
    return (
        f"tiered partition on disk: at most {largest / MIB:.1f} MiB while written "
        f"(local.retention.bytes {bound / MIB:.1f} MiB, segment {segment / MIB:.1f} MiB); "
        f"{share:.0%} of its offsets remote when read"
    )


def hold_line(hold: Hold) -> str:
    return (
        f"paced run: {hold.written / MB:.0f} MB in {hold.seconds:.0f} s; partition directory "
        f"at most {hold.disk_max / MIB:.1f} MiB, {hold.disk_end / MIB:.1f} MiB at the end "
        f"(local.retention.bytes {hold.bound / MIB:.1f} MiB + segment {hold.segment / MIB:.1f} MiB)"
    )


class DirectorySampler:
    """A directory's size every SAMPLE_EVERY_S in a thread, while inside `with`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DirectorySampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(directory_size(self.directory))
            self._stop.wait(SAMPLE_EVERY_S)

    @property
    def largest(self) -> int:
        return max(self.samples, default=0)


def directory_size(directory: Path) -> int:
    total = 0
    for path in directory.glob("*"):
        with contextlib.suppress(OSError):  # deleted meanwhile
            total += path.stat().st_size
    return total


def produce(bootstrap: str, topic: str, total: int, rate: float | None = None) -> float:
    """Writes `total` bytes of 1 KiB values; MB/s (paced at `rate` MB/s if given)."""
    producer = ConfluentProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 10,
            "batch.size": 1_000_000,
            "delivery.report.only.error": True,
        }
    )
    value = b"v" * VALUE_SIZE
    count = total // VALUE_SIZE
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
            if rate is not None:
                ahead = i * VALUE_SIZE / (rate * MB) - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
    if producer.flush(300) != 0:
        raise RuntimeError(f"{topic}: not everything was delivered")
    return count * VALUE_SIZE / MB / (time.perf_counter() - started)


def read_confluent(bootstrap: str, topic: str, end: int) -> float:
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([ConfluentPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    try:
        while got < end and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 1.0):
                if message.error() is None:
                    got += 1
        if got < end:
            raise RuntimeError(f"{topic}: confluent-kafka read {got} of {end}")
        return got * VALUE_SIZE / MB / (time.perf_counter() - started)
    finally:
        consumer.close()


async def read_lockgate(bootstrap: str, topic: str, end: int) -> float:
    partition = TopicPartition(topic, 0)
    async with Consumer(bootstrap, isolation_level=IsolationLevel.READ_UNCOMMITTED) as consumer:
        consumer.assign([partition])
        await consumer.seek_to_beginning([partition])
        got = 0
        started = time.perf_counter()
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while got < end and time.monotonic() < deadline:
            got += len(await consumer.poll(1000))
        if got < end:
            raise RuntimeError(f"{topic}: lockgate's consumer read {got} of {end}")
        return got * VALUE_SIZE / MB / (time.perf_counter() - started)


async def offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """(first offset on the broker's disk, end offset) of the topic's partition."""
    partition = TopicPartition(topic, 0)
    async with Admin(bootstrap) as admin:
        found = await admin.list_offsets({partition: EARLIEST_LOCAL})
        ends = await admin.list_offsets({partition: -1})
    local, end = found[partition], ends[partition]
    if isinstance(local, Exception) or isinstance(end, Exception):
        raise RuntimeError(f"{topic}: ListOffsets failed: {local} {end}")
    return local.offset, end.offset


def wait_until_copied(directory: Path, bound: int, segment: int) -> float:
    """Until local retention has brought the partition within its bound (which it does only
    once the segments are copied); the seconds it took."""
    started = time.monotonic()
    while directory_size(directory) > bound + 2 * segment:
        if time.monotonic() - started > SETTLE_TIMEOUT_S:
            raise RuntimeError(f"{directory.name}: still {directory_size(directory)} bytes")
        time.sleep(0.2)
    return time.monotonic() - started


def run_round(broker: BrokerProcess, options: Options, number: int) -> Round:
    segment = options.segment_mib * MIB
    total = options.mib * MIB
    local, tiered = f"local-{number}", f"tiered-{number}"
    common = {"internal.segment.bytes": str(segment)}
    create_topic(broker.bootstrap, local, 1, common)
    create_topic(broker.bootstrap, tiered, 1, common | {
        "remote.storage.enable": "true", "local.retention.bytes": str(segment),
    })  # fmt: skip
    produce_local = produce(broker.bootstrap, local, total)
    with DirectorySampler(broker.data_dir / f"{tiered}-0") as sampler:
        produce_tiered = produce(broker.bootstrap, tiered, total)
        copy_wait = wait_until_copied(broker.data_dir / f"{tiered}-0", segment, segment)
    reads: dict[str, dict[str, float]] = {local: {}, tiered: {}}
    shares = {}
    for topic in (local, tiered):
        first_local, end = asyncio.run(offsets(broker.bootstrap, topic))
        shares[topic] = first_local / end if end else 0.0
        reads[topic]["lockgate"] = asyncio.run(read_lockgate(broker.bootstrap, topic, end))
        reads[topic]["confluent-kafka"] = read_confluent(broker.bootstrap, topic, end)
    return Round(produce_local, produce_tiered, reads[local], reads[tiered], shares[tiered],
                 sampler.largest, copy_wait)  # fmt: skip


def run_hold(broker: BrokerProcess, options: Options) -> Hold:
    segment = options.segment_mib * MIB
    topic = "held"
    create_topic(broker.bootstrap, topic, 1, {
        "remote.storage.enable": "true", "internal.segment.bytes": str(segment),
        "local.retention.bytes": str(segment),
    })  # fmt: skip
    total = int(options.hold * options.hold_rate * MB)
    directory = broker.data_dir / f"{topic}-0"
    started = time.monotonic()
    with DirectorySampler(directory) as sampler:
        produce(broker.bootstrap, topic, total, options.hold_rate)
    return Hold(time.monotonic() - started, total, sampler.largest, directory_size(directory),
                segment, segment, sampler.samples)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    rounds: list[Round] = []
    hold: Hold | None = None
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-tiered-") as directory:
        root = Path(directory)
        server = S3ProxyServer(root / "s3").start()
        settings = broker_settings(server, "bench") | {"lockgate.durability": "page-cache"}
        broker = BrokerProcess(root / "data", settings)
        try:
            broker.start()
            for number in range(options.rounds):
                rounds.append(run_round(broker, options, number))
                print(f"round {number + 1}: {asdict(rounds[-1])}", flush=True)
            if options.hold > 0:
                hold = run_hold(broker, options)
        finally:
            broker.kill()
            server.stop()
    segment = options.segment_mib * MIB
    print(f"\n{options.mib} MiB of {VALUE_SIZE} B values per topic, segments of "
          f"{options.segment_mib} MiB, one partition\n")  # fmt: skip
    print(table(rounds))
    print(disk_line(rounds, segment, segment))
    if hold is not None:
        print(hold_line(hold))
    if options.json:
        figures = {"rounds": [asdict(r) for r in rounds],
                   "hold": None if hold is None else asdict(hold)}  # fmt: skip
        options.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
