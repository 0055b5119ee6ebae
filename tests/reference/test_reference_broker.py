"""The reference broker fixture itself: Apache Kafka 4.x in KRaft mode on 127.0.0.1 serves
confluent-kafka (a transactional producer, a read_committed consumer) beside lockgate, and
both advertise the APIs of the exactly-once machinery."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.broker import running_broker
from tests.support.clients import confluent_consumer, create_topic
from tests.support.kafka_wire import KafkaWire, api_versions
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

EXACTLY_ONCE_APIS = {0, 1, 10, 22, 24, 25, 26, 28, 61, 65, 66}  # Produce ... ListTransactions


def test_the_reference_broker_serves_a_transaction(reference_kafka: ReferenceKafka) -> None:
    create_topic(reference_kafka.bootstrap, "reference-smoke", 1)
    producer = Producer(
        {"bootstrap.servers": reference_kafka.bootstrap, "transactional.id": "reference-smoke"}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    for n in range(5):
        producer.produce("reference-smoke", b"%d" % n, partition=0)
    producer.commit_transaction(60)
    consumer = confluent_consumer(
        reference_kafka.bootstrap, **{"isolation.level": "read_committed"}
    )
    consumer.subscribe(["reference-smoke"])
    values: list[bytes | None] = []
    deadline = time.monotonic() + 60
    while len(values) < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [b"0", b"1", b"2", b"3", b"4"]


def test_both_brokers_advertise_the_exactly_once_apis(
    reference_kafka: ReferenceKafka, tmp_path: Path
) -> None:
    with running_broker(tmp_path / "data") as lockgate:
        for bootstrap in (reference_kafka.bootstrap, lockgate.bootstrap):
            with KafkaWire(bootstrap) as wire:
                advertised = set(api_versions(wire).api_keys)
            assert advertised >= EXACTLY_ONCE_APIS, bootstrap
