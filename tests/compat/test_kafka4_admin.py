"""Kafka 4 parity admin features through real clients, on one broker for the module.

- compression.type: confluent-kafka produces gzip batches (idempotent) into a topic with
  compression.type=zstd; the stored batches carry zstd (read from the segment file and over
  Fetch) and confluent-kafka, kafka-python, aiokafka and kcat read every record back.
- DescribeLogDirs through kafka-python's admin describe_log_dirs (confluent-kafka's Python
  binding has none).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.admin import KafkaAdminClient

from lockgate.protocol.records import HEADER_SIZE, parse_header
from tests.support.broker import BrokerProcess
from tests.support.clients import confluent_consumer, create_topic
from tests.support.kafka_wire import KafkaWire, fetch_batches

pytestmark = pytest.mark.compat

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
COUNT = 2_000
VALUES = [b"value-%05d-" % i + b"x" * 80 for i in range(COUNT)]


def stored_codecs(data_dir: Path, topic: str) -> set[int]:
    """The codec of every batch in the partition's segment files."""
    codecs = set()
    for segment in sorted((data_dir / f"{topic}-0").glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + HEADER_SIZE <= len(data):
            header = parse_header(data, position)
            codecs.add(header.compression)
            position += header.size
    return codecs


@pytest.fixture(scope="module")
def recompressed_topic(shared_broker: BrokerProcess) -> str:
    topic = "recompressed-zstd"
    create_topic(shared_broker.bootstrap, topic, 1, {"compression.type": "zstd"})
    producer = Producer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "compression.type": "gzip",
            "enable.idempotence": True,
            "linger.ms": 20,
        }
    )
    for value in VALUES:
        producer.produce(topic, value, partition=0)
    assert producer.flush(20) == 0
    return topic


def test_batches_are_stored_with_the_topic_codec(
    shared_broker: BrokerProcess, recompressed_topic: str
) -> None:
    assert stored_codecs(shared_broker.data_dir, recompressed_topic) == {4}
    with KafkaWire(shared_broker.bootstrap) as wire:
        error, batches = fetch_batches(wire, recompressed_topic, 0)
    assert error == 0 and batches
    assert {batch.compression for batch in batches} == {4}


def test_confluent_kafka_reads_recompressed_records(
    shared_broker: BrokerProcess, recompressed_topic: str
) -> None:
    consumer = confluent_consumer(shared_broker.bootstrap)
    consumer.assign([TopicPartition(recompressed_topic, 0, 0)])
    received: list[tuple[int | None, bytes | None]] = []
    try:
        for _ in range(200):
            if len(received) >= COUNT:
                break
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None, message.error()
                received.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert received == list(enumerate(VALUES))


def test_kafka_python_reads_recompressed_records(
    shared_broker: BrokerProcess, recompressed_topic: str
) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False, group_id=None
    )
    partition = KafkaPythonTopicPartition(recompressed_topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    received: list[bytes] = []
    try:
        for _ in range(100):
            if len(received) >= COUNT:
                break
            for records in consumer.poll(timeout_ms=500).values():
                received += [record.value for record in records]
    finally:
        consumer.close()
    assert received == VALUES


def test_aiokafka_reads_recompressed_records(
    shared_broker: BrokerProcess, recompressed_topic: str
) -> None:
    async def read() -> list[bytes]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False
        )
        await consumer.start()
        try:
            from aiokafka import TopicPartition as AioPartition

            partition = AioPartition(recompressed_topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            received: list[bytes] = []
            for _ in range(100):
                if len(received) >= COUNT:
                    break
                batches = await consumer.getmany(timeout_ms=500)
                received += [r.value for records in batches.values() for r in records]
            return received
        finally:
            await consumer.stop()

    assert asyncio.run(read()) == VALUES


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make system-deps)")
def test_kcat_reads_recompressed_records(
    shared_broker: BrokerProcess, recompressed_topic: str
) -> None:
    assert KCAT is not None
    result = subprocess.run(
        [KCAT, "-C", "-b", shared_broker.bootstrap, "-t", recompressed_topic, "-p", "0",
         "-o", "beginning", "-e", "-q", "-f", "%s\\n"],
        capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    assert result.stdout.splitlines() == VALUES


def test_kafka_python_describe_log_dirs(
    shared_broker: BrokerProcess, recompressed_topic: str
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        [answer] = admin.describe_log_dirs({recompressed_topic: [0]})
    finally:
        admin.close()
    [log_dir] = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert Path(log_dir["log_dir"]) == shared_broker.data_dir.resolve()
    assert log_dir["total_bytes"] > 0 and 0 <= log_dir["usable_bytes"] <= log_dir["total_bytes"]
    [topic] = log_dir["topics"]
    assert topic["name"] == recompressed_topic
    [partition] = topic["partitions"]
    on_disk = sum(
        p.stat().st_size for p in (shared_broker.data_dir / f"{recompressed_topic}-0").glob("*.log")
    )
    assert partition["partition_size"] == on_disk > 0
    assert partition["offset_lag"] == 0 and partition["is_future_key"] is False
