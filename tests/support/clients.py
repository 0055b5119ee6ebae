# Small helpers around the third-party clients used by the compatibility tests: creating
# topics through confluent-kafka's AdminClient (kcat cannot) and consuming a whole topic back
# with manual assignment. Every wait is bounded.
from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic


def create_topic(
    bootstrap: str, name: str, partitions: int = 3, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10
    )
    for future in futures.values():
        future.result(timeout=20)


def confluent_consumer(bootstrap: str, **extra: object) -> Consumer:
    """A consumer for manual assignment: librdkafka wants a group.id even then; nothing is
    committed."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": "compat-manual-assignment",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
    }
    config.update(extra)
    return Consumer(config)


def position(message: Message) -> tuple[int, int]:
    """(partition, offset) of a consumed message (typed Optional by confluent-kafka)."""
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None
    return partition, offset


def consume_all(
    bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 60.0
) -> dict[int, list[tuple[int, bytes | None]]]:
    """Reads `count` records of `topic` from offset 0 of every partition with confluent-kafka:
    partition → [(offset, value)]. Stops at `count` or after `timeout` seconds."""
    consumer = confluent_consumer(bootstrap)
    received: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        total = 0
        deadline = time.monotonic() + timeout
        while total < count and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error: {error}")
                partition, offset = position(message)
                received[partition].append((offset, message.value()))
                total += 1
        # a short extra wait for anything beyond `count` (duplicates would show up here)
        for message in consumer.consume(10_000, 0.3):
            if message.error() is None:
                partition, offset = position(message)
                received[partition].append((offset, message.value()))
    finally:
        consumer.close()
    return received


def committed_offset(bootstrap: str, group: str, topic: str, partition: int = 0) -> int:
    """The group's committed offset of one partition as confluent-kafka reads it (OFFSET_INVALID,
    -1001, when there is none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [found] = consumer.committed([TopicPartition(topic, partition)], timeout=20)
        return int(found.offset)
    finally:
        consumer.close()
