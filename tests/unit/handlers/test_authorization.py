"""Each API family's authorization check at the handler: a broker in this process with the ACL
authorizer, requests handled under a session whose principal is alice (granted what each
check needs) or bob (granted nothing), and, for the ACL APIs, a broker without an authorizer.
Each denial answers the family's error code and changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.config.properties import BrokerConfig
from lockgate.handlers.registry import HANDLERS, RawBody, RequestContext
from lockgate.protocol.api import ApiKey, build, request_class
from lockgate.protocol.errors import ErrorCode
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
from lockgate.storage.memory import MemoryEngine

ALICE = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:alice")
BOB = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:bob")
TOPIC, GROUP, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID


def grant(kind: ResourceType, name: str, *operations: Operation) -> list[AclBinding]:
    return [
        AclBinding(
            ResourcePattern(kind, name, PatternType.LITERAL),
            AclEntry("User:alice", "*", operation, Permission.ALLOW),
        )
        for operation in operations
    ]


async def start(settings: dict[str, str]) -> Broker:
    config = BrokerConfig(
        {"listeners": "127.0.0.1:0", "lockgate.durability": "page-cache", **settings}
    )
    broker = Broker(config, MemoryEngine())
    await broker.start()
    return broker


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    broker = await start(
        {
            "authorizer.class.name": "lockgate",
            "transaction.two.phase.commit.enable": "true",
            "super.users": "User:admin",
        }
    )
    assert broker.authorizer is not None and isinstance(broker.authorizer.store, LocalAclStore)
    broker.authorizer.store.create_now(
        grant(TOPIC, "t", Operation.ALL)
        + grant(GROUP, "g", Operation.READ, Operation.DELETE)
        + grant(TXN, "tx", Operation.WRITE)
        + grant(TXN, "tpc", Operation.WRITE, Operation.TWO_PHASE_COMMIT)
        + grant(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE)
    )
    await broker.admin.create("t", 1, 1, {})
    try:
        yield broker
    finally:
        await broker.stop()


async def call(broker: Broker, session: Session, api: ApiKey, version: int, body: Any) -> Any:
    spec = HANDLERS[api]
    request = build(request_class(api, version), body)  # type: ignore[arg-type]
    ctx = RequestContext(broker.services, api, version, 1, "test", "127.0.0.1:1", 1, session)
    result = await spec.handler(ctx, request)
    assert not isinstance(result, RawBody)
    return result


def metadata_request(*names: str, operations: bool = False) -> dict[str, Any]:
    return {
        "topics": [{"name": n, "topic_id": None} for n in names],
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": operations,
        "include_topic_authorized_operations": operations,
    }


async def test_metadata_hides_and_refuses_topics(broker: Broker) -> None:
    await broker.admin.create("hidden", 1, 1, {})
    listed = await call(broker, ALICE, ApiKey.METADATA, 9, {**metadata_request(), "topics": None})
    assert [t["name"] for t in listed["topics"]] == ["t"]
    named = await call(broker, BOB, ApiKey.METADATA, 9, metadata_request("t", "new"))
    assert [t["error_code"] for t in named["topics"]] == [ErrorCode.topic_authorization_failed] * 2
    assert "new" not in broker.topics.topics  # no auto-creation without CREATE
    asked = await call(broker, ALICE, ApiKey.METADATA, 9, metadata_request("t", operations=True))
    bits = asked["topics"][0]["topic_authorized_operations"]
    assert bits & (1 << Operation.READ) and bits & (1 << Operation.ALTER_CONFIGS)
    assert asked["cluster_authorized_operations"] == 1 << Operation.DESCRIBE
    unasked = await call(broker, ALICE, ApiKey.METADATA, 9, metadata_request("t"))
    assert unasked["topics"][0]["topic_authorized_operations"] == -(2**31)


async def test_list_offsets_needs_describe(broker: Broker) -> None:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
            }
        ],
    }
    allowed = await call(broker, ALICE, ApiKey.LIST_OFFSETS, 7, body)
    denied = await call(broker, BOB, ApiKey.LIST_OFFSETS, 7, body)
    assert allowed["topics"][0]["partitions"][0]["error_code"] == 0
    assert (
        denied["topics"][0]["partitions"][0]["error_code"] == ErrorCode.topic_authorization_failed
    )


async def test_group_apis_need_group_acls(broker: Broker) -> None:
    heartbeat = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
    denied = await call(broker, BOB, ApiKey.HEARTBEAT, 4, heartbeat)
    assert denied["error_code"] == ErrorCode.group_authorization_failed
    allowed = await call(broker, ALICE, ApiKey.HEARTBEAT, 4, heartbeat)
    assert allowed["error_code"] != ErrorCode.group_authorization_failed
    find = {"key_type": 0, "coordinator_keys": ["g"]}
    assert (await call(broker, ALICE, ApiKey.FIND_COORDINATOR, 4, find))["coordinators"][0][
        "error_code"
    ] == 0
    assert (await call(broker, BOB, ApiKey.FIND_COORDINATOR, 4, find))["coordinators"][0][
        "error_code"
    ] == ErrorCode.group_authorization_failed
    deleted = await call(broker, BOB, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert deleted["results"][0]["error_code"] == ErrorCode.group_authorization_failed
    described = await call(
        broker,
        ALICE,
        ApiKey.DESCRIBE_GROUPS,
        5,
        {"groups": ["g", "other"], "include_authorized_operations": True},
    )
    first, second = described["groups"]
    assert first["authorized_operations"] == (1 << Operation.READ) | (1 << Operation.DESCRIBE) | (
        1 << Operation.DELETE
    )
    assert second["error_code"] == ErrorCode.group_authorization_failed


async def test_offset_commit_needs_group_and_topic_read(broker: Broker) -> None:
    def body(group: str, topic: str) -> dict[str, Any]:
        return {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 5,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }

    def code(answer: Any) -> int:
        return int(answer["topics"][0]["partitions"][0]["error_code"])

    assert code(await call(broker, BOB, ApiKey.OFFSET_COMMIT, 8, body("g", "t"))) == (
        ErrorCode.group_authorization_failed
    )
    assert code(await call(broker, ALICE, ApiKey.OFFSET_COMMIT, 8, body("g", "x"))) == (
        ErrorCode.topic_authorization_failed
    )
    assert code(await call(broker, ALICE, ApiKey.OFFSET_COMMIT, 8, body("g", "t"))) == 0
    fetched = await call(
        broker,
        BOB,
        ApiKey.OFFSET_FETCH,
        8,
        {"groups": [{"group_id": "g", "topics": None}], "require_stable": False},
    )
    assert fetched["groups"][0]["error_code"] == ErrorCode.group_authorization_failed


async def test_topic_admin_needs_topic_acls(broker: Broker) -> None:
    create = {
        "topics": [
            {
                "name": n,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
            for n in ("t2", "x")
        ],
        "timeout": 30000,
        "validate_only": False,
    }
    answer = await call(broker, ALICE, ApiKey.CREATE_TOPICS, 5, create)
    # alice has CREATE on neither t2 nor the cluster
    assert {t["error_code"] for t in answer["topics"]} == {ErrorCode.topic_authorization_failed}
    assert "t2" not in broker.topics.topics
    deleted = await call(
        broker, BOB, ApiKey.DELETE_TOPICS, 4, {"topic_names": ["t"], "timeout": 30000}
    )
    assert deleted["responses"][0]["error_code"] == ErrorCode.topic_authorization_failed
    assert "t" in broker.topics.topics
    grown = await call(
        broker,
        BOB,
        ApiKey.CREATE_PARTITIONS,
        2,
        {
            "topics": [{"name": "t", "count": 2, "assignments": None}],
            "timeout": 30000,
            "validate_only": False,
        },
    )
    assert grown["results"][0]["error_code"] == ErrorCode.topic_authorization_failed
    configs = await call(
        broker,
        BOB,
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
                {"resource_type": 4, "resource_name": "0", "configuration_keys": None},
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    assert [r["error_code"] for r in configs["results"]] == [
        ErrorCode.topic_authorization_failed,
        ErrorCode.cluster_authorization_failed,
    ]


async def test_init_producer_id(broker: Broker) -> None:
    def body(transactional_id: str | None, enable_2pc: bool = False) -> dict[str, Any]:
        return {
            "transactional_id": transactional_id,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
            "enable2_pc": enable_2pc,
            "keep_prepared_txn": False,
        }

    async def code(session: Session, transactional_id: str | None, enable_2pc: bool = False) -> int:
        answer = await call(
            broker, session, ApiKey.INIT_PRODUCER_ID, 6, body(transactional_id, enable_2pc)
        )
        return int(answer["error_code"])

    assert await code(ALICE, None) == 0  # KIP-679: WRITE on a topic suffices
    assert await code(BOB, None) == ErrorCode.cluster_authorization_failed
    assert await code(ALICE, "tx") == 0
    assert await code(BOB, "tx") == ErrorCode.transactional_id_authorization_failed
    assert await code(ALICE, "tx", True) == ErrorCode.transactional_id_authorization_failed
    assert await code(ALICE, "tpc", True) == 0


async def test_transaction_apis(broker: Broker) -> None:
    end = {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "committed": True}
    assert (await call(broker, BOB, ApiKey.END_TXN, 3, end))["error_code"] == (
        ErrorCode.transactional_id_authorization_failed
    )
    offsets = {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "group_id": "x"}
    assert (await call(broker, ALICE, ApiKey.ADD_OFFSETS_TO_TXN, 3, offsets))["error_code"] == (
        ErrorCode.group_authorization_failed
    )
    add = {
        "v3_and_below_transactional_id": "tx",
        "v3_and_below_producer_id": 1,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": "t", "partitions": [0]}, {"name": "x", "partitions": [0]}],
    }
    answer = await call(broker, ALICE, ApiKey.ADD_PARTITIONS_TO_TXN, 3, add)
    codes = {
        r["name"]: r["results_by_partition"][0]["partition_error_code"]
        for r in answer["results_by_topic_v3_and_below"]
    }
    assert codes == {
        "t": ErrorCode.operation_not_attempted,
        "x": ErrorCode.topic_authorization_failed,
    }
    markers = {
        "markers": [
            {
                "producer_id": 1,
                "producer_epoch": 0,
                "transaction_result": True,
                "topics": [{"name": "t", "partition_indexes": [0]}],
                "coordinator_epoch": 0,
            }
        ]
    }
    answer = await call(broker, ALICE, ApiKey.WRITE_TXN_MARKERS, 1, markers)
    assert answer["markers"][0]["topics"][0]["partitions"][0]["error_code"] == (
        ErrorCode.cluster_authorization_failed
    )
    assert broker.topics.get("t", 0).log_end_offset == 0  # type: ignore[union-attr]
    described = await call(
        broker, BOB, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx"]}
    )
    assert described["transaction_states"][0]["error_code"] == (
        ErrorCode.transactional_id_authorization_failed
    )


async def test_acl_apis(broker: Broker) -> None:
    describe = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    found = await call(broker, ALICE, ApiKey.DESCRIBE_ACLS, 3, describe)
    assert found["error_code"] == 0 and len(found["resources"]) == 5
    creation = {
        "resource_type": 2,
        "resource_name": "y",
        "resource_pattern_type": 3,
        "principal": "User:bob",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }
    created = await call(broker, ALICE, ApiKey.CREATE_ACLS, 3, {"creations": [creation]})
    assert created["results"][0]["error_code"] == ErrorCode.cluster_authorization_failed
    admin = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:admin")
    bad = {**creation, "operation": 1}
    created = await call(broker, admin, ApiKey.CREATE_ACLS, 3, {"creations": [creation, bad]})
    assert [r["error_code"] for r in created["results"]] == [0, ErrorCode.invalid_request]
    assert broker.authorizer is not None
    assert broker.authorizer.allowed(BOB, Operation.READ, TOPIC, "y")
    bad_filter = {**describe, "operation": 0}
    invalid = await call(broker, ALICE, ApiKey.DESCRIBE_ACLS, 3, bad_filter)
    assert invalid["error_code"] == ErrorCode.invalid_request
    deleted = await call(broker, BOB, ApiKey.DELETE_ACLS, 3, {"filters": [describe]})
    assert deleted["filter_results"][0]["error_code"] == ErrorCode.cluster_authorization_failed
    deleted = await call(
        broker,
        admin,
        ApiKey.DELETE_ACLS,
        3,
        {"filters": [{**describe, "principal_filter": "User:bob"}]},
    )
    assert len(deleted["filter_results"][0]["matching_acls"]) == 1
    assert not broker.authorizer.allowed(BOB, Operation.READ, TOPIC, "y")


async def test_acl_apis_without_an_authorizer_answer_security_disabled() -> None:
    broker = await start({})
    try:
        describe = {
            "resource_type_filter": 1,
            "resource_name_filter": None,
            "pattern_type_filter": 1,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        }
        answer = await call(broker, BOB, ApiKey.DESCRIBE_ACLS, 3, describe)
        assert answer["error_code"] == ErrorCode.security_disabled
        deleted = await call(broker, BOB, ApiKey.DELETE_ACLS, 3, {"filters": [describe]})
        assert deleted["filter_results"][0]["error_code"] == ErrorCode.security_disabled
        # and without an authorizer everything else is allowed
        listed = await call(broker, BOB, ApiKey.METADATA, 9, metadata_request("free"))
        assert listed["topics"][0]["error_code"] == 0
    finally:
        await broker.stop()


async def test_client_quota_apis_need_cluster_config_operations(broker: Broker) -> None:
    described = await call(
        broker, ALICE, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False}
    )
    # DESCRIBE on the cluster does not imply DESCRIBE_CONFIGS
    assert described["error_code"] == ErrorCode.cluster_authorization_failed
    entry = {
        "entity": [{"entity_type": "user", "entity_name": "bob"}],
        "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
    }
    altered = await call(
        broker, BOB, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [entry], "validate_only": False}
    )
    assert altered["entries"][0]["error_code"] == ErrorCode.cluster_authorization_failed
    assert not broker.quota_store.table
    admin = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:admin")
    altered = await call(
        broker, admin, ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [entry], "validate_only": False}
    )
    assert altered["entries"][0]["error_code"] == 0


async def test_scram_credential_apis_need_cluster_describe_and_alter(broker: Broker) -> None:
    upsert = {
        "deletions": [],
        "upsertions": [
            {
                "name": "carol",
                "mechanism": 1,
                "iterations": 4096,
                "salt": b"s" * 16,
                "salted_password": b"p" * 32,
            }
        ],
    }
    denied = await call(broker, ALICE, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, upsert)
    assert denied["results"][0]["error_code"] == ErrorCode.cluster_authorization_failed
    assert await broker.credentials.users() == {}  # nothing stored
    admin = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:admin")
    stored = await call(broker, admin, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, upsert)
    assert stored["results"][0]["error_code"] == ErrorCode.none
    describe = {"users": None}
    refused = await call(broker, BOB, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, describe)
    assert refused["error_code"] == ErrorCode.cluster_authorization_failed
    listed = await call(broker, ALICE, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, describe)
    assert [r["user"] for r in listed["results"]] == ["carol"]
