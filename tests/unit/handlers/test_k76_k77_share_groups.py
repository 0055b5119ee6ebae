"""Share group membership at the handler (ShareGroupHeartbeat 76, ShareGroupDescribe 77) and the
other group APIs against a share group, on a broker in this process (memory storage, the ACL
authorizer on): each request built and each answer encoded with kio at the version under test.
The initialize step goes through the in-process persister to the share coordinator; a restart
restores the group from __consumer_offsets."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import build_batch
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.session import Session
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.handlers.support import (
    ADMIN,
    ALICE,
    SHARE_SETTINGS,
    call,
    grant,
    running,
    started,
    topic_id,
)

SETTINGS = {
    **SHARE_SETTINGS,
    "offsets.topic.num.partitions": "3",
    # (a second heartbeat comes at once here: no waiting for the next assignment)
    "group.share.assignment.interval.ms": "0",
}
HEARTBEAT, DESCRIBE = ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE
MEMBER = "Xy3kQ1R9T0ak2f9Zb7c8Aw"  # a Java client's member id: a Uuid string, 22 characters


@pytest.fixture
async def engine() -> MemoryEngine:
    return MemoryEngine()


@pytest.fixture
async def broker(engine: MemoryEngine) -> AsyncIterator[Broker]:
    async with running(engine, SETTINGS, groups=True) as broker:
        await broker.admin.create("t", 2, 1, {})
        await broker.admin.create("secret", 1, 1, {})
        grant(
            broker,
            [
                (ResourceType.TOPIC, "t", Operation.DESCRIBE),
                (ResourceType.GROUP, "g", Operation.READ),
            ],
        )
        yield broker


async def heartbeat(
    broker: Broker,
    epoch: int,
    topics: list[str] | None = None,
    member: str = MEMBER,
    group: str = "g",
    session: Session = ADMIN,
) -> Any:
    body = {
        "group_id": group,
        "member_id": member,
        "member_epoch": epoch,
        "rack_id": None,
        "subscribed_topic_names": topics,
    }
    return await call(broker, HEARTBEAT, 1, body, session)


async def describe(broker: Broker, *groups: str) -> list[Any]:
    answer = await call(
        broker, DESCRIBE, 1, {"group_ids": list(groups), "include_authorized_operations": False}
    )
    return list(answer["groups"])


async def joined(broker: Broker) -> Any:
    """A member joined, its partitions initialized, and its second heartbeat's answer."""
    first = await heartbeat(broker, 0, ["t"])
    assert (first["error_code"], first["member_epoch"]) == (0, 2)  # (a new group is at 1)
    assert first["assignment"] == {"topic_partitions": []}  # none initialized yet
    await broker.groups.share.settled()
    return await heartbeat(broker, 2)


async def test_join_initializes_share_state_then_assigns(broker: Broker) -> None:
    second = await joined(broker)
    assert second["error_code"] == 0 and second["member_epoch"] == 3
    assert second["heartbeat_interval"] == 5000
    assert second["assignment"] == {
        "topic_partitions": [{"topic_id": topic_id(broker), "partitions": [0, 1]}]
    }
    for p in (0, 1):  # InitializeShareGroupState(state epoch = group epoch 2, start -1)
        state = await broker.shares.read_summary("g", topic_id(broker), p, 0)
        assert (state.error, state.state_epoch, state.start_offset) == (0, 2, -1)
    third = await heartbeat(broker, 3)
    assert third["member_epoch"] == 3 and third["assignment"] is None
    (group,) = await describe(broker, "g")
    assert (group["error_code"], group["group_state"], group["assignor_name"]) == (
        0,
        "Stable",
        "simple",
    )
    assert (group["group_epoch"], group["assignment_epoch"]) == (3, 3)
    (member,) = group["members"]
    assert (member["member_id"], member["member_epoch"], member["client_id"]) == (MEMBER, 3, "test")
    assert member["subscribed_topic_names"] == ["t"]
    assert member["assignment"]["topic_partitions"] == [
        {"topic_id": topic_id(broker), "topic_name": "t", "partitions": [0, 1]}
    ]


