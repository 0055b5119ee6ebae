"""DescribeLogDirs (35) and DescribeTopicPartitions (75) at the handler: a broker in this process
(memory storage, with the ACL authorizer so that denials can be checked), each answer also
encoded with kio to prove it fits the schema."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.config.properties import BrokerConfig
from lockgate.handlers.registry import HANDLERS, RawBody, RequestContext
from lockgate.protocol.api import ApiKey, build, encode, request_class, response_class
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.security.acl_store import LocalAclStore
from lockgate.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from lockgate.security.session import SecurityProtocol, Session
from lockgate.server.broker import Broker
from lockgate.storage.errors import StorageError
from lockgate.storage.memory import MemoryEngine

ADMIN = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:admin")
ALICE = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:alice")
BOB = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:bob")


def allow_alice(kind: ResourceType, name: str, operation: Operation) -> AclBinding:
    return AclBinding(
        ResourcePattern(kind, name, PatternType.LITERAL),
        AclEntry("User:alice", "*", operation, Permission.ALLOW),
    )


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    config = BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "lockgate.durability": "page-cache",
            "authorizer.class.name": "lockgate",
            "super.users": "User:admin",
            "max.request.partition.size.limit": "5",
        }
    )
    broker = Broker(config, MemoryEngine())
    await broker.start()
    assert broker.authorizer is not None and isinstance(broker.authorizer.store, LocalAclStore)
    broker.authorizer.store.create_now(
        [
            allow_alice(ResourceType.TOPIC, "a", Operation.DESCRIBE),
            allow_alice(ResourceType.TOPIC, "a", Operation.READ),
        ]
    )
    for name, count in (("a", 3), ("b", 2), ("c", 4)):
        await broker.admin.create(name, count, 1, {})
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


# -- DescribeLogDirs --------------------------------------------------------------------------


def log_dirs(*topics: tuple[str, list[int]]) -> dict[str, Any]:
    return {"topics": [{"topic": name, "partitions": parts} for name, parts in topics] or None}


async def test_log_dirs_list_every_hosted_partition_with_size_and_no_lag(broker: Broker) -> None:
    partition = broker.topics.get("a", 1)
    assert partition is not None
    batch = build_batch([(None, b"x" * 100)], timestamp_ms=1)
    partition.append(bytearray(batch), validate_produced_batch(batch), 1)
    answer = await call(broker, ADMIN, ApiKey.DESCRIBE_LOG_DIRS, 4, log_dirs())
    assert answer["error_code"] == 0
    [result] = answer["results"]
    assert result["error_code"] == 0 and result["log_dir"].endswith("lockgate-data")
    assert result["total_bytes"] == result["usable_bytes"] == -1  # memory storage: no volume
    by_topic = {t["name"]: t["partitions"] for t in result["topics"]}
    assert [p["partition_index"] for p in by_topic["a"]] == [0, 1, 2]
    assert [p["partition_index"] for p in by_topic["c"]] == [0, 1, 2, 3]
    sizes = [p["partition_size"] for p in by_topic["a"]]
    assert sizes[0] == 0 and sizes[1] == len(batch)
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in by_topic["a"])


async def test_log_dirs_topic_filter_leaves_out_what_is_not_hosted(broker: Broker) -> None:
    answer = await call(
        broker, ADMIN, ApiKey.DESCRIBE_LOG_DIRS, 4, log_dirs(("b", [1, 7]), ("nope", [0]))
    )
    [result] = answer["results"]
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in result["topics"]
    ] == [("b", [1])]
    empty = await call(broker, ADMIN, ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": []})
    assert empty["results"][0]["topics"] == []


async def test_log_dirs_need_cluster_describe(broker: Broker) -> None:
    denied = await call(broker, BOB, ApiKey.DESCRIBE_LOG_DIRS, 3, log_dirs())
    assert denied["error_code"] == ErrorCode.cluster_authorization_failed
    assert denied["results"] == ()
    assert broker.authorizer is not None and isinstance(broker.authorizer.store, LocalAclStore)
    broker.authorizer.store.create_now(
        [allow_alice(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)]
    )
    allowed = await call(broker, ALICE, ApiKey.DESCRIBE_LOG_DIRS, 3, log_dirs())
    assert allowed["error_code"] == 0 and allowed["results"][0]["topics"]


async def test_offline_log_dir_is_a_storage_error(broker: Broker) -> None:
    broker.storage.go_offline(StorageError(5, "Input/output error"))
    answer = await call(broker, ADMIN, ApiKey.DESCRIBE_LOG_DIRS, 4, log_dirs())
    [result] = answer["results"]
    assert result["error_code"] == ErrorCode.kafka_storage_error and result["topics"] == ()


# -- DescribeTopicPartitions ------------------------------------------------------------------


def describe(
    *names: str, limit: int = 2000, cursor: tuple[str, int] | None = None
) -> dict[str, Any]:
    return {
        "topics": [{"name": n} for n in names],
        "response_partition_limit": limit,
        "cursor": None
        if cursor is None
        else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }


def pages(answer: dict[str, Any]) -> list[tuple[str, list[int]]]:
    return [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in answer["topics"]]


async def test_partitions_carry_leader_epoch_replicas_isr_and_empty_elr(broker: Broker) -> None:
    answer = await call(broker, ADMIN, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, describe("b"))
    [topic] = answer["topics"]
    assert topic["error_code"] == 0 and topic["topic_id"] == broker.topics.topics["b"].topic_id
    node = broker.node_id
    for partition in topic["partitions"]:
        assert partition["leader_id"] == node and partition["leader_epoch"] >= 0
        assert partition["replica_nodes"] == partition["isr_nodes"] == (node,)
        assert partition["eligible_leader_replicas"] == () == partition["last_known_elr"]
        assert partition["offline_replicas"] == ()
    assert answer["next_cursor"] is None


async def test_paging_follows_kafkas_cursor(broker: Broker) -> None:
    # every topic from "a" on (the internal ones sort before it); the broker's limit (5) caps
    # the request's
    first = await call(
        broker, ADMIN, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, describe(cursor=("a", 0))
    )
    assert pages(first) == [("a", [0, 1, 2]), ("b", [0, 1])]
    # used up at the end of b: the next page starts at c's partition 0
    assert first["next_cursor"] == {"topic_name": "c", "partition_index": 0}
    second = await call(
        broker, ADMIN, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, describe(limit=3, cursor=("c", 0))
    )
    assert pages(second) == [("c", [0, 1, 2])]
    assert second["next_cursor"] == {"topic_name": "c", "partition_index": 3}
    last = await call(broker, ADMIN, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, describe(cursor=("c", 3)))
    assert pages(last) == [("c", [3])] and last["next_cursor"] is None
    # a zero or negative limit still moves one partition forward
    one = await call(broker, ADMIN, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, describe("c", limit=0))
    assert pages(one) == [("c", [0])]


async def test_cursor_must_name_a_requested_topic(broker: Broker) -> None:
    for cursor in (("c", 0), ("a", -1)):
        answer = await call(
            broker, ADMIN, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, describe("a", "b", cursor=cursor)
        )
        assert [t["error_code"] for t in answer["topics"]] == [ErrorCode.invalid_request] * 2


async def test_unknown_illegal_and_unauthorized_topics(broker: Broker) -> None:
    unknown = await call(
        broker, ADMIN, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, describe("zz", "bad name")
    )
    assert [(t["name"], t["error_code"]) for t in unknown["topics"]] == [
        ("bad name", ErrorCode.invalid_topic_exception),
        ("zz", ErrorCode.unknown_topic_or_partition),
    ]
    answer = await call(
        broker, ALICE, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, describe("zz", "b", "a")
    )
    # whether a topic alice may not describe exists is not disclosed; the denied ones come last
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [
        ("a", 0),
        ("b", ErrorCode.topic_authorization_failed),
        ("zz", ErrorCode.topic_authorization_failed),
    ]
    denied = answer["topics"][-1]
    assert denied["topic_id"].int == 0 and denied["topic_authorized_operations"] == -(2**31)
    bits = answer["topics"][0]["topic_authorized_operations"]
    assert bits == (1 << Operation.DESCRIBE) | (1 << Operation.READ)
    listing = await call(broker, ALICE, ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, describe())
    assert pages(listing) == [("a", [0, 1, 2])]  # all topics: the others are left out


async def test_metadata_bitfields_cover_unknown_topics_but_not_denied_ones(broker: Broker) -> None:
    body = {
        "topics": [{"name": n, "topic_id": None} for n in ("a", "b", "nope")],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": True,
    }
    assert broker.authorizer is not None and isinstance(broker.authorizer.store, LocalAclStore)
    broker.authorizer.store.create_now(
        [allow_alice(ResourceType.TOPIC, "nope", Operation.DESCRIBE)]
    )
    answer = await call(broker, ALICE, ApiKey.METADATA, 12, body)
    bits = {
        t["name"]: (t["error_code"], t["topic_authorized_operations"]) for t in answer["topics"]
    }
    assert bits["a"] == (0, (1 << Operation.DESCRIBE) | (1 << Operation.READ))
    assert bits["b"] == (ErrorCode.topic_authorization_failed, -(2**31))
    assert bits["nope"] == (ErrorCode.unknown_topic_or_partition, 1 << Operation.DESCRIBE)
