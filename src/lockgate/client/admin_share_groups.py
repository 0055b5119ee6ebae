# client/admin_share_groups.py — the admin side of share groups (KIP-932), as Kafka's Admin
# offers it: list them (ListGroups filtered to type "share"), describe them
# (ShareGroupDescribe: members, assignments, epochs, state, assignor), their start offsets and
# lag per partition (DescribeShareGroupOffsets), altering and deleting those offsets
# (AlterShareGroupOffsets, DeleteShareGroupOffsets) and deleting share groups (DeleteGroups,
# which serves every group type). Requests go to the group's coordinator and are sent again
# while it is loading or has moved (admin_groups.at_coordinator).
#
# Errors are the client's KafkaError classes. Group-level errors are raised; where Kafka's
# Admin reports each partition or topic on its own (delete offsets, delete groups) the
# outcome of each is returned instead, so that a tool can print them all.
#
# Functions take a Cluster; Admin (admin.py) exposes them as methods.
from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lockgate.client.admin_groups import at_coordinator
from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import ErrorCode, KafkaError, error_for, raise_for
from lockgate.protocol.api import ApiKey

SHARE_TYPE = "share"
SHARE_GROUP_DESCRIBE = 77
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92
FIRST_LIST_GROUPS_WITH_TYPES = 5  # ListGroups v5 adds TypesFilter and GroupType
# what DescribeShareGroupOffsets answers for a partition without share state (and v0 for lag)
NO_OFFSET = -1


@dataclass(frozen=True, slots=True)
class ShareGroupListing:
    group_id: str
    state: str  # Empty or Stable ("" when the broker predates ListGroups v4)
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str  # chosen by the consumer itself (KIP-932)
    rack_id: str | None
    member_epoch: int
    client_id: str
    host: str
    subscribed_topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]  # sorted


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str  # Empty, Stable (Dead is never answered: an unknown group is an error)
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class SharePartitionOffset:
    """A share partition's start offset (SPSO): the first record not yet delivered and
    acknowledged. None where the group has no state for the partition."""

    start_offset: int | None
    leader_epoch: int | None
    lag: int | None  # records from the start offset to the end (None before v1, or unknown)


def _error(code: int, message: str | None, group_id: str) -> KafkaError:
    # Kafka's message already names the group ("Group x not found."); otherwise say which
    return error_for(code, message, "" if message else f"group {group_id}")


async def list_share_groups(
    cluster: Cluster, *, states: Collection[str] = ()
) -> list[ShareGroupListing]:
    """Every share group on every broker, optionally only those in `states` (compared
    without case by the broker, as Kafka does)."""
    await cluster.refresh_metadata(())
    listings: list[ShareGroupListing] = []
    for node_id in sorted(cluster.metadata.brokers):
        connection = await cluster.connection(node_id)
        version = connection.version_for(ApiKey.LIST_GROUPS)
        answer = await connection.request(
            ApiKey.LIST_GROUPS,
            {"states_filter": sorted(states), "types_filter": [SHARE_TYPE]},
            version=version,
        )
        raise_for(answer.error_code, None, f"ListGroups on broker {node_id}")
        for group in answer.groups:
            # before v5 the filter is not sent; Kafka lists share groups with protocol "share"
            kind = getattr(group, "group_type", None) or group.protocol_type
            if version < FIRST_LIST_GROUPS_WITH_TYPES and kind != SHARE_TYPE:
                continue
            listings.append(
                ShareGroupListing(
                    str(group.group_id), str(getattr(group, "group_state", "")), node_id
                )
            )
    return sorted(listings, key=lambda listing: listing.group_id)


async def describe_share_groups(
    cluster: Cluster, group_ids: Iterable[str]
) -> dict[str, ShareGroupDescription]:
    """Each group's state, epochs, assignor and members with their assignments. A group that
    does not exist, or is not a share group, raises GROUP_ID_NOT_FOUND."""
    found: dict[str, ShareGroupDescription] = {}
    for group_id in dict.fromkeys(group_ids):
        found[group_id] = await at_coordinator(
            cluster, group_id, functools.partial(_describe, group_id=group_id)
        )
    return found


