"""Log compaction through real clients: a topic created with cleanup.policy=compact keeps the
latest value of every key (a tombstone's key goes after delete.retention.ms) and confluent-
kafka, kafka-python, aiokafka and kcat all read the cleaned log, gaps and a producer's emptied
last batch included, before and after a crash. Records without a key are refused. The
broker's own __consumer_offsets is compacted too and a group's offset survives it."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioPartition
from confluent_kafka import KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaError as KafkaPythonError

from tests.support.broker import BrokerProcess
from tests.support.clients import confluent_consumer, create_topic

pytestmark = pytest.mark.compat

TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "internal.segment.bytes": "1024",  # below segment.bytes' minimum, as Kafka's tests
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
}
KEYS = 8
ROUNDS = 25


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    settings = {
        "log.cleaner.backoff.ms": "100",
        "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": "4096",
        "log.cleaner.min.cleanable.ratio": "0.01",
    }
    process = BrokerProcess(tmp_path_factory.mktemp("compaction") / "data", settings).start()
    try:
        yield process
    finally:
        process.kill()


def cleaned_below(broker: BrokerProcess, partition: str) -> int:
    """The highest offset the broker's log says it cleaned the partition below (0: never)."""
    found = re.findall(rf"{re.escape(partition)}: cleaned offsets below (\d+)", broker.log())
    return max(map(int, found), default=0)


