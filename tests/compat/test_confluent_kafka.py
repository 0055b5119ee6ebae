"""confluent-kafka (librdkafka) against lockgate: produce and consume back, every codec.

100,000 messages of ~100 B for each codec (none, gzip, snappy, lz4, zstd) into a 3-partition
topic, message i to partition i % 3; a manually assigned consumer must read every message
exactly once, in order, at consecutive offsets; the stored batches must carry the codec.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.support.broker import BrokerProcess
from tests.support.clients import consume_all, create_topic
from tests.support.kafka_wire import KafkaWire, fetch_batches
from tests.support.sequences import check_partitions, sequence_of, sequence_value

pytestmark = pytest.mark.compat

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PARTITIONS = 3
COUNT = 100_000


def produce_sequence(bootstrap: str, topic: str, count: int, codec: str) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": count,
        }
    )
    errors: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(str(error))

    for sequence in range(count):
        producer.produce(
            topic,
            value=sequence_value(sequence),
            partition=sequence % PARTITIONS,
            on_delivery=delivered,
        )
        if sequence % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "messages still queued after 60 s"
    assert errors == []


def assert_stored_codec(bootstrap: str, topic: str, codec: int) -> None:
    with KafkaWire(bootstrap) as wire:
        for partition in range(PARTITIONS):
            error, batches = fetch_batches(wire, topic, partition)
            assert error == 0
            assert batches, f"no batch in partition {partition}"
            assert {batch.compression for batch in batches} == {codec}


@pytest.mark.parametrize("codec", list(CODECS))
def test_produce_consume_every_codec(shared_broker: BrokerProcess, codec: str) -> None:
    topic = f"confluent-{codec}"
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)
    produce_sequence(bootstrap, topic, COUNT, codec)
    received = consume_all(bootstrap, topic, PARTITIONS, COUNT)
    check_partitions(
        {p: [(offset, sequence_of(value)) for offset, value in got] for p, got in received.items()},
        COUNT,
        PARTITIONS,
    )
    assert_stored_codec(bootstrap, topic, CODECS[codec])
