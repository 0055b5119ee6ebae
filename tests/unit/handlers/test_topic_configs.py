"""Kafka 4.4's topic config surface through the handlers of an in-process broker (memory
storage): every config at CreateTopics and in DescribeConfigs with its type and default,
IncrementalAlterConfigs' APPEND/SUBTRACT on list configs (topic and broker) and Kafka's errors
for the others, the request checks before them, Metadata's INVALID_TOPIC_EXCEPTION for an
illegal name and Produce's UNKNOWN_TOPIC_OR_PARTITION for one."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.client.cluster import Cluster
from lockgate.config.properties import CONFIG_TYPES, INTERNAL_TOPIC_CONFIGS, TOPIC_CONFIGS
from lockgate.handlers.registry import HANDLERS, RawBody, RequestContext
from lockgate.protocol.api import ApiKey, build, encode, request_class, response_class
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.recompress import recompress
from lockgate.protocol.records import build_batch
from lockgate.security.session import SecurityProtocol, Session
from lockgate.server.broker import Broker

SESSION = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:ANONYMOUS")
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# a value other than the default for each config, valid alone
CHANGED = {
    "cleanup.policy": "compact,delete",
    "compression.gzip.level": "5",
    "compression.lz4.level": "3",
    "compression.type": "zstd",
    "compression.zstd.level": "7",
    "delete.retention.ms": "1000",
    "errors.deadletterqueue.group.enable": "true",
    "file.delete.delay.ms": "1",
    "flush.messages": "10",
    "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:0",
    "index.interval.bytes": "100",
    "internal.segment.bytes": "5000",
    "leader.replication.throttled.replicas": "*",
    "local.retention.bytes": "-1",
    "local.retention.ms": "-1",
    "max.compaction.lag.ms": "60000",
    "max.decompressed.message.bytes": "1000000",
    "max.message.bytes": "2000",
    "message.timestamp.after.max.ms": "10",
    "message.timestamp.before.max.ms": "10",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.2",
    "min.compaction.lag.ms": "5",
    "min.insync.replicas": "1",
    "preallocate": "true",
    "remote.copy.lag.bytes": "5",
    "remote.copy.lag.ms": "5",
    "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "false",
    "retention.bytes": "100000",
    "retention.ms": "60000",
    "segment.bytes": "2000000",
    "segment.index.bytes": "4096",
    "segment.jitter.ms": "10",
    "segment.ms": "60000",
    "unclean.leader.election.enable": "true",
}


async def call(broker: Broker, api: ApiKey, version: int, body: Any) -> Any:
    request = build(request_class(api, version), body)  # type: ignore[arg-type]
    ctx = RequestContext(broker.services, api, version, 1, "test", "127.0.0.1:1", 1, SESSION)
    result = await HANDLERS[api].handler(ctx, request)
    assert not isinstance(result, RawBody) and result is not None
    encode(build(response_class(api, version), result))
    return result


async def create(broker: Broker, name: str, configs: dict[str, str]) -> Any:
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
        "timeout_ms": 1000,
        "validate_only": False,
    }
    [answer] = (await call(broker, ApiKey.CREATE_TOPICS, 7, body))["topics"]
    return answer


async def describe(broker: Broker, resource_type: int, name: str) -> dict[str, Any]:
    body = {
        "resources": [
            {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}
        ],
        "include_synonyms": False,
        "include_documentation": False,
    }
    [result] = (await call(broker, ApiKey.DESCRIBE_CONFIGS, 4, body))["results"]
    assert result["error_code"] == 0, result
    return {entry["name"]: entry for entry in result["configs"]}


async def alter(
    broker: Broker, resource_type: int, name: str, *changes: tuple[str, int, str | None]
) -> tuple[int, str | None]:
    configs = [{"name": k, "config_operation": op, "value": v} for k, op, v in changes]
    body = {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configs": configs}],
        "validate_only": False,
    }
    [answer] = (await call(broker, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body))["responses"]
    return int(answer["error_code"]), answer["error_message"]


async def test_every_topic_config_is_described_with_its_type_and_default(
    memory_broker: Broker,
) -> None:
    assert (await create(memory_broker, "plain", {}))["error_code"] == 0
    described = await describe(memory_broker, TOPIC, "plain")
    assert set(described) == set(TOPIC_CONFIGS) - INTERNAL_TOPIC_CONFIGS
    for name, entry in described.items():
        spec = TOPIC_CONFIGS[name]
        assert entry["value"] == spec.default, name
        assert entry["config_type"] == CONFIG_TYPES[spec.kind], name
        assert entry["config_source"] == 5 and entry["is_default"], name


async def test_every_topic_config_can_be_set_at_creation_and_changed(
    memory_broker: Broker,
) -> None:
    assert set(CHANGED) == set(TOPIC_CONFIGS)
    for number, (name, value) in enumerate(sorted(CHANGED.items())):
        topic = f"t{number}"
        answer = await create(memory_broker, topic, {name: value})
        assert answer["error_code"] == 0, (name, answer)
        assert (await describe(memory_broker, TOPIC, topic))[name]["value"] == value
        assert await alter(memory_broker, TOPIC, topic, (name, DELETE, None)) == (0, None)
        assert await alter(memory_broker, TOPIC, topic, (name, SET, value)) == (0, None)
        entry = (await describe(memory_broker, TOPIC, topic))[name]
        assert entry["value"] == value and entry["config_source"] == 1, name
    # the settings lockgate applies reach the partition's log
    log = memory_broker.topics.log_config("t" + str(sorted(CHANGED).index("max.compaction.lag.ms")))
    assert log.max_compaction_lag_ms == 60_000


async def test_kafkas_errors_for_bad_topic_configs(memory_broker: Broker) -> None:
    cases = {
        "Unknown topic config name: file.delete.delay.mss": {"file.delete.delay.mss": "1"},
        "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1": {
            "max.compaction.lag.ms": "0"
        },
        "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)": {
            "min.compaction.lag.ms": "10",
            "max.compaction.lag.ms": "5",
        },
        "Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
        "with remote log storage.": {"remote.storage.enable": "true"},
    }
    for number, (message, configs) in enumerate(cases.items()):
        answer = await create(memory_broker, f"bad{number}", configs)
        assert (answer["error_code"], answer["error_message"]) == (
            ErrorCode.invalid_config,
            message,
        )
    assert (await create(memory_broker, "lags", {"max.compaction.lag.ms": "5"}))["error_code"] == 0
    assert await alter(memory_broker, TOPIC, "lags", ("min.compaction.lag.ms", SET, "6")) == (
        ErrorCode.invalid_config,
        "conflict topic config setting min.compaction.lag.ms (6) > max.compaction.lag.ms (5)",
    )


async def test_append_and_subtract_on_a_topics_list_configs(memory_broker: Broker) -> None:
    await create(memory_broker, "lists", {})

    async def policy() -> str:
        return str((await describe(memory_broker, TOPIC, "lists"))["cleanup.policy"]["value"])

    # no override: on Kafka's default, "delete"
    assert await alter(memory_broker, TOPIC, "lists", ("cleanup.policy", APPEND, "compact")) == (
        0,
        None,
    )
    assert await policy() == "delete,compact"
    assert memory_broker.topics.log_config("lists").compact
    await alter(memory_broker, TOPIC, "lists", ("cleanup.policy", APPEND, "compact"))
    assert await policy() == "delete,compact"  # already there
    await alter(memory_broker, TOPIC, "lists", ("cleanup.policy", SUBTRACT, "delete"))
    assert await policy() == "compact"
    assert not memory_broker.topics.log_config("lists").delete_policy
    await alter(memory_broker, TOPIC, "lists", ("cleanup.policy", SUBTRACT, "compact"))
    assert await policy() == ""  # Kafka 4: neither
    await alter(
        memory_broker, TOPIC, "lists", ("leader.replication.throttled.replicas", APPEND, "0:0,1:0")
    )
    entry = (await describe(memory_broker, TOPIC, "lists"))["leader.replication.throttled.replicas"]
    assert entry["value"] == "0:0,1:0"
    assert await alter(memory_broker, TOPIC, "lists", ("cleanup.policy", APPEND, "bogus")) == (
        ErrorCode.invalid_config,
        "Invalid value bogus for configuration cleanup.policy: String must be one of: compact, "
        "delete",
    )
    for operation, verb in ((APPEND, "APPEND"), (SUBTRACT, "SUBTRACT")):
        assert await alter(memory_broker, TOPIC, "lists", ("retention.ms", operation, "1")) == (
            ErrorCode.invalid_config,
            f"Can't {verb} to key retention.ms because its type is not LIST.",
        )


async def test_the_request_checks_before_any_change(memory_broker: Broker) -> None:
    await create(memory_broker, "checked", {})
    assert await alter(
        memory_broker, TOPIC, "checked", ("retention.ms", SET, "1"), ("retention.ms", DELETE, None)
    ) == (ErrorCode.invalid_request, "Error due to duplicate config keys")
    assert await alter(
        memory_broker, TOPIC, "checked", ("retention.ms", SET, None), ("segment.ms", APPEND, None)
    ) == (ErrorCode.invalid_request, "Null value not supported for : retention.ms, segment.ms")
    assert await alter(memory_broker, TOPIC, "checked", ("retention.ms", 7, "1")) == (
        ErrorCode.invalid_request,
        "Unknown operations type 7",
    )
    assert (await describe(memory_broker, TOPIC, "checked"))["retention.ms"]["config_source"] == 5


async def test_append_and_subtract_on_a_brokers_cleanup_policy(memory_broker: Broker) -> None:
    assert await alter(memory_broker, BROKER, "", ("log.cleanup.policy", APPEND, "compact")) == (
        0,
        None,
    )
    assert memory_broker.config.values["log.cleanup.policy"] == "delete,compact"
    await alter(memory_broker, BROKER, "", ("log.cleanup.policy", SUBTRACT, "delete"))
    assert memory_broker.config.values["log.cleanup.policy"] == "compact"
    assert await alter(memory_broker, BROKER, "0", ("log.retention.ms", APPEND, "1")) == (
        ErrorCode.invalid_config,
        "Config value append is not allowed for config key: log.retention.ms",
    )
    assert await alter(memory_broker, BROKER, "0", ("log.retention.ms", SUBTRACT, "1")) == (
        ErrorCode.invalid_config,
        "Config value subtract is not allowed for config key: log.retention.ms",
    )


async def metadata(broker: Broker, name: str, auto_create: bool) -> int:
    body = {
        "topics": [{"name": name, "topic_id": None}],
        "allow_auto_topic_creation": auto_create,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    [topic] = (await call(broker, ApiKey.METADATA, 12, body))["topics"]
    return int(topic["error_code"])


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "bad name!", "ü"])
async def test_metadata_answers_an_illegal_name_invalid_topic(
    memory_broker: Broker, name: str
) -> None:
    assert await metadata(memory_broker, name, False) == ErrorCode.invalid_topic_exception
    assert await metadata(memory_broker, name, True) == ErrorCode.invalid_topic_exception
    assert name not in memory_broker.topics.topics


async def test_metadata_answers_a_legal_missing_name_unknown(memory_broker: Broker) -> None:
    assert await metadata(memory_broker, "x" * 249, False) == ErrorCode.unknown_topic_or_partition
    assert await metadata(memory_broker, "x" * 249, True) == 0  # created


async def test_legacy_alter_configs_checks_the_request_first(memory_broker: Broker) -> None:
    await create(memory_broker, "legacy", {"retention.ms": "1000"})

    async def legacy(*configs: tuple[str, str | None]) -> tuple[int, str | None]:
        body = {
            "resources": [
                {
                    "resource_type": TOPIC,
                    "resource_name": "legacy",
                    "configs": [{"name": k, "value": v} for k, v in configs],
                }
            ],
            "validate_only": False,
        }
        [answer] = (await call(memory_broker, ApiKey.ALTER_CONFIGS, 2, body))["responses"]
        return int(answer["error_code"]), answer["error_message"]

    assert await legacy(("segment.ms", "1"), ("segment.ms", "2")) == (
        ErrorCode.invalid_request,
        "Error due to duplicate config keys",
    )
    assert await legacy(("segment.ms", None)) == (
        ErrorCode.invalid_request,
        "Null value not supported for : segment.ms",
    )
    assert (await describe(memory_broker, TOPIC, "legacy"))["retention.ms"]["value"] == "1000"
    assert await legacy(("cleanup.policy", "compact")) == (0, None)
    shown = await describe(memory_broker, TOPIC, "legacy")
    assert shown["cleanup.policy"]["value"] == "compact"
    assert shown["retention.ms"]["config_source"] == 5  # replaced: the override is gone


def test_the_topics_compression_level_is_applied() -> None:
    batch = build_batch([(b"k", bytes(range(256)) * 40 + b"a" * 4000)])
    fast, _ = recompress(batch, 1, 1)
    best, _ = recompress(batch, 1, 9)
    assert len(best) < len(fast)
    zstd_low, _ = recompress(batch, 4, -5)
    zstd_high, _ = recompress(batch, 4, 19)
    assert len(zstd_high) < len(zstd_low)


async def test_produce_answers_an_illegal_name_unknown_as_kafka(memory_broker: Broker) -> None:
    async with Cluster(f"127.0.0.1:{memory_broker.port}") as cluster:
        [node] = cluster.metadata.brokers
        connection = await cluster.connection(node)
        for name in ("bad name!", "ok-name"):
            response = await connection.request(
                ApiKey.PRODUCE,
                {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout": 30_000,
                    "topic_data": [
                        {
                            "name": name,
                            "partition_data": [
                                {"index": 0, "records": build_batch([(b"k", b"v")])}
                            ],
                        }
                    ],
                },
                version=9,
            )
            [answer] = response.responses[0].partition_responses
            expected = ErrorCode.unknown_topic_or_partition if name == "bad name!" else 0
            assert answer.error_code == expected, name  # auto-creation is on: ok-name is created
    assert (
        "bad name!" not in memory_broker.topics.topics and "ok-name" in memory_broker.topics.topics
    )
