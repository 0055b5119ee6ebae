"""Kafka 4 parity admin features through real clients, on one broker for the module.

- compression.type: confluent-kafka produces gzip batches (idempotent) into a topic with
  compression.type=zstd; the stored batches carry zstd (read from the segment file and over
  Fetch) and confluent-kafka, kafka-python, aiokafka and kcat read every record back.
- DescribeLogDirs through kafka-python's admin describe_log_dirs (confluent-kafka's Python
  binding has none) and `lockgate log-dirs` (table and JSON).
- Dynamic broker configs through confluent-kafka's AdminClient (incremental_alter_configs and
  describe_configs on broker 0, a refused static property; librdkafka refuses the unnamed
  cluster-default resource, which the CLI test covers).
- aiokafka's alter_configs (the legacy AlterConfigs) and describe_configs on broker 0.
- `lockgate configs` on topics, brokers (default and --all) and users (client quotas).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._resource import ResourceType
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.admin import KafkaAdminClient

from lockgate.protocol.records import HEADER_SIZE, parse_header
from tests.support.broker import BrokerProcess
from tests.support.clients import confluent_consumer, create_topic
from tests.support.kafka_wire import KafkaWire, fetch_batches

pytestmark = pytest.mark.compat

SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
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


def lockgate(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", *args],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def test_confluent_kafka_broker_configs(shared_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    broker = ConfigResource(ResourceType.BROKER, "0")
    admin.incremental_alter_configs(
        [
            ConfigResource(
                ResourceType.BROKER,
                "0",
                incremental_configs=[
                    ConfigEntry("log.retention.ms", "86400000", incremental_operation=SET)
                ],
            )
        ]
    )[broker].result(timeout=20)
    described = admin.describe_configs([broker])[broker].result(timeout=20)
    retention = described["log.retention.ms"]
    assert retention.value == "86400000"
    assert retention.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not retention.is_read_only and described["log.dirs"].is_read_only
    refused = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[ConfigEntry("log.dirs", "/elsewhere", incremental_operation=SET)],
    )
    with pytest.raises(KafkaException) as raised:
        admin.incremental_alter_configs([refused])[refused].result(timeout=20)
    assert raised.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: [log.dirs]" in str(raised.value)
    admin.incremental_alter_configs(
        [
            ConfigResource(
                ResourceType.BROKER,
                "0",
                incremental_configs=[
                    ConfigEntry("log.retention.ms", None, incremental_operation=DELETE)
                ],
            )
        ]
    )[broker].result(timeout=20)
    after = admin.describe_configs([broker])[broker].result(timeout=20)
    assert after["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_cli_configs_topics_brokers_and_quotas(shared_broker: BrokerProcess) -> None:
    bootstrap = ["--bootstrap-server", shared_broker.bootstrap]
    create_topic(shared_broker.bootstrap, "cli-configs", 1)
    topic = ["--entity-type", "topics", "--entity-name", "cli-configs"]
    out = lockgate("configs", *bootstrap, "--alter", *topic, "--add-config", "retention.ms=5000")
    assert out == "Completed updating config for topic cli-configs.\n"
    out = lockgate("configs", *bootstrap, "--describe", *topic)
    assert out.splitlines() == [
        "Dynamic configs for topic cli-configs are:",
        "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000,"
        " DEFAULT_CONFIG:log.retention.ms=604800000}",
    ]
    brokers = ["--entity-type", "brokers", "--entity-default"]
    out = lockgate(
        "configs", *bootstrap, "--alter", *brokers, "--add-config", "log.roll.ms=3600000"
    )
    assert out == "Completed updating default config for brokers in the cluster.\n"
    out = lockgate("configs", *bootstrap, "--describe", *brokers)
    assert "  log.roll.ms=3600000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" in out
    out = lockgate("configs", *bootstrap, "--describe", "--entity-type", "brokers", "--all")
    assert out.startswith("All configs for broker 0 are:\n")
    assert "  log.roll.ms=3600000 sensitive=false" in out
    lockgate("configs", *bootstrap, "--alter", *brokers, "--delete-config", "log.roll.ms")
    users = ["--entity-type", "users", "--entity-name", "alice"]
    out = lockgate(
        "configs", *bootstrap, "--alter", *users, "--add-config", "producer_byte_rate=1024"
    )
    assert out == "Completed updating config for user alice.\n"
    out = lockgate("configs", *bootstrap, "--describe", *users)
    assert out == "Quota configs for user-principal 'alice' are producer_byte_rate=1024.0\n"
    # the same quota as `lockgate quotas` sees it
    assert "producer_byte_rate=1024" in lockgate(
        "quotas", "describe", *bootstrap, "--user", "alice"
    )


def test_cli_log_dirs(shared_broker: BrokerProcess, recompressed_topic: str) -> None:
    bootstrap = ["--bootstrap-server", shared_broker.bootstrap]
    document = json.loads(
        lockgate("log-dirs", *bootstrap, "--topics", recompressed_topic, "--json")
    )
    [broker] = document["brokers"]
    assert document["version"] == 1 and broker["broker"] == 0
    [log_dir] = broker["logDirs"]
    assert log_dir["error"] is None
    [partition] = log_dir["partitions"]
    assert partition["partition"] == f"{recompressed_topic}-0" and partition["size"] > 0
    table = lockgate("log-dirs", *bootstrap, "--describe")
    assert f"{recompressed_topic}-0" in table and "__consumer_offsets-0" in table
    assert "OffsetLag" in table.splitlines()[0]


def test_aiokafka_alters_broker_configs_with_the_legacy_api(shared_broker: BrokerProcess) -> None:
    """aiokafka's alter_configs is the legacy AlterConfigs: the broker resource's dynamic values
    become exactly the given set."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
    from aiokafka.admin.config_resource import ConfigResourceType

    async def run() -> tuple[Any, Any, Any]:
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
        await admin.start()
        try:
            broker = ConfigResourceType.BROKER
            altered = await admin.alter_configs(
                [AioConfigResource(broker, "0", {"log.segment.bytes": "500000000"})]
            )
            described = await admin.describe_configs(
                [AioConfigResource(broker, "0")], include_synonyms=True
            )
            cleared = await admin.alter_configs([AioConfigResource(broker, "0", {})])
            return altered, described, cleared
        finally:
            await admin.close()

    # aiokafka sends topic resources in one request and each broker's in another
    altered, described, cleared = (
        [r for r in responses if r.resources] for responses in asyncio.run(run())
    )
    assert [resource[0] for resource in altered[0].resources] == [0]
    [(error, _message, _type, _name, entries)] = described[0].resources
    assert error == 0
    segment = next(entry for entry in entries if entry[0] == "log.segment.bytes")
    # (name, value, read_only, config_source, is_sensitive, synonyms)
    assert segment[1:4] == ("500000000", False, 2)  # DYNAMIC_BROKER_CONFIG
    assert [synonym[2] for synonym in segment[5]] == [2, 5]
    assert [resource[0] for resource in cleared[0].resources] == [0]
