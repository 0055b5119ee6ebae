"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) at the handler: the wire shapes
(assignment by topic id, v0's coordinator-chosen member id), the ACL checks (READ on the group,
DESCRIBE on subscribed topics; DESCRIBE on the group and its topics, KIP-430 bits), ApiVersions'
group.version feature, and ListGroups' group types."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.coordinator.group.consumer_group import HeartbeatRequest
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acl_store import LocalAclStore
from lockgate.security.acls import Operation
from lockgate.server.broker import Broker
from tests.unit.handlers.test_authorization import ALICE, BOB, GROUP, TOPIC, call, grant, start


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    broker = await start({"authorizer.class.name": "lockgate"})
    assert broker.authorizer is not None and isinstance(broker.authorizer.store, LocalAclStore)
    broker.authorizer.store.create_now(
        grant(TOPIC, "t", Operation.DESCRIBE, Operation.READ)
        + grant(GROUP, "g", Operation.READ, Operation.DESCRIBE)
    )
    await broker.admin.create("t", 3, 1, {})
    await broker.admin.create("secret", 1, 1, {})
    try:
        yield broker
    finally:
        await broker.stop()


def join(member: str, topics: list[str], group: str = "g") -> dict[str, Any]:
    return {
        "group_id": group,
        "member_id": member,
        "member_epoch": 0,
        "rebalance_timeout": 5000,
        "subscribed_topic_names": topics,
        "topic_partitions": [],
    }


async def test_heartbeat_assigns_by_topic_id(broker: Broker) -> None:
    member = str(uuid.uuid4())
    answer = await call(broker, ALICE, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join(member, ["t"]))
    assert answer["error_code"] == 0 and answer["member_epoch"] == 2
    assert answer["member_id"] == member and answer["heartbeat_interval"] == 5000
    [assigned] = answer["assignment"]["topic_partitions"]
    assert assigned == {"topic_id": broker.topics.topics["t"].topic_id, "partitions": [0, 1, 2]}
    again = {
        "group_id": "g", "member_id": member, "member_epoch": 2,
        "topic_partitions": [{"topic_id": assigned["topic_id"], "partitions": [0, 1, 2]}],
    }  # fmt: skip
    answer = await call(broker, ALICE, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, again)
    assert answer["error_code"] == 0 and answer.get("assignment") is None  # unchanged
    # v0: the coordinator names a member that joins without an id; v1 refuses it
    answer = await call(broker, ALICE, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, join("", ["t"]))
    assert answer["error_code"] == 0 and uuid.UUID(answer["member_id"])
    answer = await call(broker, ALICE, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join("", ["t"]))
    assert answer["error_code"] == ErrorCode.invalid_request and answer["error_message"]


async def test_heartbeat_authorization(broker: Broker) -> None:
    denied = await call(broker, BOB, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join("m", ["t"]))
    assert denied["error_code"] == ErrorCode.group_authorization_failed
    hidden = await call(broker, ALICE, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join("m", ["secret"]))
    assert hidden["error_code"] == ErrorCode.topic_authorization_failed
    assert "secret" in hidden["error_message"]
    assert "g" not in broker.groups.groups  # nothing was created


async def test_describe(broker: Broker) -> None:
    await call(broker, ALICE, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join("m1", ["t"]))
    body = {"group_ids": ["g", "nope", "other"], "include_authorized_operations": True}
    described = await call(broker, ALICE, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, body)
    group, unknown, refused = described["groups"]
    assert group["error_code"] == 0 and group["group_state"] == "Stable"
    assert (group["group_epoch"], group["assignment_epoch"]) == (2, 2)
    assert group["assignor_name"] == "uniform"
    assert group["authorized_operations"] == (1 << Operation.READ) | (1 << Operation.DESCRIBE)
    [member] = group["members"]
    assert member["member_id"] == "m1" and member["member_epoch"] == 2
    assert member["subscribed_topic_names"] == ["t"] and member["member_type"] == 1
    topics = member["assignment"]["topic_partitions"]
    assert topics == member["target_assignment"]["topic_partitions"]
    assert topics[0]["topic_name"] == "t" and topics[0]["partitions"] == [0, 1, 2]
    assert refused["error_code"] == ErrorCode.group_authorization_failed
    # ("nope" is not granted either: authorization comes before existence)
    assert unknown["error_code"] == ErrorCode.group_authorization_failed
    broker.authorizer.store.create_now(grant(GROUP, "nope", Operation.DESCRIBE))  # type: ignore[union-attr]
    [unknown] = (await call(broker, ALICE, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, body))["groups"][1:2]
    assert unknown["error_code"] == ErrorCode.group_id_not_found
    # a group using topics the client may not describe (joined without the handler's check)
    await broker.groups.consumer.heartbeat(
        HeartbeatRequest("g", "m2", 0, rebalance_timeout_ms=1, subscribed_topic_names=("secret",))
    )
    described = await call(broker, ALICE, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, body)
    assert described["groups"][0]["error_code"] == ErrorCode.topic_authorization_failed
    assert described["groups"][0]["members"] == []


async def test_api_versions_and_list_groups(broker: Broker) -> None:
    versions = await call(broker, ALICE, ApiKey.API_VERSIONS, 3, {
        "client_software_name": "t", "client_software_version": "1",
    })  # fmt: skip
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
    assert keys[68] == (0, 1) and keys[69] == (0, 1)
    finalized = {f["name"]: f["max_version_level"] for f in versions["finalized_features"]}
    assert finalized["group.version"] == 1
    await call(broker, ALICE, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join("m1", ["t"]))
    body = {"states_filter": [], "types_filter": ["consumer"]}
    listed = await call(broker, ALICE, ApiKey.LIST_GROUPS, 5, body)
    assert [(g["group_id"], g["group_type"], g["group_state"]) for g in listed["groups"]] == [
        ("g", "consumer", "Stable")
    ]
    listed = await call(broker, ALICE, ApiKey.LIST_GROUPS, 5, {**body, "types_filter": ["classic"]})
    assert listed["groups"] == []
    described = await call(broker, ALICE, ApiKey.DESCRIBE_GROUPS, 6, {
        "groups": ["g"], "include_authorized_operations": False,
    })  # fmt: skip
    assert described["groups"][0]["error_code"] == ErrorCode.group_id_not_found
    assert "not a classic group" in described["groups"][0]["error_message"]
