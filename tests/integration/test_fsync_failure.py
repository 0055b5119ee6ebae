"""A failed fsync, in process (a storage engine whose sync fails), through kafka-python:
the high watermark never passes data that was not synced, the produce waiting on that flush
gets KAFKA_STORAGE_ERROR, and from then on produce and fetch answer KAFKA_STORAGE_ERROR
(the log directory is offline until a restart) while the connection stays usable."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaStorageError

from lockgate.config.properties import BrokerConfig
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine, MemoryFaults

pytestmark = pytest.mark.compat

TOPIC = "synced"


@pytest.fixture
async def setup() -> AsyncIterator[tuple[Broker, MemoryFaults]]:
    faults = MemoryFaults()
    config = BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "lockgate.durability": "fsync",
            "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
        }
    )
    broker = Broker(config, MemoryEngine(faults, durable=True))
    await broker.start()
    broker.topics.create(TOPIC, 1, 1, {})
    try:
        yield broker, faults
    finally:
        await broker.stop()


def send(bootstrap: str, values: list[bytes]) -> list[object]:
    """Sends each value with acks=all and no retries; returns offsets or the exceptions."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0)
    outcomes: list[object] = []
    try:
        for value in values:
            try:
                outcomes.append(producer.send(TOPIC, value, partition=0).get(timeout=20).offset)
            except KafkaStorageError as exc:
                outcomes.append(exc)
    finally:
        producer.close(timeout=10)
    return outcomes


def fetch_end(bootstrap: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partition = TopicPartition(TOPIC, 0)
        return int(consumer.end_offsets([partition])[partition])
    finally:
        consumer.close()


async def test_failed_fsync_is_never_acknowledged_and_takes_the_log_offline(
    setup: tuple[Broker, MemoryFaults],
) -> None:
    broker, faults = setup
    bootstrap = f"127.0.0.1:{broker.port}"
    partition = broker.topics.get(TOPIC, 0)
    assert partition is not None
    assert await asyncio.to_thread(send, bootstrap, [b"first"]) == [0]
    assert partition.high_watermark == 1

    faults.sync_errno = errno.EIO
    outcome = await asyncio.to_thread(send, bootstrap, [b"unsynced"])
    assert isinstance(outcome[0], KafkaStorageError)
    assert partition.log_end_offset == 2
    assert partition.high_watermark == 1  # the unsynced record is never visible
    assert broker.storage.offline is not None

    faults.sync_errno = None  # an fsync that would now "succeed" proves nothing (fsyncgate)
    outcomes = await asyncio.to_thread(send, bootstrap, [b"after", b"again"])
    assert all(isinstance(o, KafkaStorageError) for o in outcomes)
    assert partition.log_end_offset == 2
    assert partition.high_watermark == 1
    assert await asyncio.to_thread(fetch_end, bootstrap) == 1
