"""DeleteRecords (KIP-107) through real clients: confluent-kafka's and kafka-python's admin
clients move a partition's log start offset; the new low watermark is what clients see
(watermarks, kcat from the beginning), a consumer positioned below it is reset by
auto.offset.reset, and internal topics refuse it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("delete-records") / "data").start()
    try:
        yield process
    finally:
        process.kill()


def fill(bootstrap: str, topic: str, count: int) -> None:
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for number in range(count):
        producer.produce(topic, f"v{number}".encode(), partition=0)
        producer.poll(0)
    assert producer.flush(20) == 0


def low_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low)
    finally:
        consumer.close()


def test_confluent_kafka_deletes_records_and_consumers_see_the_new_start(
    broker: BrokerProcess,
) -> None:
    fill(broker.bootstrap, "trimmed", 20)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([TopicPartition("trimmed", 0, 12)])
    [result] = [f.result(timeout=20) for f in futures.values()]
    assert result.low_watermark == 12
    assert low_watermark(broker.bootstrap, "trimmed") == 12
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "below-start",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("trimmed", 0, 3)])  # below the start: reset
    first = None
    deadline = time.monotonic() + 20
    while first is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            first = message.offset()
    consumer.close()
    assert first == 12
    output = subprocess.run(
        [
            "kcat",
            "-b",
            broker.bootstrap,
            "-C",
            "-t",
            "trimmed",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%o\\n",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    assert output[0] == "12" and output[-1] == "19"


def test_kafka_python_deletes_to_the_high_watermark(broker: BrokerProcess) -> None:
    fill(broker.bootstrap, "emptied", 5)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        answer = admin.delete_records({KafkaTopicPartition("emptied", 0): -1})
    finally:
        admin.close()
    assert low_watermark(broker.bootstrap, "emptied") == 5
    assert answer is not None


def test_internal_topics_and_offsets_past_the_end_are_refused(broker: BrokerProcess) -> None:
    fill(broker.bootstrap, "short", 3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    refusals = (
        (TopicPartition("short", 0, 10), "OFFSET_OUT_OF_RANGE"),
        (TopicPartition("__consumer_offsets", 0, 0), "TOPIC_EXCEPTION"),
    )
    for partition, code in refusals:
        [future] = admin.delete_records([partition]).values()
        with pytest.raises(KafkaException) as refused:
            future.result(timeout=20)
        assert code in refused.value.args[0].name(), refused.value.args[0].name()
    assert low_watermark(broker.bootstrap, "short") == 0
