"""kafka-python against lockgate: produce and consume back, every codec.

A 3-partition topic per codec, message i to partition i % 3, values of ~100 B. kafka-python is
pure Python and slow, so to keep the run short: 100,000 messages with lz4 and 20,000 with each
other codec (none, gzip, snappy, zstd). A consumer without a group (assign +
seek_to_beginning) must read every message exactly once, in order, at consecutive offsets;
the stored batches must carry the codec.
"""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.kafka_wire import KafkaWire, fetch_batches
from tests.support.sequences import check_partitions, sequence_of, sequence_value

pytestmark = pytest.mark.compat

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
COUNTS = {"none": 20_000, "gzip": 20_000, "snappy": 20_000, "lz4": 100_000, "zstd": 20_000}
PARTITIONS = 3


def produce_sequence(bootstrap: str, topic: str, count: int, codec: str) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=5,
        batch_size=64 * 1024,
        enable_idempotence=False,  # TODO(idempotence): test the default once InitProducerId lands
    )
    try:
        futures = [
            producer.send(topic, value=sequence_value(i), partition=i % PARTITIONS)
            for i in range(count)
        ]
        producer.flush(timeout=60)
        failed = [future.exception for future in futures if not future.succeeded()]
        assert failed == []
    finally:
        producer.close(timeout=10)


def consume_sequence(
    bootstrap: str, topic: str, count: int, timeout: float = 60.0
) -> dict[int, list[tuple[int, int]]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    received: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        total = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=500, max_records=10_000)
            if not batches and total >= count:
                break  # everything read and nothing more (duplicates would show up here)
            for partition, records in batches.items():
                for record in records:
                    received[partition.partition].append((record.offset, sequence_of(record.value)))
                total += len(records)
    finally:
        consumer.close()
    return received


@pytest.mark.parametrize("codec", list(CODECS))
def test_produce_consume_every_codec(shared_broker: BrokerProcess, codec: str) -> None:
    topic = f"kafka-python-{codec}"
    count = COUNTS[codec]
    create_topic(shared_broker.bootstrap, topic, PARTITIONS)
    produce_sequence(shared_broker.bootstrap, topic, count, codec)
    check_partitions(consume_sequence(shared_broker.bootstrap, topic, count), count, PARTITIONS)
    with KafkaWire(shared_broker.bootstrap) as wire:
        for partition in range(PARTITIONS):
            error, batches = fetch_batches(wire, topic, partition)
            assert error == 0 and batches
            assert {batch.compression for batch in batches} == {CODECS[codec]}
