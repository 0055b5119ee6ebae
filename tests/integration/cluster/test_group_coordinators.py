"""Group coordinators across a 3-broker cluster: a group's coordinator is the leader of its
__consumer_offsets partition (created by the first FindCoordinator, replicated 3 times), and
when that broker is killed (kill -9) the partition's new leader loads it and carries on: a
consumer keeps consuming and committing, and the offsets committed before and after the kill
are what confluent-kafka, kafka-python and aiokafka read back from the new coordinator."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.cluster import BrokerCluster

TOPIC = "coordinated"
GROUP = "coordinated-group"
COUNT = 600


def _coordinator(cluster: BrokerCluster) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
    [future] = admin.describe_consumer_groups([GROUP], request_timeout=10).values()
    return int(future.result().coordinator.id)


def _produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3})
    for i in range(COUNT):
        producer.produce(TOPIC, b"%d" % i, partition=i % 3)
    assert producer.flush(60) == 0


def _consume(consumer: Consumer, seen: dict[int, int], values: set[bytes], until: int) -> None:
    """Polls until `until` distinct values are read; `seen`: partition → next offset."""
    deadline = time.monotonic() + 90
    while len(values) < until and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            partition, offset = message.partition() or 0, message.offset() or 0
            values.add(message.value() or b"")
            seen[partition] = max(seen.get(partition, 0), offset + 1)
    assert len(values) >= until, f"{len(values)} of {until} values read"


def _commit(consumer: Consumer, seen: dict[int, int]) -> None:
    """A synchronous commit of what was read, asked again while the coordinator moves (as an
    application retries a failed commitSync)."""
    offsets = [TopicPartition(TOPIC, p, offset) for p, offset in seen.items()]
    deadline = time.monotonic() + 60
    while True:
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_group_outlives_its_coordinator(cluster: BrokerCluster) -> None:
    cluster.create_topic(TOPIC, partitions=3, replication=3)
    _produce(cluster.bootstrap)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 10_000, "log_level": 3})  # fmt: skip
    consumer.subscribe([TOPIC])
    seen: dict[int, int] = {}
    values: set[bytes] = set()
    try:
        _consume(consumer, seen, values, COUNT // 3)
        _commit(consumer, seen)
        before = dict(seen)
        old = _coordinator(cluster)
        cluster.brokers[old].kill()
        cluster.wait_for(lambda: _coordinator(cluster) != old, "a new coordinator")
        assert _committed_kafka_python(cluster.bootstrap) == before  # read from the new one
        _consume(consumer, seen, values, COUNT)  # every value, the rest after the failover
        _commit(consumer, seen)
    finally:
        consumer.close()
    assert seen == dict.fromkeys(range(3), COUNT // 3)
    new = _coordinator(cluster)
    expected = dict.fromkeys(range(3), COUNT // 3)
    assert _committed_kafka_python(cluster.bootstrap) == expected
    assert asyncio.run(_committed_aiokafka(cluster.bootstrap)) == expected
    assert "loaded in epoch" in cluster.brokers[new].log()  # it loaded the group's partition
    cluster.brokers[old].start()
    cluster.wait_full_isr(TOPIC)


def _committed_kafka_python(bootstrap: str) -> dict[int, int]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=GROUP,
                             enable_auto_commit=False)  # fmt: skip
    try:
        found = {p: consumer.committed(KafkaTopicPartition(TOPIC, p)) for p in range(3)}
        return {p: offset for p, offset in found.items() if offset is not None}
    finally:
        consumer.close()


async def _committed_aiokafka(bootstrap: str) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=GROUP,
                                enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        found = {p: await consumer.committed(AioTopicPartition(TOPIC, p)) for p in range(3)}
        return {p: offset for p, offset in found.items() if offset is not None}
    finally:
        await consumer.stop()