async def _describe(connection: BrokerConnection, group_id: str) -> ShareGroupDescription:
    answer = await connection.request(
        SHARE_GROUP_DESCRIBE, {"group_ids": [group_id], "include_authorized_operations": False}
    )
    for group in answer.groups:
        if group.error_code:
            raise _error(group.error_code, group.error_message, group_id)
        return _description(group, -1 if connection.node_id is None else connection.node_id)
    raise error_for(ErrorCode.group_id_not_found, None, f"group {group_id}: not in the answer")


def _description(group: Any, node_id: int) -> ShareGroupDescription:
    return ShareGroupDescription(
        str(group.group_id),
        str(group.group_state),
        int(group.group_epoch),
        int(group.assignment_epoch),
        str(group.assignor_name),
        tuple(
            ShareMemberDescription(
                str(m.member_id),
                m.rack_id,
                int(m.member_epoch),
                str(m.client_id),
                str(m.client_host),
                tuple(str(name) for name in m.subscribed_topic_names),
                tuple(
                    sorted(
                        TopicPartition(str(t.topic_name), int(p))
                        for t in m.assignment.topic_partitions
                        for p in t.partitions
                    )
                ),
            )
            for m in group.members
        ),
        node_id,
    )


async def describe_share_group_offsets(
    cluster: Cluster, group_id: str, topics: Mapping[str, Collection[int]] | None = None
) -> dict[TopicPartition, SharePartitionOffset]:
    """The group's start offset, leader epoch and lag per partition: for every partition it
    has state for (`topics` None), or for the partitions named. A group or topic nobody knows
    answers partitions without offsets, as Kafka does, not an error."""
    # a topic with no partitions listed is left out: Kafka 4.4 answers it UNKNOWN_SERVER_ERROR
    wanted = (
        None
        if topics is None
        else [
            {"topic_name": name, "partitions": sorted(p)} for name, p in sorted(topics.items()) if p
        ]
    )
    return await at_coordinator(
        cluster, group_id, lambda connection: _describe_offsets(connection, group_id, wanted)
    )


async def _describe_offsets(
    connection: BrokerConnection, group_id: str, topics: list[dict[str, Any]] | None
) -> dict[TopicPartition, SharePartitionOffset]:
    answer = await connection.request(
        DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [{"group_id": group_id, "topics": topics}]}
    )
    offsets: dict[TopicPartition, SharePartitionOffset] = {}
    for group in answer.groups:
        if group.error_code:
            raise _error(group.error_code, group.error_message, group_id)
        for topic in group.topics:
            for partition in topic.partitions:
                tp = TopicPartition(str(topic.topic_name), int(partition.partition_index))
                raise_for(partition.error_code, partition.error_message, str(tp))
                offsets[tp] = _offset(partition)
    return offsets


def _offset(partition: Any) -> SharePartitionOffset:
    if partition.start_offset == NO_OFFSET:
        return SharePartitionOffset(None, None, None)
    lag = int(getattr(partition, "lag", NO_OFFSET))
    return SharePartitionOffset(
        int(partition.start_offset), int(partition.leader_epoch), None if lag < 0 else lag
    )


async def alter_share_group_offsets(
    cluster: Cluster, group_id: str, offsets: Mapping[TopicPartition, int]
) -> None:
    """Sets the start offsets of a share group without members (NON_EMPTY_GROUP otherwise);
    Kafka creates the group if it does not exist. The first failing partition's error is
    raised (UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED)."""
    for error in (
        await alter_share_group_offsets_by_partition(cluster, group_id, offsets)
    ).values():
        if error is not None:
            raise error


