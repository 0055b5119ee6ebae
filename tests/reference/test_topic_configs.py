"""Kafka 4.4's topic config surface, walked from Kafka's own list (LogConfig.configNames() of
the reference jars, printed by java/TopicConfigList.java at test time) against lockgate and
against Apache Kafka itself: every config has Kafka's type and default in lockgate's table;
every one can be set at CreateTopics and with IncrementalAlterConfigs through confluent-kafka's
AdminClient, and both brokers describe a new topic's configs alike (value and source); bad
values get the same error and message; APPEND/SUBTRACT on cleanup.policy give the same
lists; librdkafka reports an illegal topic name as an invalid topic on both; Kafka's
kafka-topics and kafka-configs tools set configs lockgate refused before."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from lockgate.config.properties import INTERNAL_TOPIC_CONFIGS, TOPIC_CONFIGS
from tests.support.broker import BrokerProcess
from tests.support.java_programs import java_program
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

PROGRAM = Path(__file__).parent / "java" / "TopicConfigList.java"
CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"


@pytest.fixture(scope="module")
def kafka_list(classpath: str) -> dict[str, tuple[str, bool, str]]:
    """name → (type, internal, default) as Kafka's LogConfig defines them."""
    done = subprocess.run(
        java_program(PROGRAM, classpath, "-Xmx256m"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-3000:]
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("CONFIG "):
            _, name, kind, internal, *default = line.split(" ", 4)
            found[name] = (kind, internal == "true", default[0] if default else "")
    return found


@pytest.fixture(scope="module")
def lockgate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("topic-configs") / "data").start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture(scope="module")
def brokers(lockgate: BrokerProcess, reference_kafka: ReferenceKafka) -> dict[str, str]:
    return {"lockgate": lockgate.bootstrap, "kafka": reference_kafka.bootstrap}


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap: str, name: str, config: dict[str, str]) -> str | None:
    """None, or the error's name and message."""
    client = admin(bootstrap)  # kept until the answer: a destroyed client fails its futures
    future = client.create_topics([NewTopic(name, 1, 1, config=config)])[name]
    try:
        future.result(60)
    except KafkaException as exc:
        error = exc.args[0]
        return f"{error.name()}: {error.str()}"
    return None


def described(bootstrap: str, name: str) -> dict[str, tuple[str | None, str]]:
    """config → (value, source) of the topic, as DescribeConfigs answers."""
    resource = ConfigResource(ResourceType.TOPIC, name)
    client = admin(bootstrap)
    deadline = time.monotonic() + 30
    while True:  # Kafka answers UNKNOWN_TOPIC_OR_PARTITION until its metadata has the topic
        try:
            entries = client.describe_configs([resource])[resource].result(60)
            return {key: (e.value, ConfigSource(e.source).name) for key, e in entries.items()}
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def alter(bootstrap: str, name: str, *entries: ConfigEntry) -> str | None:
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=list(entries))
    client = admin(bootstrap)
    future = client.incremental_alter_configs([resource])[resource]
    try:
        future.result(60)
    except KafkaException as exc:
        error = exc.args[0]
        return f"{error.name()}: {error.str()}"
    return None


def test_lockgates_table_is_kafkas_list(kafka_list: dict[str, tuple[str, bool, str]]) -> None:
    assert sorted(TOPIC_CONFIGS) == sorted(kafka_list)
    for name, (kind, internal, default) in kafka_list.items():
        spec = TOPIC_CONFIGS[name]
        assert (spec.kind.upper(), spec.default) == (kind, default), name
        assert (name in INTERNAL_TOPIC_CONFIGS) == internal, name


def test_a_new_topics_configs_are_described_alike(brokers: dict[str, str]) -> None:
    answers = {}
    for target, bootstrap in brokers.items():
        assert create(bootstrap, "cfg-defaults", {}) is None
        answers[target] = described(bootstrap, "cfg-defaults")
    # the one difference: Kafka 4's storage format writes min.insync.replicas as a cluster-wide
    # dynamic default (eligible leader replicas); the value is the same
    value, source = answers["kafka"]["min.insync.replicas"]
    assert (value, source) == ("1", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    answers["kafka"]["min.insync.replicas"] = (value, "DEFAULT_CONFIG")
    assert answers["lockgate"] == answers["kafka"]
    assert set(answers["lockgate"]) == set(TOPIC_CONFIGS) - INTERNAL_TOPIC_CONFIGS


def test_every_config_is_set_at_creation_and_altered(
    brokers: dict[str, str], kafka_list: dict[str, tuple[str, bool, str]]
) -> None:
    # Kafka's own default of each config is a valid value (internal.segment.bytes has none)
    values = {name: default for name, (_, internal, default) in kafka_list.items() if not internal}
    values["cleanup.policy"] = "compact,delete"
    values["max.compaction.lag.ms"] = "86400000"
    values["min.cleanable.dirty.ratio"] = "0.25"
    for target, bootstrap in brokers.items():
        assert create(bootstrap, "cfg-all", values) is None, target
        shown = described(bootstrap, "cfg-all")
        assert {k: v for k, (v, _) in shown.items()} == values, target
        assert {source for _, source in shown.values()} == {"DYNAMIC_TOPIC_CONFIG"}, target
        assert create(bootstrap, "cfg-altered", {}) is None
        entries = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in values.items()
        ]
        assert alter(bootstrap, "cfg-altered", *entries) is None, target
        assert {k: v for k, (v, _) in described(bootstrap, "cfg-altered").items()} == values


