"""Cluster mode: what replication costs, how long failover takes, and transactions.

`python -m bench.cluster` starts a 3-member etcd and 3 brokers on 127.0.0.1 (the test
support's cluster, failover in about 3 s: broker.session.timeout.ms=3000), then:

1. **replication**: one confluent-kafka producer (acks=all, idempotent) writes the same
   number of 1 KiB values into a 6-partition topic with replication factor 1 and into one
   with replication factor 3, side by side in alternating rounds. Reported: MB/s and the
   brokers' CPU seconds per GB of values (user + system of all three broker processes, from
   /proc), and RF3/RF1 ratios.
2. **failover**: `--kills` times, the leader of a 1-partition RF3 topic is killed (kill -9)
   while a producer writes one record at a time with acks=all. Failover time is from the kill
   to the first acknowledged write after it (necessarily on the new leader); election time is
   from the kill to the first Metadata (asked every 20 ms) naming another leader. The broker
   is restarted and the ISR full again before the next kill. Reported: p50, p99, max of both.
3. **transactions**: one confluent-kafka transactional producer commits transactions of 10
   records to a partition its coordinator leads and to one another broker leads, in
   alternating `--txn-seconds` runs: committed transactions per second and the remote/local
   ratio. Then `--coordinator-kills` times the id's coordinator is killed -9 while the
   producer commits one transaction after another: seconds from the kill to the next commit.
`--only PART` runs one of them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer

from lockgate.coordinator.txn.log import partition_for
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster

VALUE = b"x" * 1024


def cluster_cpu_seconds(cluster: BrokerCluster) -> float:
    """User + system CPU seconds of every running broker of `cluster` so far (/proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for broker in cluster.brokers.values():
        if broker.process is None:
            continue
        fields = Path(f"/proc/{broker.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def _produce(bootstrap: str, topic: str, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 10,
                         "batch.size": 1_000_000, "delivery.report.only.error": True})  # fmt: skip
    producer.produce(topic, VALUE)
    assert producer.flush(30) == 0
    started = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 999:
            producer.poll(0)
    assert producer.flush(300) == 0
    return time.monotonic() - started


def replication(cluster: BrokerCluster, messages: int, rounds: int) -> dict[str, dict[str, float]]:
    for factor in (1, 3):
        cluster.create_topic(f"rf{factor}", partitions=6, replication=factor)
    results: dict[str, dict[str, list[float]]] = {
        f"rf{f}": {"seconds": [], "cpu": []} for f in (1, 3)
    }
    for _ in range(rounds):
        for factor in (1, 3):
            cpu = cluster_cpu_seconds(cluster)
            seconds = _produce(cluster.bootstrap, f"rf{factor}", messages)
            time.sleep(1)  # followers finish fetching: their CPU counts too
            results[f"rf{factor}"]["seconds"].append(seconds)
            results[f"rf{factor}"]["cpu"].append(cluster_cpu_seconds(cluster) - cpu)
    gigabytes = messages * len(VALUE) / 1e9
    summary = {}
    for name, figures in results.items():
        seconds = statistics.median(figures["seconds"])
        summary[name] = {
            "MB/s": gigabytes * 1000 / seconds,
            "cpu_s_per_GB": statistics.median(figures["cpu"]) / gigabytes,
        }
    summary["rf3/rf1"] = {
        key: summary["rf3"][key] / summary["rf1"][key] for key in ("MB/s", "cpu_s_per_GB")
    }
    return summary


def failover(cluster: BrokerCluster, kills: int) -> dict[str, dict[str, float]]:
    topic = "failover"
    cluster.create_topic(topic, partitions=1, replication=3)
    acks: list[float] = []
    stop = threading.Event()

    def write() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 0,
                             "retry.backoff.ms": 20, "retry.backoff.max.ms": 100,
                             "topic.metadata.refresh.interval.ms": 1000})  # fmt: skip

        def delivered(error: object, _message: object) -> None:
            if error is None:
                acks.append(time.monotonic())

        while not stop.is_set():
            producer.produce(topic, b"f", on_delivery=delivered)
            producer.flush(60)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    elected: list[float] = []
    acknowledged: list[float] = []
    try:
        for _ in range(kills):
            leader = cluster.partitions(topic)[0].leader
            killed_at = time.monotonic()
            cluster.brokers[leader].kill()
            deadline = killed_at + 60
            elected_at = None
            while not any(t > killed_at for t in acks[-5:]) or elected_at is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("no new leader or no acknowledged write after 60 s")
                if elected_at is None and cluster.partitions(topic)[0].leader not in (leader, -1):
                    elected_at = time.monotonic()
                time.sleep(0.02)
            elected.append(elected_at - killed_at)
            acknowledged.append(next(t for t in acks if t > killed_at) - killed_at)
            cluster.brokers[leader].start()
            cluster.wait_full_isr(topic)
    finally:
        stop.set()
        writer.join(60)
    return {"elected": _percentiles(elected), "first_ack": _percentiles(acknowledged)}


# -- transactions ---------------------------------------------------------------------------------

TXN_STATE = "__transaction_state"
TXN_RECORDS = 10  # 100-byte values per transaction