async def alter_share_group_offsets_by_partition(
    cluster: Cluster, group_id: str, offsets: Mapping[TopicPartition, int]
) -> dict[TopicPartition, KafkaError | None]:
    """AlterShareGroupOffsets with each partition's outcome (None: done); a group-level error
    (NON_EMPTY_GROUP, INVALID_GROUP_ID...) is raised."""
    topics: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for tp, offset in sorted(offsets.items()):
        topics[tp.topic].append((tp.partition, offset))
    return await at_coordinator(
        cluster, group_id, lambda connection: _alter(connection, group_id, topics)
    )


async def _alter(
    connection: BrokerConnection, group_id: str, topics: Mapping[str, list[tuple[int, int]]]
) -> dict[TopicPartition, KafkaError | None]:
    answer = await connection.request(
        ALTER_SHARE_GROUP_OFFSETS,
        {
            "group_id": group_id,
            "topics": [
                {
                    "topic_name": topic,
                    "partitions": [
                        {"partition_index": p, "start_offset": offset} for p, offset in partitions
                    ],
                }
                for topic, partitions in topics.items()
            ],
        },
    )
    if answer.error_code:
        raise _error(answer.error_code, answer.error_message, group_id)
    results: dict[TopicPartition, KafkaError | None] = {}
    for topic in answer.responses:
        for partition in topic.partitions:
            tp = TopicPartition(str(topic.topic_name), int(partition.partition_index))
            results[tp] = (
                error_for(partition.error_code, partition.error_message, str(tp))
                if partition.error_code
                else None
            )
    return results


async def delete_share_group_offsets(
    cluster: Cluster, group_id: str, topics: Iterable[str]
) -> dict[str, KafkaError | None]:
    """Deletes a share group's state for whole topics, with each topic's outcome (None:
    deleted; UNKNOWN_TOPIC_OR_PARTITION for a topic without state). Group-level errors are
    raised: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (members remain), INVALID_GROUP_ID."""
    names = list(dict.fromkeys(topics))
    return await at_coordinator(
        cluster, group_id, lambda connection: _delete_offsets(connection, group_id, names)
    )


async def _delete_offsets(
    connection: BrokerConnection, group_id: str, topics: list[str]
) -> dict[str, KafkaError | None]:
    answer = await connection.request(
        DELETE_SHARE_GROUP_OFFSETS,
        {"group_id": group_id, "topics": [{"topic_name": topic} for topic in topics]},
    )
    if answer.error_code:
        raise _error(answer.error_code, answer.error_message, group_id)
    results: dict[str, KafkaError | None] = {}
    for topic in answer.responses:
        name = str(topic.topic_name)
        results[name] = (
            error_for(topic.error_code, topic.error_message, "" if topic.error_message else name)
            if topic.error_code
            else None
        )
    return results


async def delete_share_groups(
    cluster: Cluster, group_ids: Iterable[str]
) -> dict[str, KafkaError | None]:
    """DeleteGroups for share groups, each group's outcome (None: deleted); the broker
    deletes the groups' share state first. NON_EMPTY_GROUP while members remain,
    GROUP_ID_NOT_FOUND for a group nobody knows. (DeleteGroups does not check the type: a
    consumer group id is deleted too; callers that must not do so check the type first.)"""
    results: dict[str, KafkaError | None] = {}
    for group_id in dict.fromkeys(group_ids):
        try:
            await at_coordinator(
                cluster, group_id, functools.partial(_delete_group, group_id=group_id)
            )
        except KafkaError as exc:
            results[group_id] = exc
        else:
            results[group_id] = None
    return results


async def _delete_group(connection: BrokerConnection, group_id: str) -> None:
    answer = await connection.request(ApiKey.DELETE_GROUPS, {"groups_names": [group_id]})
    for result in answer.results:
        message = getattr(result, "error_message", None)  # v3 only
        if result.error_code:
            raise _error(result.error_code, message, group_id)
