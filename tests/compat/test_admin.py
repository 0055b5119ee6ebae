"""Admin operations, offsets by time and broker timestamps through real clients.

- confluent-kafka AdminClient: create (and duplicate create), create_partitions, describe and
  delete topics; describe_configs, incremental_alter_configs (SET and DELETE) and the legacy
  alter_configs on a topic's retention.ms; describe_cluster; listing all topics.
- kafka-python KafkaAdminClient: the same topic and config operations, describe_cluster.
- ListOffsets: earliest/latest (get_watermark_offsets, beginning/end_offsets) and by
  timestamp (offsets_for_times) with confluent-kafka and kafka-python.
- A topic with message.timestamp.type=LogAppendTime returns the broker's timestamps.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewPartitions, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonTopicPartition
from kafka.admin import ConfigResource as KafkaPythonConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewPartitions as KafkaPythonNewPartitions
from kafka.admin import NewTopic as KafkaPythonNewTopic

from tests.support.broker import BrokerProcess
from tests.support.clients import confluent_consumer, create_topic

pytestmark = pytest.mark.compat

TIMEOUT = 20.0
DEFAULT_RETENTION_MS = str(7 * 24 * 3600 * 1000)


def admin_client(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _retention(admin: AdminClient, name: str) -> tuple[str, ConfigSource]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    (future,) = admin.describe_configs([resource]).values()
    entry = future.result(timeout=TIMEOUT)["retention.ms"]
    return entry.value, ConfigSource(entry.source)


# ---------------------------------------------------------------------------------------------
# confluent-kafka


def test_confluent_create_grow_describe_delete_topic(shared_broker: BrokerProcess) -> None:
    admin = admin_client(shared_broker)
    name = "admin-confluent-topic"
    futures = admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=10)
    futures[name].result(timeout=TIMEOUT)

    duplicate = admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=10)
    with pytest.raises(KafkaException) as raised:
        duplicate[name].result(timeout=TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    admin.create_partitions([NewPartitions(name, 4)])[name].result(timeout=TIMEOUT)
    with pytest.raises(KafkaException) as raised:  # shrinking is refused
        admin.create_partitions([NewPartitions(name, 3)])[name].result(timeout=TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.INVALID_PARTITIONS

    metadata = admin.list_topics(name, timeout=TIMEOUT)
    assert sorted(metadata.topics[name].partitions) == [0, 1, 2, 3]
    (described,) = admin.describe_topics(TopicCollection([name])).values()
    description = described.result(timeout=TIMEOUT)
    assert [p.id for p in description.partitions] == [0, 1, 2, 3]
    assert all(p.leader is not None and p.leader.id == 0 for p in description.partitions)

    # The new partition takes data.
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    producer.produce(name, b"to the new partition", partition=3)
    assert producer.flush(TIMEOUT) == 0
    consumer = confluent_consumer(shared_broker.bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(name, 3), timeout=TIMEOUT)
    finally:
        consumer.close()
    assert (low, high) == (0, 1)

    admin.delete_topics([name], operation_timeout=10)[name].result(timeout=TIMEOUT)
    # (list_topics(name) would not do: librdkafka's admin handle allows auto-creation in its
    # Metadata requests, and a Kafka broker then creates the topic again.)
    (described,) = admin.describe_topics(TopicCollection([name])).values()
    with pytest.raises(KafkaException) as raised:
        described.result(timeout=TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_confluent_topic_configs(shared_broker: BrokerProcess) -> None:
    admin = admin_client(shared_broker)
    name = "admin-confluent-configs"
    create_topic(shared_broker.bootstrap, name, 1, {"retention.ms": "3600000"})
    assert _retention(admin, name) == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    resource = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=TIMEOUT)
    assert _retention(admin, name) == ("7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    resource = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=TIMEOUT)
    assert _retention(admin, name) == (DEFAULT_RETENTION_MS, ConfigSource.DEFAULT_CONFIG)

    # The legacy AlterConfigs replaces the topic's whole set of overrides.
    legacy = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "1000000"})
    with pytest.warns(DeprecationWarning):
        (future,) = admin.alter_configs([legacy]).values()
    future.result(timeout=TIMEOUT)
    assert _retention(admin, name) == ("1000000", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    bad = ConfigResource(
        ResourceType.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    (future,) = admin.incremental_alter_configs([bad]).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert _retention(admin, name) == ("1000000", ConfigSource.DYNAMIC_TOPIC_CONFIG)


def test_confluent_describe_cluster(shared_broker: BrokerProcess) -> None:
    admin = admin_client(shared_broker)
    cluster = admin.describe_cluster(request_timeout=TIMEOUT).result(timeout=TIMEOUT)
    assert cluster.cluster_id
    assert cluster.controller is not None and cluster.controller.id == 0
    assert [(node.id, node.host, node.port) for node in cluster.nodes] == [
        (0, "127.0.0.1", shared_broker.port)
    ]


def test_confluent_list_all_topics(shared_broker: BrokerProcess) -> None:
    name = "admin-confluent-listed"
    create_topic(shared_broker.bootstrap, name, 1)
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    assert name in admin.list_topics(timeout=5).topics


# ---------------------------------------------------------------------------------------------
# kafka-python


def test_kafka_python_admin(shared_broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=10_000)
    name = "admin-kafka-python"
    try:
        created = admin.create_topics(
            [KafkaPythonNewTopic(name, 2, 1, topic_configs={"retention.ms": "3600000"})]
        )
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [(name, 0)]
        assert name in admin.list_topics()

        admin.create_partitions({name: KafkaPythonNewPartitions(3)})
        (described,) = admin.describe_topics([name])
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]

        def retention() -> str:
            resource = KafkaPythonConfigResource(
                ConfigResourceType.TOPIC, name, configs=["retention.ms"]
            )
            configs = admin.describe_configs([resource], config_filter="all")
            return str(configs["topic"][name]["retention.ms"]["value"])

        assert retention() == "3600000"
        for incremental, value in ((True, "7200000"), (False, "1000000")):
            resource = KafkaPythonConfigResource(
                ConfigResourceType.TOPIC, name, configs={"retention.ms": value}
            )
            admin.alter_configs([resource], incremental=incremental)
            assert retention() == value, f"incremental={incremental}"

        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 0
        assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
            (0, "127.0.0.1", shared_broker.port)
        ]
        assert cluster["cluster_id"]

        deleted = admin.delete_topics([name])
        assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [(name, 0)]
        assert name not in admin.list_topics()
    finally:
        admin.close()


# ---------------------------------------------------------------------------------------------
# ListOffsets and timestamps

BASE_TIMESTAMP = 1_700_000_000_000


def _produce_with_timestamps(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, b"t%d" % i, partition=0, timestamp=BASE_TIMESTAMP + 1000 * i)
        producer.flush(TIMEOUT)  # one batch per message: timestamps inside batches too
    assert producer.flush(TIMEOUT) == 0


def test_offsets_earliest_latest_and_by_time(shared_broker: BrokerProcess) -> None:
    topic = "offsets-by-time"
    create_topic(shared_broker.bootstrap, topic, 1)
    _produce_with_timestamps(shared_broker.bootstrap, topic, 10)

    consumer = confluent_consumer(shared_broker.bootstrap)
    try:
        partition = TopicPartition(topic, 0)
        assert consumer.get_watermark_offsets(partition, timeout=TIMEOUT) == (0, 10)
        queries = [
            TopicPartition(topic, 0, BASE_TIMESTAMP - 5000),  # before everything → 0
            TopicPartition(topic, 0, BASE_TIMESTAMP + 4000),  # exactly message 4
            TopicPartition(topic, 0, BASE_TIMESTAMP + 4500),  # first at or after → 5
            TopicPartition(topic, 0, BASE_TIMESTAMP + 60_000),  # after everything → none
        ]
        answers = [
            consumer.offsets_for_times([query], timeout=TIMEOUT)[0].offset for query in queries
        ]
    finally:
        consumer.close()
    assert answers == [0, 4, 5, -1]

    kp_consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=None)
    try:
        kp_partition = KafkaPythonTopicPartition(topic, 0)
        assert kp_consumer.beginning_offsets([kp_partition]) == {kp_partition: 0}
        assert kp_consumer.end_offsets([kp_partition]) == {kp_partition: 10}
        found = kp_consumer.offsets_for_times({kp_partition: BASE_TIMESTAMP + 4500})
        assert found[kp_partition] is not None
        assert (found[kp_partition].offset, found[kp_partition].timestamp) == (
            5,
            BASE_TIMESTAMP + 5000,
        )
        assert kp_consumer.offsets_for_times({kp_partition: BASE_TIMESTAMP + 60_000}) == {
            kp_partition: None
        }
    finally:
        kp_consumer.close()


def test_log_append_time_topic_returns_broker_timestamps(shared_broker: BrokerProcess) -> None:
    append_topic, create_topic_name = "timestamps-log-append", "timestamps-create"
    create_topic(
        shared_broker.bootstrap, append_topic, 1, {"message.timestamp.type": "LogAppendTime"}
    )
    create_topic(shared_broker.bootstrap, create_topic_name, 1)
    client_timestamp = 1_000_000  # 1970: far from any broker clock
    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    for topic in (append_topic, create_topic_name):
        for i in range(3):
            producer.produce(topic, b"m%d" % i, partition=0, timestamp=client_timestamp)
    assert producer.flush(TIMEOUT) == 0
    after = int(time.time() * 1000)

    consumer = confluent_consumer(shared_broker.bootstrap)
    try:
        consumer.assign(
            [TopicPartition(append_topic, 0, 0), TopicPartition(create_topic_name, 0, 0)]
        )
        seen: dict[str, list[tuple[int, int]]] = {append_topic: [], create_topic_name: []}
        deadline = time.monotonic() + TIMEOUT
        while sum(map(len, seen.values())) < 6 and time.monotonic() < deadline:
            for message in consumer.consume(10, 0.5):
                message_topic = message.topic()
                if message.error() is None and message_topic is not None:
                    seen[message_topic].append(message.timestamp())
    finally:
        consumer.close()
    assert len(seen[append_topic]) == 3
    for kind, timestamp in seen[append_topic]:
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= timestamp <= after + 1000
    assert seen[create_topic_name] == [(TIMESTAMP_CREATE_TIME, client_timestamp)] * 3

    kp_consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=None)
    try:
        kp_partition = KafkaPythonTopicPartition(append_topic, 0)
        kp_consumer.assign([kp_partition])
        kp_consumer.seek_to_beginning()
        records: list[Any] = []
        deadline = time.monotonic() + TIMEOUT
        while len(records) < 3 and time.monotonic() < deadline:
            for batch in kp_consumer.poll(timeout_ms=500).values():
                records.extend(batch)
    finally:
        kp_consumer.close()
    assert [record.timestamp_type for record in records] == [1, 1, 1]
    assert all(before - 1000 <= record.timestamp <= after + 1000 for record in records)
