"""The share-group admin functions read Kafka's answers as Kafka's Admin does: a partition
without share state has no start offset (not offset -1), lag -1 means unknown, per-partition
and per-topic errors are reported one by one while group-level errors are raised with the
broker's message, and ListGroups before v5 (no type filter) keeps only "share" groups. The
answers are kio's own response classes, built as the broker would send them."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.alter_share_group_offsets.v0 import response as alter_v0
from kio.schema.delete_share_group_offsets.v0 import response as delete_v0
from kio.schema.describe_share_group_offsets.v1 import response as offsets_v1
from kio.schema.errors import ErrorCode
from kio.schema.share_group_describe.v1 import response as describe_v1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta, i64

from lockgate.client import admin_share_groups as share
from lockgate.client.cluster import BrokerAddress, ClusterMetadata, TopicPartition
from lockgate.client.errors import KafkaError
from lockgate.protocol.api import ApiKey


@dataclass
class FakeConnection:
    answers: dict[int, Any]
    node_id: int = 1
    versions: dict[int, int] = field(default_factory=dict)
    sent: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    def version_for(self, api_key: int, **_: Any) -> int:
        return self.versions.get(api_key, 5)

    async def request(self, api_key: int, body: dict[str, Any], **_: Any) -> Any:
        self.sent.append((api_key, body))
        return self.answers[api_key]


@dataclass
class FakeCluster:
    connection_: FakeConnection
    request_timeout_ms: int = 1000
    metadata: ClusterMetadata = field(
        default_factory=lambda: ClusterMetadata(brokers={1: BrokerAddress(1, "h", 9092)})
    )

    async def find_coordinator(self, key_type: int, key: str) -> int:
        return 1

    async def connection(self, node_id: int) -> FakeConnection:
        return self.connection_

    async def refresh_metadata(self, topics: Any) -> None:
        return None

    def backoff_s(self, attempt: int) -> float:
        return 0.001


def cluster(answers: dict[int, Any], **versions: int) -> Any:
    return FakeCluster(
        FakeConnection(answers, versions={int(k[1:]): v for k, v in versions.items()})
    )


TOPIC_ID = uuid.uuid4()


def offsets_partition(index: int, start: int, lag: int, code: ErrorCode = ErrorCode.none) -> Any:
    return offsets_v1.DescribeShareGroupOffsetsResponsePartition(
        partition_index=i32(index),
        start_offset=i64(start),
        leader_epoch=i32(0),
        lag=i64(lag),
        error_code=code,
        error_message=None,
    )


def offsets_answer(
    *partitions: Any, code: ErrorCode = ErrorCode.none, msg: str | None = None
) -> Any:
    return offsets_v1.DescribeShareGroupOffsetsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        groups=(
            offsets_v1.DescribeShareGroupOffsetsResponseGroup(
                group_id=GroupId("g"),
                topics=(
                    offsets_v1.DescribeShareGroupOffsetsResponseTopic(
                        topic_name=TopicName("t"), topic_id=TOPIC_ID, partitions=partitions
                    ),
                ),
                error_code=code,
                error_message=msg,
            ),
        ),
    )


async def test_offsets_without_state_have_no_start_offset_and_unknown_lag_is_none() -> None:
    c = cluster(
        {
            90: offsets_answer(
                offsets_partition(0, 5, 7),
                offsets_partition(1, -1, -1),
                offsets_partition(2, 3, -1),
            )
        }
    )
    found = await share.describe_share_group_offsets(c, "g")
    assert found == {
        TopicPartition("t", 0): share.SharePartitionOffset(5, 0, 7),
        TopicPartition("t", 1): share.SharePartitionOffset(None, None, None),
        TopicPartition("t", 2): share.SharePartitionOffset(3, 0, None),
    }
    assert c.connection_.sent == [(90, {"groups": [{"group_id": "g", "topics": None}]})]
    await share.describe_share_group_offsets(c, "g", {"t": {2, 0}})
    assert c.connection_.sent[-1][1]["groups"][0]["topics"] == [
        {"topic_name": "t", "partitions": [0, 2]}
    ]


async def test_offsets_errors_are_raised_with_the_brokers_message() -> None:
    c = cluster({90: offsets_answer(code=ErrorCode.group_authorization_failed, msg="denied")})
    with pytest.raises(KafkaError) as raised:
        await share.describe_share_group_offsets(c, "g")
    assert raised.value.code == ErrorCode.group_authorization_failed
    assert str(raised.value) == "GROUP_AUTHORIZATION_FAILED: denied"
    c = cluster(
        {90: offsets_answer(offsets_partition(0, -1, -1, ErrorCode.topic_authorization_failed))}
    )
    with pytest.raises(KafkaError) as raised:
        await share.describe_share_group_offsets(c, "g")
    assert raised.value.code == ErrorCode.topic_authorization_failed


def member(member_id: str, partitions: tuple[int, ...]) -> Any:
    return describe_v1.Member(
        member_id=member_id,
        rack_id=None,
        member_epoch=i32(4),
        client_id="c",
        client_host="/127.0.0.1",
        subscribed_topic_names=(TopicName("t"),),
        assignment=describe_v1.Assignment(
            topic_partitions=(
                describe_v1.TopicPartitions(
                    topic_id=TOPIC_ID,
                    topic_name=TopicName("t"),
                    partitions=tuple(i32(p) for p in partitions),
                ),
            )
        ),
    )


def described(code: ErrorCode = ErrorCode.none, message: str | None = None) -> Any:
    return describe_v1.ShareGroupDescribeResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        groups=(
            describe_v1.DescribedGroup(
                error_code=code,
                error_message=message,
                group_id=GroupId("g"),
                group_state="Stable",
                group_epoch=i32(4),
                assignment_epoch=i32(3),
                assignor_name="simple",
                members=(member("m1", (2, 0)),) if code == ErrorCode.none else (),
                authorized_operations=i32(-2147483648),
            ),
        ),
    )


async def test_describe_reads_members_and_assignments_sorted() -> None:
    found = await share.describe_share_groups(cluster({77: described()}), ["g"])
    assert found == {
        "g": share.ShareGroupDescription(
            "g",
            "Stable",
            4,
            3,
            "simple",
            (
                share.ShareMemberDescription(
                    "m1",
                    None,
                    4,
                    "c",
                    "/127.0.0.1",
                    ("t",),
                    (TopicPartition("t", 0), TopicPartition("t", 2)),
                ),
            ),
            1,
        )
    }


async def test_describe_of_a_group_nobody_knows_raises_group_id_not_found() -> None:
    c = cluster({77: described(ErrorCode.group_id_not_found, "Group g not found.")})
    with pytest.raises(KafkaError) as raised:
        await share.describe_share_groups(c, ["g"])
    assert raised.value.code == ErrorCode.group_id_not_found
    assert str(raised.value) == "GROUP_ID_NOT_FOUND: Group g not found."


def alter_answer(code: ErrorCode, *partitions: tuple[int, ErrorCode]) -> Any:
    return alter_v0.AlterShareGroupOffsetsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=code,
        error_message="The group is not empty." if code else None,
        responses=(
            alter_v0.AlterShareGroupOffsetsResponseTopic(
                topic_name=TopicName("t"),
                topic_id=TOPIC_ID,
                partitions=tuple(
                    alter_v0.AlterShareGroupOffsetsResponsePartition(
                        partition_index=i32(p), error_code=e, error_message=None
                    )
                    for p, e in partitions
                ),
            ),
        ),
    )


async def test_alter_reports_partitions_and_raises_the_first_failure() -> None:
    answer = alter_answer(
        ErrorCode.none, (0, ErrorCode.none), (7, ErrorCode.unknown_topic_or_partition)
    )
    c = cluster({91: answer})
    plan = {TopicPartition("t", 7): 0, TopicPartition("t", 0): 4}
    results = await share.alter_share_group_offsets_by_partition(c, "g", plan)
    assert results[TopicPartition("t", 0)] is None
    assert results[TopicPartition("t", 7)] is not None
    assert c.connection_.sent[-1][1] == {
        "group_id": "g",
        "topics": [
            {
                "topic_name": "t",
                "partitions": [
                    {"partition_index": 0, "start_offset": 4},
                    {"partition_index": 7, "start_offset": 0},
                ],
            }
        ],
    }
    with pytest.raises(KafkaError) as raised:
        await share.alter_share_group_offsets(c, "g", plan)
    assert raised.value.code == ErrorCode.unknown_topic_or_partition


async def test_alter_of_a_group_with_members_raises_non_empty_group() -> None:
    c = cluster({91: alter_answer(ErrorCode.non_empty_group)})
    with pytest.raises(KafkaError) as raised:
        await share.alter_share_group_offsets(c, "g", {TopicPartition("t", 0): 0})
    assert raised.value.code == ErrorCode.non_empty_group
    assert raised.value.message == "The group is not empty."


async def test_delete_offsets_reports_each_topic() -> None:
    answer = delete_v0.DeleteShareGroupOffsetsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.none,
        error_message=None,
        responses=(
            delete_v0.DeleteShareGroupOffsetsResponseTopic(
                topic_name=TopicName("t"),
                topic_id=TOPIC_ID,
                error_code=ErrorCode.none,
                error_message=None,
            ),
            delete_v0.DeleteShareGroupOffsetsResponseTopic(
                topic_name=TopicName("u"),
                topic_id=None,
                error_code=ErrorCode.unknown_topic_or_partition,
                error_message="There is no offset information to delete.",
            ),
        ),
    )
    results = await share.delete_share_group_offsets(cluster({92: answer}), "g", ["t", "u", "t"])
    assert results["t"] is None
    error = results["u"]
    assert error is not None and error.message == "There is no offset information to delete."


@dataclass
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str = ""


@dataclass
class Listed:
    groups: tuple[ListedGroup, ...]
    error_code: int = 0


async def test_list_asks_for_share_groups_and_filters_them_itself_before_v5() -> None:
    groups = (ListedGroup("s", "share", "Empty", "share"), ListedGroup("c", "consumer", "Stable"))
    c = cluster({ApiKey.LIST_GROUPS: Listed(groups)}, v16=4)
    assert await share.list_share_groups(c, states=["Empty"]) == [
        share.ShareGroupListing("s", "Empty", 1)
    ]
    assert c.connection_.sent[-1][1] == {"states_filter": ["Empty"], "types_filter": ["share"]}