BAD_CONFIGS = [
    {"file.delete.delay.mss": "1"},
    {"segment.bytes": "1000"},
    {"retention.ms": "soon"},
    {"max.compaction.lag.ms": "0"},
    {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    {"cleanup.policy": "compact,"},
    {"cleanup.policy": "squash"},
    {"compression.gzip.level": "10"},
    {"compression.type": "brotli"},
    {"leader.replication.throttled.replicas": "everything"},
    {"min.cleanable.dirty.ratio": "2"},
    {"unclean.leader.election.enable": "maybe"},
    {"remote.storage.enable": "true"},
]


def test_bad_configs_get_kafkas_errors(brokers: dict[str, str]) -> None:
    answers: dict[str, list[Any]] = {}
    for target, bootstrap in brokers.items():
        answers[target] = [
            create(bootstrap, f"cfg-bad-{number}", config)
            for number, config in enumerate(BAD_CONFIGS)
        ]
        assert create(bootstrap, "cfg-alter-bad", {}) is None
        answers[target].append(
            alter(
                bootstrap,
                "cfg-alter-bad",
                ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND),
            )
        )
    assert answers["lockgate"] == answers["kafka"]
    assert all(answer is not None for answer in answers["lockgate"])


def test_append_and_subtract_on_cleanup_policy_alike(brokers: dict[str, str]) -> None:
    steps = [
        ("compact", AlterConfigOpType.APPEND),
        ("compact", AlterConfigOpType.APPEND),
        ("delete", AlterConfigOpType.SUBTRACT),
        ("delete,compact", AlterConfigOpType.APPEND),
        ("compact,delete", AlterConfigOpType.SUBTRACT),
    ]
    answers = {}
    for target, bootstrap in brokers.items():
        assert create(bootstrap, "cfg-lists", {}) is None
        seen = []
        for value, operation in steps:
            entry = ConfigEntry("cleanup.policy", value, incremental_operation=operation)
            assert alter(bootstrap, "cfg-lists", entry) is None, (target, value, operation)
            seen.append(described(bootstrap, "cfg-lists")["cleanup.policy"])
        answers[target] = seen
    assert answers["lockgate"] == answers["kafka"]
    assert [value for value, _ in answers["lockgate"]] == [
        "delete,compact",
        "delete,compact",
        "compact",
        "compact,delete",
        "",
    ]


def delivery_error(
    bootstrap: str, topic: str, value: bytes = b"x", timestamp: int = 0, **settings: Any
) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000, **settings})
    producer.produce(topic, value, timestamp=timestamp, on_delivery=lambda e, _m: errors.append(e))
    producer.flush(30)
    assert errors, "no delivery report"
    return errors[0]


def test_librdkafka_reports_an_illegal_topic_name_as_invalid(brokers: dict[str, str]) -> None:
    for target, bootstrap in brokers.items():
        metadata = admin(bootstrap).list_topics(topic="bad name!", timeout=30)
        error = metadata.topics["bad name!"].error
        assert error is not None and error.code() == KafkaError.TOPIC_EXCEPTION, (target, error)
        delivery = delivery_error(bootstrap, "bad name!")
        assert delivery is not None, target
        assert delivery.code() == KafkaError.TOPIC_EXCEPTION, (target, delivery)


def test_record_limits_refuse_alike(brokers: dict[str, str]) -> None:
    answers = {}
    for target, bootstrap in brokers.items():
        config = {
            "max.decompressed.message.bytes": "100",
            "message.timestamp.before.max.ms": "60000",
        }
        assert create(bootstrap, "cfg-limits", config) is None
        now = int(time.time() * 1000)
        sent = [
            (b"ok", now),
            (b"x" * 200, now),  # over max.decompressed.message.bytes once decompressed
            (b"ahead", now + 2 * 3600 * 1000),  # past the default hour ahead
            (b"behind", now - 120_000),  # past message.timestamp.before.max.ms
        ]
        errors = [
            delivery_error(
                bootstrap, "cfg-limits", value, timestamp, **{"compression.type": "gzip"}
            )
            for value, timestamp in sent
        ]
        answers[target] = [None if e is None else e.code() for e in errors]
    assert (
        answers["lockgate"]
        == answers["kafka"]
        == [
            None,
            KafkaError.INVALID_RECORD,
            KafkaError.INVALID_TIMESTAMP,
            KafkaError.INVALID_TIMESTAMP,
        ]
    )


def test_kafkas_tools_set_every_kind_of_config(
    brokers: dict[str, str], reference_kafka: ReferenceKafka
) -> None:
    def run(main: str, bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
        command = reference_kafka.java(main, "--bootstrap-server", bootstrap, *args)
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    answers = {}
    for target, bootstrap in brokers.items():
        created = run(
            TOPIC_COMMAND, bootstrap, "--create", "--topic", "cfg-tools", "--partitions", "1",
            "--replication-factor", "1", "--config", "file.delete.delay.ms=1000",
            "--config", "flush.ms=5000", "--config", "max.compaction.lag.ms=600000",
            "--config", "cleanup.policy=compact",
        )  # fmt: skip
        assert created.returncode == 0, (target, created.stderr[-2000:])
        altered = run(
            CONFIG_COMMAND, bootstrap, "--alter", "--entity-type", "topics", "--entity-name",
            "cfg-tools", "--add-config", "flush.messages=100,cleanup.policy=[compact,delete]",
        )  # fmt: skip
        assert altered.returncode == 0, (target, altered.stderr[-2000:])
        shown = described(bootstrap, "cfg-tools")
        answers[target] = {
            name: shown[name]
            for name in (
                "file.delete.delay.ms",
                "flush.ms",
                "flush.messages",
                "max.compaction.lag.ms",
                "cleanup.policy",
            )
        }
    assert answers["lockgate"] == answers["kafka"]
    assert answers["lockgate"]["cleanup.policy"] == ("compact,delete", "DYNAMIC_TOPIC_CONFIG")