def wait_cleaned(broker: BrokerProcess, partition: str, below: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while cleaned_below(broker, partition) < below:
        assert time.monotonic() < deadline, f"{partition} not cleaned below {below}"
        time.sleep(0.1)


def read_confluent(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = confluent_consumer(bootstrap)
    consumer.assign([TopicPartition(topic, 0, 0)])
    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    found: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 20
    while (not found or found[-1][0] < high - 1) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            found.append((message.offset() or 0, message.key(), message.value()))
    consumer.close()
    return found


def read_kafka_python(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    consumer.assign([KafkaTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    found = [(m.offset, m.key, m.value) for m in consumer]
    consumer.close()
    return found


async def read_aiokafka(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partition = AioPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        end = (await consumer.end_offsets([partition]))[partition]
        found: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 20
        while (not found or found[-1][0] < end - 1) and time.monotonic() < deadline:
            batches = await consumer.getmany(partition, timeout_ms=500)
            found += [(m.offset, m.key, m.value) for m in batches.get(partition, [])]
        return found
    finally:
        await consumer.stop()


def read_kcat(bootstrap: str, topic: str) -> list[str]:
    output = subprocess.run(
        [
            "kcat",
            "-b",
            bootstrap,
            "-C",
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-Z",
            "-f",
            "%o %k %s\n",
        ],
        capture_output=True,
        timeout=60,
        check=True,
    )
    return output.stdout.decode().splitlines()


def latest(found: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    values: dict[bytes | None, bytes | None] = {}
    for _offset, key, value in found:
        values[key] = value
    return values


def test_a_compacted_topic_keeps_the_latest_value_of_each_key_for_every_client(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "kv", 1, TOPIC_CONFIG)
    expected: dict[bytes | None, bytes | None] = {}
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 0,
            "compression.type": "gzip",
        }
    )
    # an idempotent producer whose every value is overwritten later: its last batch is emptied
    first = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    first.produce("kv", b"overwritten", key=b"k0", partition=0)
    assert first.flush(20) == 0
    for round_ in range(ROUNDS):
        for number in range(KEYS):
            key, value = b"k%d" % number, b"r%d-%d" % (round_, number)
            producer.produce("kv", value, key=key, partition=0)
            expected[key] = value
        producer.flush(20)  # a batch a round: the log rolls every few
    producer.produce("kv", None, key=b"k1", partition=0)  # a tombstone
    expected[b"k1"] = None
    assert producer.flush(20) == 0
    produced = ROUNDS * KEYS + 2
    wait_cleaned(broker, "kv-0", produced // 2)
    # a pass that began while the last rounds were written cleaned less than it could: the
    # next ones (every 100 ms) go on, up to the active segment
    deadline = time.monotonic() + 30
    while len(confluent := read_confluent(broker.bootstrap, "kv")) >= produced // 2:
        assert time.monotonic() < deadline, f"still {len(confluent)} of {produced} records"
        time.sleep(0.2)
    assert [o for o, _, _ in confluent] == sorted({o for o, _, _ in confluent})
    assert latest(confluent) == expected
    assert latest(read_kafka_python(broker.bootstrap, "kv")) == expected
    assert latest(asyncio.run(read_aiokafka(broker.bootstrap, "kv"))) == expected
    # (the cleaner may go on between the reads: what each client sees may shrink, the latest
    # value of every key may not change)
    kcat = [line.split() for line in read_kcat(broker.bootstrap, "kv")]
    kcat_latest = {
        key.encode(): None if value == "NULL" else value.encode() for _, key, value in kcat
    }
    assert kcat_latest == expected
    assert [int(o) for o, _, _ in kcat] == sorted({int(o) for o, _, _ in kcat})

    # the tombstone goes after delete.retention.ms, at a later pass (new data makes one)
    time.sleep(1.2)
    for number in range(KEYS * 8):
        producer.produce("kv", b"again", key=b"k%d" % (2 + number % 6), partition=0)
        producer.flush(20)
    deadline = time.monotonic() + 30
    while b"k1" in latest(read_confluent(broker.bootstrap, "kv")):
        assert time.monotonic() < deadline, "the tombstone was never removed"
        time.sleep(0.5)
    final = latest(read_confluent(broker.bootstrap, "kv"))
    assert final[b"k0"] == expected[b"k0"] and final[b"k2"] == b"again"

    broker.restart(clean=False)  # kill -9: the cleaned log is what a recovery finds
    assert latest(read_confluent(broker.bootstrap, "kv")) == final


def test_max_compaction_lag_cleans_what_the_dirty_ratio_never_would(
    broker: BrokerProcess,
) -> None:
    # min.cleanable.dirty.ratio=1: the ratio alone never makes a pass (Kafka's ratio must
    # exceed it); with max.compaction.lag.ms records a second old get cleaned anyway
    never = {"cleanup.policy": "compact", "internal.segment.bytes": "1024"}
    never["min.cleanable.dirty.ratio"] = "1"
    create_topic(broker.bootstrap, "lagged", 1, {**never, "max.compaction.lag.ms": "1000"})
    create_topic(broker.bootstrap, "unlagged", 1, never)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    expected: dict[bytes | None, bytes | None] = {}
    for round_ in range(ROUNDS):
        for number in range(KEYS):
            key, value = b"k%d" % number, b"r%d-%d" % (round_, number)
            for topic in ("lagged", "unlagged"):
                producer.produce(topic, value, key=key, partition=0)
            expected[key] = value
        assert producer.flush(20) == 0
    produced = ROUNDS * KEYS
    wait_cleaned(broker, "lagged-0", produced // 2)
    found = read_confluent(broker.bootstrap, "lagged")
    assert len(found) < produced and latest(found) == expected
    assert cleaned_below(broker, "unlagged-0") == 0
    assert len(read_confluent(broker.bootstrap, "unlagged")) == produced


def test_a_compacted_topic_refuses_records_without_a_key(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "keyed", 1, {"cleanup.policy": "compact"})
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    producer.produce("keyed", b"no key", partition=0, on_delivery=lambda e, _m: errors.append(e))
    producer.flush(20)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    kafka_python = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0)
    with pytest.raises(KafkaPythonError):
        kafka_python.send("keyed", b"no key", partition=0).get(timeout=20)
    kafka_python.send("keyed", b"with key", key=b"k", partition=0).get(timeout=20)
    kafka_python.close()
    assert "compacted topic cannot accept a record without a key" in broker.log()


def test_consumer_offsets_are_compacted_and_a_group_keeps_its_offset(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "source", 1)
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": "compacted-group"})
    for offset in range(1, 301):
        consumer.commit(offsets=[TopicPartition("source", 0, offset)], asynchronous=False)
    consumer.close()
    wait_cleaned(broker, "__consumer_offsets-0", 100)
    broker.restart(clean=False)
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": "compacted-group"})
    [committed] = consumer.committed([TopicPartition("source", 0)], timeout=20)
    consumer.close()
    assert committed.offset == 300