def _transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 0, "retry.backoff.ms": 20, "retry.backoff.max.ms": 100,
                         "topic.metadata.refresh.interval.ms": 1000, "log_level": 2})  # fmt: skip
    producer.init_transactions(60)
    return producer


def _commit_one(producer: Producer, topic: str, partition: int) -> None:
    producer.begin_transaction()
    for _ in range(TXN_RECORDS):
        producer.produce(topic, b"t" * 100, partition=partition)
    producer.commit_transaction(60)


def _coordinator(cluster: BrokerCluster, transactional_id: str) -> int:
    states = cluster.partitions(TXN_STATE)
    return states[partition_for(transactional_id, len(states))].leader


def transactions(cluster: BrokerCluster, seconds: float, rounds: int) -> dict[str, float]:
    """Committed transactions per second of one confluent-kafka producer (librdkafka: before
    TV2, so every first batch to a partition is verified with the coordinator) writing to a
    partition its coordinator leads ("local") and to one another broker leads ("remote": the
    leader asks the coordinator over the network and the markers travel too)."""
    topic = "txn"
    cluster.create_topic(topic, partitions=3, replication=3)
    _transactional(cluster.bootstrap, "bench-txn-0").flush(10)  # creates __transaction_state
    leaders = {p: info.leader for p, info in cluster.partitions(topic).items()}
    transactional_id = next(
        f"bench-txn-{i}"
        for i in range(1000)
        if _coordinator(cluster, f"bench-txn-{i}") in leaders.values()
        and len(set(leaders.values())) > 1
    )
    home = _coordinator(cluster, transactional_id)
    targets = {
        "local": next(p for p, leader in leaders.items() if leader == home),
        "remote": next(p for p, leader in leaders.items() if leader != home),
    }
    producer = _transactional(cluster.bootstrap, transactional_id)
    rates: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, partition in targets.items():
            count, started = 0, time.monotonic()
            while time.monotonic() - started < seconds:
                _commit_one(producer, topic, partition)
                count += 1
            rates[name].append(count / (time.monotonic() - started))
    producer.flush(10)
    summary = {f"{name}_txn_per_s": statistics.median(r) for name, r in rates.items()}
    summary["remote/local"] = summary["remote_txn_per_s"] / summary["local_txn_per_s"]
    return summary


def coordinator_failover(cluster: BrokerCluster, kills: int) -> dict[str, float]:
    """The transactional id's coordinator killed -9 while its producer commits transactions
    one after another: seconds from the kill to the next commit acknowledged (necessarily by
    the next coordinator, which has loaded the id's state)."""
    topic, transactional_id = "txn-failover", "bench-txn-failover"
    cluster.create_topic(topic, partitions=1, replication=3)
    commits: list[float] = []
    stop = threading.Event()

    def write() -> None:
        producer = _transactional(cluster.bootstrap, transactional_id)
        while not stop.is_set():
            try:
                _commit_one(producer, topic, 0)
                commits.append(time.monotonic())
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort():
                    producer.abort_transaction(60)
                elif not error.retriable():
                    producer = _transactional(cluster.bootstrap, transactional_id)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    recovered: list[float] = []
    try:
        cluster.wait_for(lambda: len(commits) > 0, "a first commit")
        for _ in range(kills):
            coordinator = _coordinator(cluster, transactional_id)
            killed_at = time.monotonic()
            cluster.brokers[coordinator].kill()
            cluster.wait_for(functools.partial(_committed_since, commits, killed_at),
                             "a commit after the kill")  # fmt: skip
            recovered.append(next(t for t in commits if t > killed_at) - killed_at)
            cluster.brokers[coordinator].start()
            cluster.wait_full_isr(TXN_STATE)
            cluster.wait_full_isr(topic)
    finally:
        stop.set()
        writer.join(120)
    return _percentiles(recovered)


def _committed_since(commits: list[float], since: float) -> bool:
    return any(t > since for t in commits[-5:])


def _percentiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "kills": len(times),
        "p50_s": statistics.median(times),
        "p99_s": times[min(len(times) - 1, round(0.99 * (len(times) - 1)))],
        "max_s": times[-1],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000, help="1 KiB values per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--txn-seconds", type=float, default=10.0, help="per mode and round")
    parser.add_argument("--coordinator-kills", type=int, default=10)
    parser.add_argument("--only", choices=("replication", "failover", "transactions"),
                        help="one part only")  # fmt: skip
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lockgate-bench-cluster-") as tmp:
        base = Path(tmp)
        etcd = EtcdCluster(base / "etcd").start()
        cluster = BrokerCluster(base, etcd)
        try:
            cluster.start()
            figures: dict[str, object] = {}
            if args.only in (None, "replication"):
                figures["replication"] = replication(cluster, args.messages, args.rounds)
            if args.only in (None, "failover"):
                figures["failover"] = failover(cluster, args.kills)
            if args.only in (None, "transactions"):
                figures["transactions"] = {
                    **transactions(cluster, args.txn_seconds, args.rounds),
                    "coordinator_failover": coordinator_failover(cluster, args.coordinator_kills),
                }
        finally:
            cluster.stop()
            etcd.stop()
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
