"""Group configs (ConfigResource GROUP, KIP-848/KIP-932) against lockgate and against Apache
Kafka 4.4 itself: lockgate's table is Kafka's GroupConfig (names, types, internal flags,
broker synonyms, defaults, printed by java/GroupConfigList.java at test time); a group
nobody has seen describes alike through confluent-kafka's AdminClient; the same changes get
the same answers and errors (messages included) and leave the same configs; the Java
AdminClient (java/GroupConfigChecks.java) and Kafka's kafka-configs tool (--entity-type
groups and --group) see the same on both; DeleteGroups leaves a group's configs on both."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._resource import ResourceType

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.config.group_configs import GROUP_CONFIGS, default_value
from lockgate.config.properties import BrokerConfig
from lockgate.protocol.api import ApiKey
from tests.reference.test_java_client import run_checks
from tests.support.broker import BrokerProcess
from tests.support.java_programs import java_program
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

JAVA = Path(__file__).parent / "java"
CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"
GROUP_CONFIG_TYPE = 32
SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


@pytest.fixture(scope="module")
def kafka_list(classpath: str) -> dict[str, tuple[str, bool, str, str]]:
    """name → (type, internal, broker synonym or "-", default) as Kafka's GroupConfig has them."""
    done = subprocess.run(
        java_program(JAVA / "GroupConfigList.java", classpath, "-Xmx256m"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-3000:]
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("CONFIG "):
            _, name, kind, internal, synonym, *default = line.split(" ", 5)
            found[name] = (kind, internal == "true", synonym, default[0] if default else "")
    return found


@pytest.fixture(scope="module")
def lockgate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("group-configs") / "data").start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture(scope="module")
def brokers(lockgate: BrokerProcess, reference_kafka: ReferenceKafka) -> dict[str, str]:
    return {"lockgate": lockgate.bootstrap, "kafka": reference_kafka.bootstrap}


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def described(bootstrap: str, group: str) -> dict[str, tuple[Any, ...]]:
    """config → (value, source, is_default, read_only, synonyms) through librdkafka, which
    keys synonyms by name (so a group's override hides the default of the same name)."""
    resource = ConfigResource(ResourceType.GROUP, group)
    client = admin(bootstrap)  # kept until the answer: a destroyed client fails its futures
    entries = client.describe_configs([resource])[resource].result(60)
    return {
        name: (
            e.value,
            ConfigSource(e.source).name,
            e.is_default,
            e.is_read_only,
            sorted((s.name, s.value, ConfigSource(s.source).name) for s in e.synonyms.values()),
        )
        for name, e in entries.items()
    }


def alter(bootstrap: str, group: str, *entries: ConfigEntry) -> str | None:
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=list(entries))
    client = admin(bootstrap)  # kept until the answer: a destroyed client fails its futures
    try:
        client.incremental_alter_configs([resource])[resource].result(60)
    except KafkaException as exc:
        error = exc.args[0]
        return f"{error.name()}: {error.str()}"
    return None


def entry(name: str, value: str | None, operation: AlterConfigOpType = SET) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=operation)


def test_lockgates_table_is_kafkas(kafka_list: dict[str, tuple[str, bool, str, str]]) -> None:
    assert list(GROUP_CONFIGS) == list(kafka_list)  # in Kafka's order: the order it checks in
    config = BrokerConfig()
    for name, (kind, internal, synonym, default) in kafka_list.items():
        spec = GROUP_CONFIGS[name]
        assert (spec.kind.upper(), spec.internal) == (kind, internal), name
        assert (spec.broker_property or "-") == synonym, name
        if name != "streams.assignor.name":  # Kafka's default is null: the broker's first one
            assert default_value(config, spec) == default, name


def test_a_new_groups_configs_are_described_alike(brokers: dict[str, str]) -> None:
    answers = {target: described(bootstrap, "never-seen") for target, bootstrap in brokers.items()}
    assert answers["lockgate"] == answers["kafka"]
    assert {source for _, source, *_ in answers["lockgate"].values()} == {"DEFAULT_CONFIG"}