async def test_heartbeat_errors_at_the_handler(broker: Broker) -> None:
    long_id = "x" * 37
    answer = await heartbeat(broker, 0, ["t"], member=long_id)
    assert (answer["error_code"], answer["error_message"]) == (
        ErrorCode.invalid_request,
        "Invalid member id",
    )
    assert (await heartbeat(broker, 0, ["t"], member=""))["error_code"] == ErrorCode.invalid_request
    assert (await heartbeat(broker, 0, None))["error_code"] == ErrorCode.invalid_request
    assert (await heartbeat(broker, 0, ["t"], group=""))["error_code"] == ErrorCode.invalid_request
    assert (await heartbeat(broker, 3, ["t"]))["error_code"] == ErrorCode.group_id_not_found
    assert (await heartbeat(broker, -1))["error_code"] == ErrorCode.group_id_not_found
    denied = await heartbeat(broker, 0, ["t"], group="other", session=ALICE)
    assert denied["error_code"] == ErrorCode.group_authorization_failed
    topic_denied = await heartbeat(broker, 0, ["t", "secret"], session=ALICE)
    assert topic_denied["error_code"] == ErrorCode.topic_authorization_failed
    assert (await heartbeat(broker, 0, ["t"], session=ALICE))["error_code"] == 0
    assert (await heartbeat(broker, 1, member="stranger"))["error_code"] == (
        ErrorCode.unknown_member_id
    )
    assert (await heartbeat(broker, 9))["error_code"] == ErrorCode.fenced_member_epoch


async def test_describe_errors(broker: Broker) -> None:
    await joined(broker)
    empty, unknown = await describe(broker, "nope", "")  # (Kafka answers empty ids first)
    assert unknown["error_code"] == ErrorCode.group_id_not_found
    assert empty["error_code"] == ErrorCode.invalid_group_id
    await consumer_group(broker, "c")
    (other,) = await describe(broker, "c")
    assert (other["error_code"], other["error_message"]) == (
        ErrorCode.group_id_not_found,
        "Group c is not a share group.",
    )


def consumer_join(group: str) -> dict[str, Any]:
    """ConsumerGroupHeartbeat v1: a new member joins `group`, subscribing to t."""
    return {
        "group_id": group,
        "member_id": str(uuid.uuid4()),
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout": 30000,
        "subscribed_topic_names": ["t"],
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [],
    }


async def consumer_group(broker: Broker, group: str) -> None:
    answer = await call(broker, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, consumer_join(group))
    assert answer["error_code"] == 0


