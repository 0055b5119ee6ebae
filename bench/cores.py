"""Cores: what a second broker process on the same host adds.

A lockgate broker is one event loop, about one core. `python -m bench.cores` starts a 1-member
etcd and, in alternating rounds, a cluster of 1 broker and one of 2 brokers on this host (the
same settings, as `lockgate host` would start them), and loads them as hard as it can for
`--seconds`: a topic with 6 partitions and replication factor 1 (so that the partitions, and the
work, spread over the brokers); two connections, each pipelining one Produce request over and
over (acks=all, one uncompressed batch of 10 x 100 B records to each of 3 partitions led by one
broker, `WINDOW` in flight), encoded once, so that the client costs a few microseconds a request
and the brokers are what is measured: the same requests whether one broker or two serve them.
Reported per cluster size: records/s acknowledged, the brokers' CPU seconds (user + system, all
broker processes, from /proc) per million records, and the 2/1 ratios, medians of the rounds.

    python -m bench.cores [--seconds 20] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import struct
import tempfile
import time
from pathlib import Path

from bench.cluster import cluster_cpu_seconds
from lockgate.client.connection import encode_request_header
from lockgate.protocol.api import ApiKey, build, encode, request_class
from lockgate.protocol.records import build_batch
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster

PARTITIONS = 6
CONNECTIONS = 2  # each with requests to 3 partitions, led by one broker
TOPIC = "cores"
RECORDS_PER_BATCH = 10
VALUE = b"v" * 100
WINDOW = 32
PRODUCE_VERSION = 8  # the last version before flexible encoding: the frame stays simple
_SIZE = struct.Struct(">i")


def produce_frame(partitions: list[int]) -> bytes:
    """A whole Produce request frame to `partitions` (every request may share it: the broker
    echoes the correlation id and does not check it)."""
    batch = build_batch([(None, VALUE)] * RECORDS_PER_BATCH)
    body = {"transactional_id": None, "acks": -1, "timeout": 30_000,
            "topic_data": [{"name": TOPIC, "partition_data": [
                {"index": p, "records": batch} for p in partitions]}]}  # fmt: skip
    schema = request_class(ApiKey.PRODUCE, PRODUCE_VERSION)
    assert schema is not None
    request = encode(build(schema, body))
    header = encode_request_header(ApiKey.PRODUCE, PRODUCE_VERSION, 1, "bench-cores", False)
    return _SIZE.pack(len(header) + len(request)) + header + request


async def blast(port: int, frame: bytes, until: float) -> int:
    """Requests answered on one connection, WINDOW in flight, until the clock says `until`
    (the answers of those in flight then are waited for and counted)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(frame * WINDOW)
        in_flight, answered = WINDOW, 0
        while in_flight:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            await reader.readexactly(size)
            in_flight -= 1
            answered += 1
            if time.monotonic() < until:
                writer.write(frame)
                in_flight += 1
        return answered
    finally:
        writer.close()


async def load(targets: list[tuple[int, bytes]], seconds: float) -> int:
    until = time.monotonic() + seconds
    counts = await asyncio.gather(*(blast(port, frame, until) for port, frame in targets))
    return sum(counts)


def one_round(base: Path, etcd: EtcdCluster, brokers: int, seconds: float) -> dict[str, float]:
    base.mkdir(parents=True)
    cluster = BrokerCluster(base, etcd, size=brokers,
                            settings={"lockgate.durability": "page-cache"})  # fmt: skip
    cluster.start()
    try:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication=1)
        led: dict[int, list[int]] = {}
        for partition, info in sorted(cluster.partitions(TOPIC).items()):
            led.setdefault(info.leader, []).append(partition)
        # the same connections and requests whatever the brokers: CONNECTIONS of them, each
        # with a batch for each of its PARTITIONS / CONNECTIONS partitions
        share = PARTITIONS // CONNECTIONS
        targets = [(cluster.brokers[node].port, produce_frame(partitions[i : i + share]))
                   for node, partitions in led.items()
                   for i in range(0, len(partitions), share)]  # fmt: skip
        assert len(targets) == CONNECTIONS, led
        asyncio.run(load(targets, 2.0))  # warm up
        cpu = cluster_cpu_seconds(cluster)
        started = time.monotonic()
        requests = asyncio.run(load(targets, seconds))
        elapsed = time.monotonic() - started
        cpu = cluster_cpu_seconds(cluster) - cpu
    finally:
        cluster.stop()
    records = requests * RECORDS_PER_BATCH * (PARTITIONS // CONNECTIONS)
    return {"records_per_s": records / elapsed, "cpu_s_per_M_records": cpu / records * 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="load per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    runs: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-cores-") as tmp:
        base = Path(tmp)
        etcd = EtcdCluster(base / "etcd", 1).start()
        try:
            for number in range(args.rounds):
                for brokers in (1, 2) if number % 2 == 0 else (2, 1):
                    figures = one_round(base / f"r{number}-b{brokers}", etcd, brokers,
                                        args.seconds)  # fmt: skip
                    runs[brokers].append(figures)
                    shown = ", ".join(f"{k} {v:,.1f}" for k, v in figures.items())
                    print(f"round {number + 1}, {brokers} broker(s): {shown}", flush=True)
        finally:
            etcd.stop()
    medians = {
        f"{brokers} broker(s)": {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        for brokers, rounds in runs.items()
    }
    one, two = medians["1 broker(s)"], medians["2 broker(s)"]
    medians["2/1"] = {k: two[k] / one[k] for k in one}
    print(json.dumps(medians, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(medians, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
