"""Three brokers on a 3-member etcd, through real clients: what Metadata and DescribeCluster
show, and a leader killed (kill -9) under acks=all load for every client: each acknowledged
record is read back exactly once, and the killed broker rejoins (its replicas truncate,
catch up and re-enter the ISR)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from tests.support.clients import consume_all
from tests.support.cluster import BrokerCluster

COUNT = 3000
Sender = Callable[[str, str, list[bytes], list[bytes]], None]


def test_metadata_and_describe_cluster_show_every_broker(cluster: BrokerCluster) -> None:
    cluster.create_topic("described", partitions=3, replication=3)
    metadata = cluster.admin().list_topics("described", timeout=10)
    assert sorted(metadata.brokers) == [0, 1, 2]
    assert metadata.controller_id in (0, 1, 2)
    partitions = metadata.topics["described"].partitions
    assert sorted({p.leader for p in partitions.values()}) == [0, 1, 2]  # leaders spread
    for partition in partitions.values():
        assert sorted(partition.replicas) == [0, 1, 2]
        assert sorted(partition.isrs) == [0, 1, 2]
        assert partition.replicas[0] == partition.leader

    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        described = admin.describe_cluster()
        assert sorted(b["broker_id"] for b in described["brokers"]) == [0, 1, 2]
        assert described["controller_id"] == metadata.controller_id
    finally:
        admin.close()

    if shutil.which("kcat"):
        listing = subprocess.run(
            ["kcat", "-b", cluster.bootstrap, "-L", "-t", "described"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        assert "3 brokers:" in listing
        assert listing.count("replicas: ") == 3


def _send_confluent(bootstrap: str, topic: str, values: list[bytes], acked: list[bytes]) -> None:
    errors: list[object] = []

    def delivered(error: object, message: object) -> None:
        if error is None:
            acked.append(message.value())  # type: ignore[attr-defined]
        else:
            errors.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})  # fmt: skip
    for i, value in enumerate(values):
        producer.produce(topic, value, on_delivery=delivered)
        producer.poll(0)
        if i % 100 == 99:
            time.sleep(0.05)  # spread the load over the kill
    assert producer.flush(90) == 0
    assert not errors, errors[:3]


def _send_kafka_python(bootstrap: str, topic: str, values: list[bytes], acked: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all",
                             enable_idempotence=True, linger_ms=5,
                             request_timeout_ms=10_000)  # fmt: skip
    futures = []
    for i, value in enumerate(values):
        future = producer.send(topic, value)
        future.add_callback(lambda _metadata, v=value: acked.append(v))
        futures.append(future)
        if i % 100 == 99:
            time.sleep(0.05)
    producer.flush(90)
    producer.close(10)
    assert all(f.succeeded() for f in futures)


def _send_aiokafka(bootstrap: str, topic: str, values: list[bytes], acked: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    enable_idempotence=True, linger_ms=5,
                                    request_timeout_ms=10_000)  # fmt: skip
        await producer.start()
        try:
            pending = []
            for i, value in enumerate(values):
                future = await producer.send(topic, value)
                future.add_done_callback(
                    lambda f, v=value: None if f.exception() else acked.append(v)
                )
                pending.append(future)
                if i % 100 == 99:
                    await asyncio.sleep(0.05)
            await asyncio.wait_for(asyncio.gather(*pending), 90)
        finally:
            await producer.stop()

    asyncio.run(run())


def _send_lockgate(bootstrap: str, topic: str, values: list[bytes], acked: list[bytes]) -> None:
    from lockgate.client.sync import Producer as LockgateProducer

    errors: list[object] = []

    def delivered(error: object, message: object) -> None:
        if error is None:
            acked.append(message.value())  # type: ignore[attr-defined]
        else:
            errors.append(error)

    producer = LockgateProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    try:
        for i, value in enumerate(values):
            producer.produce(topic, value, on_delivery=delivered)
            if i % 100 == 99:
                producer.poll(0)
                time.sleep(0.05)
        assert producer.flush(90) == 0
    finally:
        producer.close(10)
    assert not errors, errors[:3]


SENDERS: dict[str, Sender] = {
    "confluent-kafka": _send_confluent,
    "kafka-python": _send_kafka_python,
    "aiokafka": _send_aiokafka,
    "lockgate": _send_lockgate,
}


@pytest.mark.parametrize("client", list(SENDERS))
def test_leader_killed_under_acks_all_load_loses_nothing(
    cluster: BrokerCluster, client: str
) -> None:
    topic = f"failover-{client}"
    cluster.create_topic(topic, partitions=3, replication=3)
    victim = cluster.partitions(topic)[0].leader
    values = [f"{client}-{i}".encode() for i in range(COUNT)]
    acked: list[bytes] = []
    failure: list[BaseException] = []

    def send() -> None:
        try:
            SENDERS[client](cluster.bootstrap, topic, values, acked)
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)

    sender = threading.Thread(target=send, name=f"send-{client}")
    sender.start()
    deadline = time.monotonic() + 60
    while len(acked) < COUNT // 3 and sender.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    cluster.brokers[victim].kill()
    sender.join(150)
    assert not sender.is_alive(), "the producer did not finish"
    assert not failure, failure
    assert len(acked) == COUNT

    new_leader = cluster.wait_leader(topic, 0, other_than=victim)
    assert victim not in new_leader.isr
    received = consume_all(cluster.bootstrap, topic, 3, COUNT)
    values_read = [v for records in received.values() for _offset, v in records if v is not None]
    assert sorted(values_read) == sorted(acked)  # every acknowledged record, exactly once

    cluster.brokers[victim].start()  # it rejoins: truncates, catches up, back in the ISR
    cluster.wait_full_isr(topic)
    again = consume_all(cluster.bootstrap, topic, 3, COUNT)
    assert again == received