async def test_group_types_and_cross_type_errors(broker: Broker) -> None:
    await joined(broker)
    await consumer_group(broker, "c")
    # ShareGroupHeartbeat against a consumer group
    assert (await heartbeat(broker, 0, ["t"], group="c"))["error_code"] == (
        ErrorCode.group_id_not_found
    )
    listed = await call(broker, ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    by_id = {g["group_id"]: g for g in listed["groups"]}
    assert (by_id["g"]["protocol_type"], by_id["g"]["group_type"]) == ("share", "share")
    assert by_id["g"]["group_state"] == "Stable"
    only_share = await call(
        broker, ApiKey.LIST_GROUPS, 5, {"states_filter": ["stable"], "types_filter": ["SHARE"]}
    )
    assert [g["group_id"] for g in only_share["groups"]] == ["g"]
    old = await call(broker, ApiKey.LIST_GROUPS, 3, {})
    assert {g["group_id"] for g in old["groups"]} == {"g", "c"}
    v6 = await call(
        broker, ApiKey.DESCRIBE_GROUPS, 6, {"groups": ["g"], "include_authorized_operations": False}
    )
    (entry,) = v6["groups"]
    assert (entry["error_code"], entry["group_state"]) == (ErrorCode.group_id_not_found, "Dead")
    assert entry["error_message"] == "Group g is not a classic group."
    v5 = await call(
        broker, ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g"], "include_authorized_operations": False}
    )
    assert (v5["groups"][0]["error_code"], v5["groups"][0]["group_state"]) == (0, "Dead")
    described = await call(
        broker,
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        1,
        {"group_ids": ["g"], "include_authorized_operations": False},
    )
    assert described["groups"][0]["error_code"] == ErrorCode.group_id_not_found
    answer = await call(broker, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, consumer_join("g"))
    assert answer["error_code"] == ErrorCode.group_id_not_found
    join = await call(
        broker,
        ApiKey.JOIN_GROUP,
        9,
        {
            "group_id": "g",
            "session_timeout": 30000,
            "rebalance_timeout": 30000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
            "reason": None,
        },
    )
    assert (join["error_code"], join["member_id"]) == (ErrorCode.inconsistent_group_protocol, "")
    commit = await call(
        broker,
        ApiKey.OFFSET_COMMIT,
        9,
        {
            "group_id": "g",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    assert commit["topics"][0]["partitions"][0]["error_code"] == ErrorCode.group_id_not_found
    fetched = await call(
        broker,
        ApiKey.OFFSET_FETCH,
        9,
        {
            "groups": [{"group_id": "g", "member_id": None, "member_epoch": -1, "topics": None}],
            "require_stable": False,
        },
    )
    assert fetched["groups"][0]["error_code"] == ErrorCode.group_id_not_found


async def test_delete_groups_needs_empty_and_deletes_share_state_first(broker: Broker) -> None:
    await joined(broker)
    deleted = await call(broker, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert deleted["results"][0]["error_code"] == ErrorCode.non_empty_group
    left = await heartbeat(broker, -1)
    assert (left["error_code"], left["member_epoch"], left["member_id"]) == (0, -1, MEMBER)
    (group,) = await describe(broker, "g")
    assert (group["group_state"], group["group_epoch"], group["members"]) == ("Empty", 4, [])
    deleted = await call(broker, ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert deleted["results"][0]["error_code"] == 0
    for p in (0, 1):  # the share coordinator holds nothing more for it
        state = await broker.shares.read_summary("g", topic_id(broker), p, 0)
        assert (state.error, state.state_epoch, state.start_offset) == (0, 0, -1)
    (gone,) = await describe(broker, "g")
    assert gone["error_code"] == ErrorCode.group_id_not_found
    assert (await heartbeat(broker, 1))["error_code"] == ErrorCode.group_id_not_found


async def test_restart_restores_the_group(engine: MemoryEngine, broker: Broker) -> None:
    await joined(broker)
    await heartbeat(broker, 0, ["t"], member="second")
    before = await describe(broker, "g")
    await broker.stop()
    again = await started(engine, SETTINGS, groups=True)
    try:
        assert await describe(again, "g") == before
        answer = await heartbeat(again, 3)  # the member goes on with its epoch
        assert answer["error_code"] == 0
        assert again.groups.share.sessions  # restored members have a session to come back in
    finally:
        await again.stop()


# -- the share offsets admin APIs (90-92) ------------------------------------------------------

DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = (
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS,
)
ZERO = uuid.UUID(int=0)


async def offsets(
    broker: Broker, topics: list[tuple[str, list[int]]] | None, group: str = "g", **kw: Any
) -> Any:
    body = {"groups": [{"group_id": group, "topics": None if topics is None else [
        {"topic_name": t, "partitions": p} for t, p in topics]}]}  # fmt: skip
    (answer,) = (await call(broker, DESCRIBE_OFFSETS, 1, body, **kw))["groups"]
    return answer


def starts(answer: Any) -> dict[tuple[str, int], tuple[int, int, int, int]]:
    """(topic, partition) → (start offset, leader epoch, lag, error)."""
    return {
        (t["topic_name"], p["partition_index"]): (
            p["start_offset"],
            p["leader_epoch"],
            p["lag"],
            p["error_code"],
        )
        for t in answer["topics"]
        for p in t["partitions"]
    }


async def alter(broker: Broker, topics: dict[str, list[tuple[int, int]]], **kw: Any) -> Any:
    body = {"group_id": "g", "topics": [
        {"topic_name": t, "partitions": [{"partition_index": p, "start_offset": o} for p, o in ps]}
        for t, ps in topics.items()]}  # fmt: skip
    return await call(broker, ALTER_OFFSETS, 0, body, **kw)


async def delete_offsets(broker: Broker, *topics: str, group: str = "g", **kw: Any) -> Any:
    body = {"group_id": group, "topics": [{"topic_name": t} for t in topics]}
    return await call(broker, DELETE_OFFSETS, 0, body, **kw)


async def test_describe_offsets_of_no_group_and_unknown_topics(broker: Broker) -> None:
    answer = await offsets(broker, [("t", [0, 1]), ("nope", [3])])
    assert answer["error_code"] == 0
    assert starts(answer) == {
        ("t", 0): (-1, 0, -1, 0), ("t", 1): (-1, 0, -1, 0), ("nope", 3): (-1, 0, -1, 0)
    }  # fmt: skip
    assert answer["topics"][1]["topic_id"] == ZERO
    assert (await offsets(broker, []))["topics"] == []
    assert (await offsets(broker, None))["topics"] == []
    other = await offsets(broker, [("t", [0])], group="other", session=ALICE)
    assert other["error_code"] == ErrorCode.group_authorization_failed
    mixed = await offsets(broker, [("secret", [0]), ("t", [0])], session=ALICE)
    assert [t["topic_name"] for t in mixed["topics"]] == ["t", "secret"]  # the denied last
    assert starts(mixed)[("secret", 0)] == (-1, 0, -1, ErrorCode.topic_authorization_failed)
    assert mixed["topics"][1]["topic_id"] == ZERO


async def test_alter_describe_and_delete_share_offsets(broker: Broker) -> None:
    await joined(broker)
    refused = await alter(broker, {"t": [(0, 5)]})
    assert refused["error_code"] == ErrorCode.non_empty_group and refused["responses"] == []
    assert (await delete_offsets(broker, "t"))["error_code"] == ErrorCode.non_empty_group
    assert starts(await offsets(broker, None)) == {
        ("t", 0): (-1, 0, -1, 0),
        ("t", 1): (-1, 0, -1, 0),
    }
    await heartbeat(broker, -1)
    altered = await alter(broker, {"t": [(0, 5), (1, 7), (9, 1)], "nope": [(0, 1)]})
    assert altered["error_code"] == 0
    by_topic = {t["topic_name"]: t for t in altered["responses"]}
    assert [(p["partition_index"], p["error_code"]) for p in by_topic["t"]["partitions"]] == [
        (0, 0), (1, 0), (9, ErrorCode.unknown_topic_or_partition)
    ]  # fmt: skip
    assert by_topic["t"]["topic_id"] == topic_id(broker)
    assert by_topic["nope"]["partitions"][0]["error_code"] == ErrorCode.unknown_topic_or_partition
    # the share coordinator's state at the new start offsets, state epoch = the group epoch (4)
    state = await broker.shares.read_summary("g", topic_id(broker), 1, 0)
    assert (state.state_epoch, state.start_offset) == (4, 7)
    # a leader wrote a delivery complete count; 12 records produced: lag = 12 - 5 - 2
    written = await broker.shares.write("g", topic_id(broker), 0, 4, 1, 5, 2, [])
    assert written.error == 0
    partition = broker.topics.get("t", 0)
    assert partition is not None
    await broker.writer.write(partition, build_batch([(None, b"x")] * 12))
    held = [await broker.shares.read_summary("g", topic_id(broker), p, 0) for p in (0, 1)]
    assert [s.delivery_complete_count for s in held] == [2, 0]
    assert starts(await offsets(broker, [("t", [0, 1])])) == {
        ("t", 0): (5, held[0].leader_epoch, 5, 0),
        ("t", 1): (7, held[1].leader_epoch, -7, 0),  # (as Kafka: nothing produced there)
    }
    v0 = await call(broker, DESCRIBE_OFFSETS, 0, {"groups": [{"group_id": "g", "topics": None}]})
    assert {p["start_offset"] for t in v0["groups"][0]["topics"] for p in t["partitions"]} == {5, 7}
    deleted = await delete_offsets(broker, "t", "nope", "secret")
    assert deleted["error_code"] == 0
    unknown = ErrorCode.unknown_topic_or_partition
    answered = [
        (t["topic_name"], t["error_code"], t["error_message"]) for t in deleted["responses"]
    ]
    assert answered == [
        ("nope", unknown, "This server does not host this topic-partition."),
        ("secret", unknown, "There is no offset information to delete."),
        ("t", 0, None),
    ]
    for p in (0, 1):
        state = await broker.shares.read_summary("g", topic_id(broker), p, 0)
        assert (state.state_epoch, state.start_offset) == (0, -1)  # no state any more
    assert (await offsets(broker, None))["topics"] == []
    group = broker.groups.describe_share("g")
    assert not isinstance(group, ErrorCode) and hasattr(group, "partitions")


async def test_share_offsets_errors(broker: Broker) -> None:
    missing = await delete_offsets(broker, "t", group="nope")
    assert (missing["error_code"], missing["error_message"]) == (
        ErrorCode.group_id_not_found, "Group nope not found."
    )  # fmt: skip
    assert (await delete_offsets(broker, "t", group=""))["error_code"] == (
        ErrorCode.invalid_group_id
    )
    await consumer_group(broker, "c")
    other = await delete_offsets(broker, "t", group="c")
    assert other["error_code"] == ErrorCode.group_id_not_found
    zero = [{"partition_index": 0, "start_offset": 0}]
    body = {"group_id": "c", "topics": [{"topic_name": "t", "partitions": zero}]}
    assert (await call(broker, ALTER_OFFSETS, 0, body))[
        "error_code"
    ] == ErrorCode.group_id_not_found
    denied = await alter(broker, {"t": [(0, 1)]}, session=ALICE)  # (READ on g and DESCRIBE on t)
    assert denied["responses"][0]["partitions"][0]["error_code"] == (
        ErrorCode.topic_authorization_failed
    )
    assert (await delete_offsets(broker, "t", session=ALICE))["error_code"] == (
        ErrorCode.group_authorization_failed
    )
    # a missing group is created by AlterShareGroupOffsets (Empty)
    created = await alter(broker, {"t": [(1, 3)]})
    assert created["error_code"] == 0
    (group,) = await describe(broker, "g")
    assert (group["error_code"], group["group_state"], group["group_epoch"]) == (0, "Empty", 1)
    state = await broker.shares.read_summary("g", topic_id(broker), 1, 0)
    assert (state.state_epoch, state.start_offset) == (1, 3)
    # a group that never had share partitions (its topic does not exist): no answer per topic
    assert (await heartbeat(broker, 0, ["ghost"], group="fresh"))["error_code"] == 0
    assert (await heartbeat(broker, -1, group="fresh"))["error_code"] == 0
    nothing = await delete_offsets(broker, "t", group="fresh")
    assert (nothing["error_code"], nothing["responses"]) == (0, [])