CHANGES = [
    [entry("share.auto.offset.reset", "earliest")],
    [entry("no.such", "1")],
    [entry("consumer.session.timeout.ms", "abc")],
    [entry("consumer.session.timeout.ms", "0")],
    [entry("consumer.session.timeout.ms", "44999")],
    [entry("consumer.session.timeout.ms", " 50000 ")],
    [entry("consumer.heartbeat.interval.ms", "6000")],
    [entry("share.isolation.level", "READ_COMMITTED")],
    [entry("share.auto.offset.reset", "by_duration:PT1H")],
    [entry("share.auto.offset.reset", "by_duration:-PT1H")],
    [entry("share.auto.offset.reset", "LATEST")],
    [entry("share.renew.acknowledge.enable", "TRUE")],
    [entry("share.renew.acknowledge.enable", "maybe")],
    [entry("errors.deadletterqueue.topic.name", "__x")],
    [entry("streams.assignor.name", "other")],
    [entry("streams.rack.aware.assignment.tags", "a, b")],
    [entry("streams.rack.aware.assignment.tags", "a,a")],
    [entry("streams.rack.aware.assignment.tags", "c", APPEND)],
    [entry("consumer.assignor.offload.enable", "false")],
    [entry("streams.num.standby.replicas", "3")],
    [entry("share.delivery.count.limit", "11")],
    [entry("share.record.lock.duration.ms", "1000")],
    [
        entry("consumer.session.timeout.ms", "45000"),
        entry("consumer.heartbeat.interval.ms", "15000"),
    ],
    [entry("no.such", "x", DELETE)],
    [entry("share.isolation.level", "x", DELETE)],
    [entry("share.session.timeout.ms", "x"), entry("bad.name", "1")],
]


def test_changes_are_answered_alike(brokers: dict[str, str]) -> None:
    answers: dict[str, list[str | None]] = {}
    shown: dict[str, dict[str, tuple[Any, ...]]] = {}
    for target, bootstrap in brokers.items():
        answers[target] = [alter(bootstrap, "altered", *change) for change in CHANGES]
        shown[target] = described(bootstrap, "altered")
    assert answers["lockgate"] == answers["kafka"]
    assert shown["lockgate"] == shown["kafka"]
    assert sum(answer is None for answer in answers["lockgate"]) == 10
    ours = shown["lockgate"]
    assert ours["share.auto.offset.reset"][:2] == ("by_duration:PT1H", "GROUP_CONFIG")
    assert ours["consumer.assignor.offload.enable"][:2] == ("false", "GROUP_CONFIG")


