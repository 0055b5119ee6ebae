"""aiokafka against lockgate: produce and consume back, every codec.

A 3-partition topic per codec, message i to partition i % 3, values of ~100 B: 100,000
messages with zstd and 20,000 with each other codec (none, gzip, snappy, lz4) to keep the run
short. A consumer without a group (assign + seek_to_beginning) must read every message
exactly once, in order, at consecutive offsets; the stored batches must carry the codec.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.kafka_wire import KafkaWire, fetch_batches
from tests.support.sequences import check_partitions, sequence_of, sequence_value

pytestmark = pytest.mark.compat

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COUNTS = {"none": 20_000, "gzip": 20_000, "snappy": 20_000, "lz4": 20_000, "zstd": 100_000}
PARTITIONS = 3


async def produce_sequence(bootstrap: str, topic: str, count: int, codec: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=5,
        max_batch_size=64 * 1024,
        enable_idempotence=False,  # TODO(idempotence): test the default once InitProducerId lands
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=sequence_value(i), partition=i % PARTITIONS)
            for i in range(count)
        ]
        results = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), timeout=60
        )
        assert [r for r in results if isinstance(r, BaseException)] == []
    finally:
        await producer.stop()


async def consume_sequence(
    bootstrap: str, topic: str, count: int, timeout: float = 60.0
) -> dict[int, list[tuple[int, int]]]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    received: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        total = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
            if not batches and total >= count:
                break  # everything read and nothing more (duplicates would show up here)
            for partition, records in batches.items():
                for record in records:
                    received[partition.partition].append((record.offset, sequence_of(record.value)))
                total += len(records)
    finally:
        await consumer.stop()
    return received


@pytest.mark.parametrize("codec", list(CODECS))
async def test_produce_consume_every_codec(shared_broker: BrokerProcess, codec: str) -> None:
    topic = f"aiokafka-{codec}"
    count = COUNTS[codec]
    create_topic(shared_broker.bootstrap, topic, PARTITIONS)
    await produce_sequence(shared_broker.bootstrap, topic, count, codec)
    received = await consume_sequence(shared_broker.bootstrap, topic, count)
    check_partitions(received, count, PARTITIONS)
    with KafkaWire(shared_broker.bootstrap) as wire:
        for partition in range(PARTITIONS):
            error, batches = fetch_batches(wire, topic, partition)
            assert error == 0 and batches
            assert {batch.compression for batch in batches} == {CODECS[codec]}
