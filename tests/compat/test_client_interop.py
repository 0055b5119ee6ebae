"""Records written by lockgate's client and read by confluent-kafka, and the reverse: keys,
values, headers, timestamps, compression and transactions survive the trip both ways."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, Message
from lockgate.client.partitioner import partition_for_key
from lockgate.client.producer import Producer
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

pytestmark = pytest.mark.compat
PARTITIONS = 3
STAMP = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(shared_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    yield shared_broker


def confluent_read(bootstrap: str, topic: str, count: int) -> list[tuple[Any, ...]]:
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"interop-{topic}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + 30
    try:
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            seen.append(
                (
                    message.partition(),
                    message.key(),
                    message.value(),
                    list(message.headers() or []),
                    message.timestamp()[1],
                )
            )
    finally:
        consumer.close()
    return seen


@pytest.mark.parametrize("compression", ["none", "gzip", "lz4", "zstd", "snappy"])
async def test_lockgate_client_to_confluent_kafka(broker: BrokerProcess, compression: str) -> None:
    topic = f"to-librdkafka-{compression}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    async with Producer(
        broker.bootstrap, transactional_id=f"interop-{compression}", compression=compression
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for i in range(20):
            await producer.send(
                topic, f"v{i}".encode(), f"k{i}".encode(), headers=[("n", str(i).encode())],
                timestamp_ms=STAMP + i,
            )  # fmt: skip
        await producer.commit_transaction()
        producer.begin_transaction()
        await producer.send(topic, b"aborted", b"k0")
        await producer.abort_transaction()
    seen = await asyncio.to_thread(confluent_read, broker.bootstrap, topic, 20)
    assert sorted(seen, key=lambda s: s[4]) == [
        (
            partition_for_key(f"k{i}".encode(), PARTITIONS),
            f"k{i}".encode(),
            f"v{i}".encode(),
            [("n", str(i).encode())],
            STAMP + i,
        )
        for i in range(20)
    ]


async def test_confluent_kafka_to_lockgate_client(broker: BrokerProcess) -> None:
    topic = "from-librdkafka"
    create_topic(broker.bootstrap, topic, PARTITIONS)

    def write() -> None:
        producer = ConfluentProducer(
            {
                "bootstrap.servers": broker.bootstrap,
                "transactional.id": "interop-librdkafka",
                "compression.type": "lz4",
                "partitioner": "murmur2_random",
            }
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(20):
            producer.produce(
                topic, f"v{i}".encode(), f"k{i}".encode(), headers=[("n", str(i).encode())],
                timestamp=STAMP + i,
            )  # fmt: skip
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce(topic, b"aborted", b"k0")
        producer.flush(30)
        producer.abort_transaction(30)

    await asyncio.to_thread(write)
    async with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        seen: list[Message] = []
        deadline = time.monotonic() + 20
        while len(seen) < 20 and time.monotonic() < deadline:
            seen.extend(await consumer.poll(200))
        seen.extend(await consumer.poll(300))  # the aborted record must not follow
    assert sorted(
        ((m.partition, m.key, m.value, list(m.headers), m.timestamp) for m in seen),
        key=lambda s: s[4],
    ) == [
        (
            partition_for_key(f"k{i}".encode(), PARTITIONS),
            f"k{i}".encode(),
            f"v{i}".encode(),
            [("n", str(i).encode())],
            STAMP + i,
        )
        for i in range(20)
    ]
