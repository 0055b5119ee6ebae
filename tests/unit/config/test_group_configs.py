"""Group configs (ConfigResource GROUP = 32): Kafka 4.4's names, defaults and checks (each
message as Kafka 4.4 answered it), the broker's bounds and their clamping, DescribeConfigs'
sources and synonyms, IncrementalAlterConfigs' and the legacy AlterConfigs' semantics, the
document across a restart and shared between brokers through etcd, and the handlers of an
in-process broker (GROUP ACLs, the empty name, DeleteGroups leaving the configs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from lockgate.config.group_configs import (
    APPEND,
    DEFAULT_CONFIG,
    DELETE,
    GROUP_CONFIG,
    GROUP_CONFIGS,
    SET,
    STATIC_BROKER_CONFIG,
    SUBTRACT,
    GroupConfigs,
    clamped,
    describe,
    incremental,
    iso_duration_ms,
    validate,
)
from lockgate.config.properties import BrokerConfig
from lockgate.handlers.registry import HANDLERS, RawBody, RequestContext
from lockgate.protocol.api import ApiKey, build, encode, request_class, response_class
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.session import SecurityProtocol, Session
from lockgate.server.broker import Broker
from lockgate.storage.documents import EtcdDocument, LocalDocument, parse_cluster_url
from lockgate.storage.memory import MemoryEngine
from tests.support.etcd import EtcdCluster

GROUP = 32
ADMIN = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:admin")
BOB = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:bob")
BROKER = BrokerConfig()


def refused(overrides: dict[str, str], config: BrokerConfig = BROKER) -> tuple[int, str]:
    with pytest.raises(KafkaProtocolError) as raised:
        validate(overrides, config)
    return raised.value.code, raised.value.message


# -- Kafka 4.4's checks ----------------------------------------------------------------------


def test_the_table_is_kafkas() -> None:
    public = sorted(name for name, spec in GROUP_CONFIGS.items() if not spec.internal)
    assert public == [
        "consumer.assignment.interval.ms",
        "consumer.heartbeat.interval.ms",
        "consumer.session.timeout.ms",
        "errors.deadletterqueue.copy.record.enable",
        "errors.deadletterqueue.topic.name",
        "share.assignment.interval.ms",
        "share.auto.offset.reset",
        "share.delivery.count.limit",
        "share.heartbeat.interval.ms",
        "share.isolation.level",
        "share.partition.max.record.locks",
        "share.record.lock.duration.ms",
        "share.renew.acknowledge.enable",
        "share.session.timeout.ms",
        "streams.assignment.interval.ms",
        "streams.assignor.name",
        "streams.heartbeat.interval.ms",
        "streams.initial.rebalance.delay.ms",
        "streams.num.standby.replicas",
        "streams.rack.aware.assignment.tags",
        "streams.session.timeout.ms",
    ]
    assert len(GROUP_CONFIGS) == 27  # and six internal ones


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"no.such": "1"}, "Unknown group config name: no.such"),
        (
            {"consumer.session.timeout.ms": "abc"},
            "Invalid value abc for configuration consumer.session.timeout.ms: "
            "Not a number of type INT",
        ),
        (
            {"consumer.session.timeout.ms": "0"},
            "Invalid value 0 for configuration consumer.session.timeout.ms: "
            "Value must be at least 1",
        ),
        (
            {"consumer.session.timeout.ms": "44999"},
            "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.",
        ),
        (
            {"share.isolation.level": "READ_COMMITTED"},
            "Invalid value READ_COMMITTED for configuration share.isolation.level: "
            "String must be one of: read_committed, read_uncommitted",
        ),
        (
            {"share.auto.offset.reset": "LATEST"},
            "Invalid value LATEST for configuration share.auto.offset.reset: Invalid value "
            "`LATEST` for configuration share.auto.offset.reset. The value must be either "
            "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"share.auto.offset.reset": "by_duration:-PT1H"},
            "Invalid value by_duration:-PT1H for configuration share.auto.offset.reset: Invalid "
            "value `by_duration:-PT1H` for configuration share.auto.offset.reset. The value "
            "must be either 'earliest', 'latest' or of the format "
            "'by_duration:<PnDTnHnMn.nS>'.",
        ),
        (
            {"share.renew.acknowledge.enable": "maybe"},
            "Invalid value maybe for configuration share.renew.acknowledge.enable: "
            "Expected value to be either true or false",
        ),
        (
            {"errors.deadletterqueue.topic.name": "__x"},
            "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'",
        ),
        (
            {"streams.assignor.name": "other"},
            "streams.assignor.name 'other' is not a registered task assignor. Registered "
            "assignors are: [sticky].",
        ),
        (
            {"streams.rack.aware.assignment.tags": "a,a"},
            "streams.rack.aware.assignment.tags must not contain duplicate tag keys.",
        ),
        (
            {"streams.num.standby.replicas": "3"},
            "streams.num.standby.replicas must be less than or equal to 2",
        ),
        (
            {"streams.task.offset.interval.ms": "1000"},
            "streams.task.offset.interval.ms must be greater than or equal to 15000",
        ),
        (
            {"share.delivery.count.limit": "11"},
            "share.delivery.count.limit must be in the range 2 to 10 inclusive.",
        ),
        (
            {"share.record.lock.duration.ms": "1000"},
            "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive.",
        ),
        # an unknown name is found before a bad value, wherever it is
        ({"share.session.timeout.ms": "x", "bad.name": "1"}, "Unknown group config name: bad.name"),
    ],
)
def test_bad_overrides_get_kafkas_messages(overrides: dict[str, str], message: str) -> None:
    assert refused(overrides) == (ErrorCode.invalid_config, message)


def test_values_are_normalised_as_kafka_parses_them() -> None:
    assert validate(
        {
            "consumer.session.timeout.ms": " 50000 ",
            "share.renew.acknowledge.enable": "TRUE",
            "streams.rack.aware.assignment.tags": "a, b",
            "share.auto.offset.reset": " by_duration:PT1H ",
            "consumer.assignor.offload.enable": "false",  # an internal one may be set
        },
        BROKER,
    ) == {
        "consumer.session.timeout.ms": "50000",
        "consumer.assignor.offload.enable": "false",
        "share.auto.offset.reset": "by_duration:PT1H",
        "share.renew.acknowledge.enable": "true",
        "streams.rack.aware.assignment.tags": "a,b",
    }


def test_bounds_and_the_session_rule_follow_the_broker() -> None:
    wide = BrokerConfig(
        {
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "1000",
            "group.consumer.max.heartbeat.interval.ms": "20000",
            "group.share.max.delivery.count.limit": "20",
        }
    )
    assert validate({"share.delivery.count.limit": "15"}, wide)
    # the session must stay above the heartbeat, each taken from the broker when not given
    assert refused({"consumer.session.timeout.ms": "5000"}, wide) == (
        ErrorCode.invalid_config,
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms",
    )
    assert refused(
        {"consumer.heartbeat.interval.ms": "9000", "consumer.session.timeout.ms": "9000"}, wide
    )[1] == ("consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    assert validate({"consumer.heartbeat.interval.ms": "15000"}, BROKER)  # below 45000
    # a value set under wider bounds is used clamped to today's
    assert clamped("share.delivery.count.limit", "15", BROKER) == "10"
    assert clamped("consumer.session.timeout.ms", "1000", BROKER) == "45000"
    assert clamped("share.auto.offset.reset", "earliest", BROKER) == "earliest"


def test_iso_durations_as_java_reads_them() -> None:
    assert iso_duration_ms("PT1H") == 3_600_000
    assert iso_duration_ms("P1DT2M3.5S") == 86_400_000 + 123_500
    assert iso_duration_ms("pt0s") == 0
    assert iso_duration_ms("-PT1S") == -1000
    assert iso_duration_ms("PT-1S") == -1000
    for bad in ("P", "PT", "1H", "PT1.5H", "P1W", ""):
        assert iso_duration_ms(bad) is None, bad


def test_incremental_operations() -> None:
    current = {"share.isolation.level": "read_committed"}
    assert incremental(
        current,
        [("share.auto.offset.reset", SET, "earliest"), ("share.isolation.level", DELETE, None),
         ("never.set", DELETE, None)],
    ) == {"share.auto.offset.reset": "earliest"}  # fmt: skip
    for operation, verb in ((APPEND, "APPEND"), (SUBTRACT, "SUBTRACT")):
        with pytest.raises(KafkaProtocolError) as raised:
            incremental(current, [("streams.rack.aware.assignment.tags", operation, "a")])
        assert (raised.value.code, raised.value.message) == (
            ErrorCode.invalid_config,
            f"Can't {verb} to key streams.rack.aware.assignment.tags because its type is not LIST.",
        )
    with pytest.raises(KafkaProtocolError) as raised:
        incremental({}, [("errors.deadletterqueue.topic.name", SET, "x" * 40_000)])
    assert raised.value.code == ErrorCode.invalid_config


def test_describe_shows_overrides_over_the_brokers_layers() -> None:
    config = BrokerConfig({"group.consumer.heartbeat.interval.ms": "6000"})
    shown = {d.name: d for d in describe({"share.auto.offset.reset": "earliest"}, config)}
    assert "consumer.assignor.offload.enable" not in shown  # internal, not set
    assert len(shown) == 21
    reset = shown["share.auto.offset.reset"]
    assert (reset.value, reset.source, reset.synonyms) == (
        "earliest",
        GROUP_CONFIG,
        (
            ("share.auto.offset.reset", "earliest", GROUP_CONFIG),
            ("share.auto.offset.reset", "latest", DEFAULT_CONFIG),
        ),
    )
    heartbeat = shown["consumer.heartbeat.interval.ms"]
    assert (heartbeat.value, heartbeat.source, heartbeat.synonyms) == (
        "6000",
        STATIC_BROKER_CONFIG,
        (
            ("group.consumer.heartbeat.interval.ms", "6000", STATIC_BROKER_CONFIG),
            ("group.consumer.heartbeat.interval.ms", "5000", DEFAULT_CONFIG),
        ),
    )
    assignor = shown["streams.assignor.name"]
    assert (assignor.value, assignor.synonyms) == (
        "sticky",
        (("group.streams.assignors", "sticky", DEFAULT_CONFIG),),
    )
    assert [d.name for d in describe({}, config, ["share.isolation.level", "nope"])] == [
        "share.isolation.level"
    ]
    internal = describe(
        {"streams.num.warmup.replicas": "3"}, config, ["streams.num.warmup.replicas"]
    )
    assert [(d.value, d.source) for d in internal] == [("3", GROUP_CONFIG)]


# -- the store ---------------------------------------------------------------------------------


async def test_the_store_checks_whole_and_survives_a_restart() -> None:
    engine = MemoryEngine()
    store = GroupConfigs(BROKER, LocalDocument(engine, "group-configs.json"))
    await store.alter("g", changes=[("share.auto.offset.reset", SET, "earliest")])
    await store.alter("g", changes=[("share.isolation.level", SET, "read_committed")])
    await store.alter("h", changes=[("consumer.heartbeat.interval.ms", SET, "6000")])
    await store.alter("v", changes=[("share.delivery.count.limit", SET, "3")], validate_only=True)
    before = engine.read_all("group-configs.json")
    with pytest.raises(KafkaProtocolError):  # one bad change: the group's others stay out too
        await store.alter(
            "g",
            changes=[("share.delivery.count.limit", SET, "3"), ("share.isolation.level", SET, "x")],
        )
    assert engine.read_all("group-configs.json") == before
    for bad in ("", None):
        with pytest.raises(KafkaProtocolError) as raised:
            await store.alter(bad or "", changes=[("share.delivery.count.limit", SET, "3")])
        assert (raised.value.code, raised.value.message) == (
            ErrorCode.invalid_request,
            "Default group resources are not allowed.",
        )
    again = GroupConfigs(BROKER, LocalDocument(engine, "group-configs.json"))
    assert again.groups == {
        "g": {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"},
        "h": {"consumer.heartbeat.interval.ms": "6000"},
    }
    assert again.consumer_heartbeat_interval_ms("h") == 6000
    assert again.consumer_heartbeat_interval_ms("g") is None
    assert again.consumer_session_timeout_ms("h") is None
    # the legacy AlterConfigs replaces the group's set; an empty set removes the group
    await again.alter("g", replace={"share.delivery.count.limit": "3"})
    await again.alter("h", replace={})
    assert again.groups == {"g": {"share.delivery.count.limit": "3"}}


def on_etcd(etcd: EtcdCluster) -> EtcdDocument:
    endpoints, namespace = parse_cluster_url(etcd.url + "/group-configs-test")
    return EtcdDocument(endpoints, namespace, "group-configs", watch=True)


async def eventually(condition: Callable[[], bool]) -> None:
    for _ in range(250):
        if condition():
            return
        await asyncio.sleep(0.02)
    assert condition()


async def test_brokers_of_a_cluster_share_the_groups_configs(one_etcd: EtcdCluster) -> None:
    first, second = GroupConfigs(BROKER, on_etcd(one_etcd)), GroupConfigs(BROKER, on_etcd(one_etcd))
    await first.start()
    await second.start()
    try:
        await first.alter("g", changes=[("consumer.session.timeout.ms", SET, "50000")])
        await second.alter("g", changes=[("share.auto.offset.reset", SET, "earliest")])
        expected = {"consumer.session.timeout.ms": "50000", "share.auto.offset.reset": "earliest"}
        await eventually(lambda: first.groups.get("g") == second.groups.get("g") == expected)
        assert first.consumer_session_timeout_ms("g") == 50_000
        await second.alter("g", changes=[("consumer.session.timeout.ms", DELETE, None)])
        await eventually(lambda: first.consumer_session_timeout_ms("g") is None)
    finally:
        await first.close()
        await second.close()


# -- through the handlers ------------------------------------------------------------------------


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    config = BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "lockgate.durability": "page-cache",
            "authorizer.class.name": "lockgate",
            "super.users": "User:admin",
            "offsets.topic.num.partitions": "1",
        }
    )
    instance = Broker(config, MemoryEngine())
    await instance.start()
    try:
        yield instance
    finally:
        await instance.stop()


async def call(broker: Broker, session: Session, api: ApiKey, version: int, body: Any) -> Any:
    request = build(request_class(api, version), body)  # type: ignore[arg-type]
    ctx = RequestContext(broker.services, api, version, 1, "test", "127.0.0.1:1", 1, session)
    result = await HANDLERS[api].handler(ctx, request)
    assert not isinstance(result, RawBody) and result is not None
    encode(build(response_class(api, version), result))
    return result


def changes(name: str, *entries: tuple[str, int, str | None]) -> dict[str, Any]:
    configs = [{"name": k, "config_operation": op, "value": v} for k, op, v in entries]
    return {
        "resources": [{"resource_type": GROUP, "resource_name": name, "configs": configs}],
        "validate_only": False,
    }


def describing(name: str, *keys: str) -> dict[str, Any]:
    resource = {
        "resource_type": GROUP,
        "resource_name": name,
        "configuration_keys": list(keys) or None,
    }
    return {"resources": [resource], "include_synonyms": True, "include_documentation": False}


async def test_the_config_apis_on_groups(broker: Broker) -> None:
    altered = await call(
        broker, ADMIN, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
        changes("queue", ("share.auto.offset.reset", SET, "earliest")),
    )  # fmt: skip
    assert altered["responses"][0]["error_code"] == 0
    described = await call(broker, ADMIN, ApiKey.DESCRIBE_CONFIGS, 4, describing("queue"))
    [result] = described["results"]
    entries = {c["name"]: c for c in result["configs"]}
    assert entries["share.auto.offset.reset"]["value"] == "earliest"
    assert entries["share.auto.offset.reset"]["config_source"] == GROUP_CONFIG
    assert not entries["share.auto.offset.reset"]["is_default"]
    assert entries["share.session.timeout.ms"]["config_source"] == DEFAULT_CONFIG
    assert entries["share.session.timeout.ms"]["is_default"]
    assert entries["share.session.timeout.ms"]["config_type"] == 3  # INT
    assert entries["share.renew.acknowledge.enable"]["config_type"] == 1  # BOOLEAN
    assert [s["source"] for s in entries["share.auto.offset.reset"]["synonyms"]] == [8, 5]
    # legacy AlterConfigs: Kafka 4.4 takes groups there too, replacing the group's set
    legacy = {
        "resources": [
            {
                "resource_type": GROUP,
                "resource_name": "queue",
                "configs": [{"name": "share.delivery.count.limit", "value": "3"}],
            }
        ],
        "validate_only": False,
    }
    assert (await call(broker, ADMIN, ApiKey.ALTER_CONFIGS, 2, legacy))["responses"][0][
        "error_code"
    ] == 0
    assert broker.group_configs.groups == {"queue": {"share.delivery.count.limit": "3"}}
    # the empty name
    empty = await call(broker, ADMIN, ApiKey.DESCRIBE_CONFIGS, 4, describing(""))
    assert (empty["results"][0]["error_code"], empty["results"][0]["error_message"]) == (
        ErrorCode.invalid_request,
        "Group name must not be empty",
    )
    empty = await call(
        broker, ADMIN, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
        changes("", ("share.auto.offset.reset", SET, "earliest")),
    )  # fmt: skip
    assert empty["responses"][0]["error_code"] == ErrorCode.invalid_request
    # ACLs on the group resource
    denied = await call(
        broker, BOB, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
        changes("queue", ("share.auto.offset.reset", SET, "latest")),
    )  # fmt: skip
    assert denied["responses"][0]["error_code"] == ErrorCode.group_authorization_failed
    denied = await call(broker, BOB, ApiKey.DESCRIBE_CONFIGS, 4, describing("queue"))
    assert denied["results"][0]["error_code"] == ErrorCode.group_authorization_failed
    acl = {
        "creations": [
            {
                "resource_type": 3, "resource_name": "queue", "resource_pattern_type": 3,
                "principal": "User:bob", "host": "*", "operation": operation,
                "permission_type": 3,
            }
            for operation in (10, 11)  # DESCRIBE_CONFIGS, ALTER_CONFIGS
        ]
    }  # fmt: skip
    assert all(
        r["error_code"] == 0
        for r in (await call(broker, ADMIN, ApiKey.CREATE_ACLS, 3, acl))["results"]
    )
    allowed = await call(broker, BOB, ApiKey.DESCRIBE_CONFIGS, 4, describing("queue"))
    assert allowed["results"][0]["error_code"] == 0
    allowed = await call(
        broker, BOB, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
        changes("queue", ("share.auto.offset.reset", SET, "latest")),
    )  # fmt: skip
    assert allowed["responses"][0]["error_code"] == 0


async def test_deleting_a_group_leaves_its_configs(broker: Broker) -> None:
    """As Kafka 4.4, whose group configs live apart from the groups."""
    await call(
        broker, ADMIN, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
        changes("gone", ("consumer.heartbeat.interval.ms", SET, "6000")),
    )  # fmt: skip
    broker.topics.create("t", 1, 1, {})
    commit = {
        "group_id": "gone", "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "retention_time_ms": -1,
        "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "commit_timestamp": -1, "committed_metadata": ""}]}],
    }  # fmt: skip
    answer = await call(broker, ADMIN, ApiKey.OFFSET_COMMIT, 8, commit)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    deleted = await call(broker, ADMIN, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["gone"]})
    assert deleted["results"][0]["error_code"] == 0
    assert broker.group_configs.overrides("gone") == {"consumer.heartbeat.interval.ms": "6000"}