async def raw_answers(bootstrap: str) -> list[Any]:
    """What librdkafka cannot send: the empty name, and the legacy AlterConfigs on a group."""

    async with Admin(bootstrap) as client:
        connection = await client.cluster.any_connection()

        async def legacy(name: str, configs: dict[str, str]) -> tuple[int, str | None]:
            resource = {
                "resource_type": GROUP_CONFIG_TYPE,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
            body = {"resources": [resource], "validate_only": False}
            answer = (await connection.request(ApiKey.ALTER_CONFIGS, body)).responses[0]
            return int(answer.error_code), answer.error_message or None

        async def incremental(name: str) -> tuple[int, str | None]:
            change = {"name": "share.delivery.count.limit", "config_operation": 0, "value": "3"}
            resource = {"resource_type": GROUP_CONFIG_TYPE, "resource_name": name,
                        "configs": [change]}  # fmt: skip
            body = {"resources": [resource], "validate_only": False}
            answer = (await connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, body)).responses[0]
            return int(answer.error_code), answer.error_message or None

        async def described(name: str) -> Any:
            resource = {"resource_type": GROUP_CONFIG_TYPE, "resource_name": name,
                        "configuration_keys": None}  # fmt: skip
            body = {"resources": [resource], "include_synonyms": True,
                    "include_documentation": False}  # fmt: skip
            result = (await connection.request(ApiKey.DESCRIBE_CONFIGS, body)).results[0]
            return (
                int(result.error_code),
                result.error_message or None,
                sorted((c.name, c.value) for c in result.configs if c.config_source == 8),
            )

        async def overrides(name: str) -> Any:
            """What a describe shows once two reads 100 ms apart agree: Kafka answers an alter
            once its controller committed it, and its broker's metadata image may show the
            change a moment later (lockgate's describe reads what the alter wrote)."""
            seen = await described(name)
            for _ in range(50):
                await asyncio.sleep(0.1)
                again = await described(name)
                if again == seen:
                    return seen
                seen = again
            return seen

        return [
            await overrides(""),
            await incremental(""),
            await legacy("", {"share.delivery.count.limit": "3"}),
            await legacy(
                "legacy",
                {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"},
            ),
            await overrides("legacy"),
            await legacy("legacy", {"share.delivery.count.limit": "3"}),
            await overrides("legacy"),
            await legacy("legacy", {"share.delivery.count.limit": "30"}),
            await legacy("legacy", {}),
            await overrides("legacy"),
        ]


def test_legacy_alter_configs_and_the_empty_name_alike(brokers: dict[str, str]) -> None:
    answers = {target: asyncio.run(raw_answers(b)) for target, b in brokers.items()}
    assert answers["lockgate"] == answers["kafka"]
    assert answers["lockgate"][6] == (0, None, [("share.delivery.count.limit", "3")])


async def delete_a_group(bootstrap: str) -> list[Any]:
    assert alter(bootstrap, "deleted", entry("consumer.heartbeat.interval.ms", "6000")) is None
    async with Admin(bootstrap) as client:
        await client.create_topic("group-configs-deleted", 1, 1)
        await client.alter_group_offsets("deleted", {TopicPartition("group-configs-deleted", 0): 0})
        listed = "deleted" in [g.group_id for g in await client.list_groups()]
        await client.delete_groups(["deleted"])
        gone = "deleted" not in [g.group_id for g in await client.list_groups()]
    return [listed, gone, described(bootstrap, "deleted")["consumer.heartbeat.interval.ms"][:2]]


def test_deleting_a_group_leaves_its_configs_alike(brokers: dict[str, str]) -> None:
    answers = {target: asyncio.run(delete_a_group(b)) for target, b in brokers.items()}
    assert answers["lockgate"] == answers["kafka"] == [True, True, ("6000", "GROUP_CONFIG")]


def test_the_java_admin_client_sees_the_same(
    brokers: dict[str, str], reference_kafka: ReferenceKafka
) -> None:
    program = JAVA / "GroupConfigChecks.java"
    answers = {t: run_checks(reference_kafka, b, program) for t, b in brokers.items()}
    assert answers["lockgate"] == answers["kafka"]
    assert answers["lockgate"]["describe.share_auto_offset_reset"] == (
        "earliest:DYNAMIC_GROUP_CONFIG:false:false:STRING:[share.auto.offset.reset=earliest"
        "@DYNAMIC_GROUP_CONFIG, share.auto.offset.reset=latest@DEFAULT_CONFIG]"
    )
    assert answers["lockgate"]["alter.range"] == (
        "InvalidConfigurationException: share.delivery.count.limit must be in the range 2 to "
        "10 inclusive."
    )


# the groups this module gives configs to
MODULE_GROUPS = {"altered", "legacy", "deleted", "tool-group"}


def test_kafkas_configs_tool_on_groups(
    brokers: dict[str, str], reference_kafka: ReferenceKafka
) -> None:
    def run(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
        command = reference_kafka.java(CONFIG_COMMAND, "--bootstrap-server", bootstrap, *args)
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    answers: dict[str, list[Any]] = {}
    for target, bootstrap in brokers.items():
        altered = run(
            bootstrap, "--alter", "--entity-type", "groups", "--entity-name", "tool-group",
            "--add-config", "share.auto.offset.reset=earliest,share.isolation.level=read_committed",
        )  # fmt: skip
        assert altered.returncode == 0, (target, altered.stderr[-2000:])
        refused = run(
            bootstrap, "--alter", "--group", "tool-group", "--add-config",
            "share.delivery.count.limit=99",
        )  # fmt: skip
        shown = run(
            bootstrap, "--describe", "--entity-type", "groups", "--entity-name", "tool-group"
        )
        everything = run(bootstrap, "--describe", "--group", "tool-group", "--all")
        # no name: every group with configs, listed by ListConfigResources (74); in the
        # order the broker lists them (Kafka's is a hash map's), so compared sorted, and only
        # this module's groups: the reference Kafka is shared with other modules' tests
        listed = run(bootstrap, "--describe", "--entity-type", "groups")
        assert listed.returncode == 0, (target, listed.stderr[-2000:])
        blocks = listed.stdout.split("Dynamic configs for group ")
        answers[target] = [
            altered.stdout,
            refused.returncode,
            [line for line in refused.stderr.splitlines() if "Exception:" in line][:1],
            shown.stdout,
            everything.stdout,
            sorted(b for b in blocks if b.split(" ", 1)[0] in MODULE_GROUPS),
        ]
    assert answers["lockgate"] == answers["kafka"]
    assert "share.auto.offset.reset=earliest sensitive=false" in answers["lockgate"][3]
    assert answers["lockgate"][1] != 0
    assert any(block.startswith("tool-group are:") for block in answers["lockgate"][5])
