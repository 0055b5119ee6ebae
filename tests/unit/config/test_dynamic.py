"""Dynamic broker configs: the layering (per broker > cluster default > static > default), the
checks, DescribeConfigs' sources and synonyms, the run-time effect on topics, durability
across a restart, validate_only and the CLUSTER ACLs, at the store and through the handlers of
an in-process broker (memory storage)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.config.dynamic import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    DynamicBrokerConfigs,
    check_changes,
)
from lockgate.config.properties import BrokerConfig
from lockgate.handlers.registry import HANDLERS, RawBody, RequestContext
from lockgate.protocol.api import ApiKey, build, encode, request_class, response_class
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.session import SecurityProtocol, Session
from lockgate.server.broker import Broker
from lockgate.storage.documents import LocalDocument
from lockgate.storage.memory import MemoryEngine

ADMIN = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:admin")
BOB = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:bob")
DAY = str(24 * 3600 * 1000)


async def test_layers_and_sources() -> None:
    config = BrokerConfig({"log.segment.bytes": "1000000"})
    store = DynamicBrokerConfigs(config, 1, LocalDocument(MemoryEngine(), "broker-configs.json"))
    heard: list[int] = []
    store.listeners.append(lambda: heard.append(1))
    assert store.resolve("log.segment.bytes").source == STATIC_BROKER_CONFIG
    assert store.resolve("log.retention.ms").source == DEFAULT_CONFIG
    await store.alter("", {"log.retention.ms": DAY, "log.segment.bytes": "2000000"}, [])
    await store.alter("1", {"log.retention.ms": "1000"}, [])
    await store.alter("2", {"log.retention.ms": "5"}, [])  # another broker's: not ours
    assert config.values["log.retention.ms"] == "1000"
    assert config.values["log.segment.bytes"] == "2000000"
    retention = store.resolve("log.retention.ms")
    assert retention.source == DYNAMIC_BROKER_CONFIG
    assert [source for source, _ in retention.synonyms] == [
        DYNAMIC_BROKER_CONFIG,
        DYNAMIC_DEFAULT_BROKER_CONFIG,
        DEFAULT_CONFIG,
    ]
    segment = store.resolve("log.segment.bytes")
    assert segment.synonyms == (
        (DYNAMIC_DEFAULT_BROKER_CONFIG, "2000000"),
        (STATIC_BROKER_CONFIG, "1000000"),
        (DEFAULT_CONFIG, str(1 << 30)),
    )
    await store.alter("1", {}, ["log.retention.ms"])
    assert config.values["log.retention.ms"] == DAY  # back to the cluster default
    await store.alter("", {}, [], replace=True)
    assert config.values["log.segment.bytes"] == "1000000"  # back to the static value
    assert heard  # topics were told each time


def test_checks_use_kafkas_messages() -> None:
    with pytest.raises(KafkaProtocolError) as raised:
        check_changes({"log.retention.ms": "1", "listeners": "x", "node.id": "3"}, [])
    assert raised.value.code == ErrorCode.invalid_request
    assert raised.value.message == "Cannot update these configs dynamically: [listeners, node.id]"
    with pytest.raises(KafkaProtocolError) as raised:
        check_changes({"compression.type": "brotli"}, [])
    assert raised.value.code == ErrorCode.invalid_request
    assert raised.value.message == (
        "Invalid value brotli for configuration compression.type: String must be one of: "
        "uncompressed, zstd, lz4, snappy, gzip, producer"
    )
    with pytest.raises(KafkaProtocolError) as raised:
        check_changes({"log.segment.bytes": "100"}, [])
    assert raised.value.message == (
        "Invalid value 100 for configuration log.segment.bytes: Value must be at least 1048576"
    )
    assert check_changes({"log.cleanup.policy": "delete,compact"}, []) == {
        "log.cleanup.policy": "delete,compact"  # in the order given, as Kafka keeps it
    }


def broker_config(**settings: str) -> BrokerConfig:
    return BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "lockgate.durability": "page-cache",
            "authorizer.class.name": "lockgate",
            "super.users": "User:admin",
            **settings,
        }
    )


@pytest.fixture
async def storage() -> MemoryEngine:
    return MemoryEngine()


@pytest.fixture
async def broker(storage: MemoryEngine) -> AsyncIterator[Broker]:
    broker = Broker(broker_config(**{"message.max.bytes": "2000000"}), storage)
    await broker.start()
    await broker.admin.create("t", 1, 1, {})
    await broker.admin.create("pinned", 1, 1, {"retention.ms": "123"})
    try:
        yield broker
    finally:
        await broker.stop()


async def call(broker: Broker, session: Session, api: ApiKey, version: int, body: Any) -> Any:
    request = build(request_class(api, version), body)  # type: ignore[arg-type]
    ctx = RequestContext(broker.services, api, version, 1, "test", "127.0.0.1:1", 1, session)
    result = await HANDLERS[api].handler(ctx, request)
    assert not isinstance(result, RawBody) and result is not None
    encode(build(response_class(api, version), result))
    return result


def incremental(
    name: str, *changes: tuple[str, int, str | None], validate_only: bool = False
) -> dict[str, Any]:
    configs = [{"name": k, "config_operation": op, "value": v} for k, op, v in changes]
    return {
        "resources": [{"resource_type": 4, "resource_name": name, "configs": configs}],
        "validate_only": validate_only,
    }


def describe(resource_type: int, name: str, *keys: str) -> dict[str, Any]:
    return {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configuration_keys": list(keys) or None,
            }
        ],
        "include_synonyms": True,
        "include_documentation": False,
    }


async def test_alter_applies_at_run_time_and_shows_in_describe(broker: Broker) -> None:
    altered = await call(
        broker,
        ADMIN,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        incremental("", ("log.retention.ms", 0, "60000"), ("compression.type", 0, "zstd")),
    )
    assert altered["responses"][0]["error_code"] == 0
    assert broker.topics.log_config("t").retention_ms == 60_000
    assert broker.topics.log_config("t").compression_codec == 4
    assert broker.topics.log_config("pinned").retention_ms == 123  # its override wins
    default = await call(broker, ADMIN, ApiKey.DESCRIBE_CONFIGS, 4, describe(4, ""))
    assert [
        (c["name"], c["value"], c["config_source"]) for c in default["results"][0]["configs"]
    ] == [
        ("compression.type", "zstd", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "60000", DYNAMIC_DEFAULT_BROKER_CONFIG),
    ]
    mine = await call(broker, ADMIN, ApiKey.DESCRIBE_CONFIGS, 4, describe(4, "0"))
    entries = {c["name"]: c for c in mine["results"][0]["configs"]}
    assert entries["log.retention.ms"]["config_source"] == DYNAMIC_DEFAULT_BROKER_CONFIG
    assert not entries["log.retention.ms"]["read_only"]
    assert entries["listeners"]["read_only"]
    assert entries["message.max.bytes"]["config_source"] == STATIC_BROKER_CONFIG
    assert entries["num.partitions"]["config_source"] == DEFAULT_CONFIG
    assert (
        entries["ssl.key.password"]["is_sensitive"] and entries["ssl.key.password"]["value"] is None
    )
    topic = await call(broker, ADMIN, ApiKey.DESCRIBE_CONFIGS, 4, describe(2, "t", "retention.ms"))
    [retention] = topic["results"][0]["configs"]
    assert (retention["value"], retention["config_source"]) == (
        "60000",
        DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert [(s["name"], s["source"]) for s in retention["synonyms"]] == [
        ("log.retention.ms", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", DEFAULT_CONFIG),
    ]


async def test_refusals_change_nothing(broker: Broker) -> None:
    static = await call(
        broker,
        ADMIN,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        incremental("0", ("log.retention.ms", 0, "5"), ("log.dirs", 0, "/elsewhere")),
    )
    [answer] = static["responses"]
    assert answer["error_code"] == ErrorCode.invalid_request
    assert answer["error_message"] == "Cannot update these configs dynamically: [log.dirs]"
    validate = await call(
        broker,
        ADMIN,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        incremental("0", ("log.retention.ms", 0, "5"), validate_only=True),
    )
    assert validate["responses"][0]["error_code"] == 0
    denied = await call(
        broker,
        BOB,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        incremental("", ("log.retention.ms", 0, "5")),
    )
    assert denied["responses"][0]["error_code"] == ErrorCode.cluster_authorization_failed
    bad_id = await call(
        broker,
        ADMIN,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        incremental("x", ("log.retention.ms", 0, "5")),
    )
    assert bad_id["responses"][0]["error_code"] == ErrorCode.invalid_request
    assert broker.config.values["log.retention.ms"] == str(7 * 24 * 3600 * 1000)
    described = await call(broker, BOB, ApiKey.DESCRIBE_CONFIGS, 4, describe(4, "0"))
    assert described["results"][0]["error_code"] == ErrorCode.cluster_authorization_failed


async def test_legacy_alter_configs_replaces_the_resource(broker: Broker) -> None:
    await call(
        broker,
        ADMIN,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        incremental("0", ("log.retention.ms", 0, "5000"), ("log.segment.bytes", 0, "1100000")),
    )
    body = {
        "resources": [
            {
                "resource_type": 4,
                "resource_name": "0",
                "configs": [{"name": "log.segment.bytes", "value": "2200000"}],
            }
        ],
        "validate_only": False,
    }
    answer = await call(broker, ADMIN, ApiKey.ALTER_CONFIGS, 2, body)
    assert answer["responses"][0]["error_code"] == 0
    assert broker.config.values["log.segment.bytes"] == "2200000"
    assert broker.config.values["log.retention.ms"] == str(7 * 24 * 3600 * 1000)


async def test_dynamic_configs_survive_a_restart(storage: MemoryEngine, broker: Broker) -> None:
    await call(
        broker,
        ADMIN,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        incremental("0", ("log.retention.ms", 0, "777")),
    )
    await broker.stop()
    again = Broker(broker_config(), storage)
    await again.start()
    try:
        assert again.config.values["log.retention.ms"] == "777"
        assert again.topics.log_config("t").retention_ms == 777  # loaded with the dynamic value
    finally:
        await again.stop()
    await broker.start()  # the fixture stops it again
