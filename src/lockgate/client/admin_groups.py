# client/admin_groups.py — the admin side of consumer groups, as Kafka's Admin offers it: list
# (every broker), describe with each member's assignment (ConsumerGroupDescribe for KIP-848
# groups, with target assignments and epochs; DescribeGroups for classic ones), committed
# offsets, altering offsets of a group without members, deleting groups and a group's offsets.
# Requests go to the group's coordinator, found through Cluster.find_coordinator, and are sent
# again while it is loading or has moved (at_coordinator).
#
# Functions take a Cluster; Admin (admin.py) exposes them as methods.
from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import struct
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from lockgate.client.cluster import COORDINATOR_PENDING, Cluster, TopicPartition
from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import (
    ErrorCode,
    KafkaError,
    UnsupportedVersionError,
    error_for,
    raise_for,
)
from lockgate.protocol.api import ApiKey
from lockgate.protocol.frame import MalformedFrame

log = logging.getLogger(__name__)
T = TypeVar("T")

GROUP_KEY_TYPE = 0
CONSUMER_PROTOCOL = "consumer"
CONSUMER_GROUP_DESCRIBE = 69
# OffsetFetch v10 names topics by id only; v9 still answers with names.
LAST_OFFSET_FETCH_WITH_NAMES = 9


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str  # "" when the broker predates ListGroups v4
    protocol_type: str
    coordinator_id: int
    # "classic", "consumer", "share" (ListGroups v5+; "" from older brokers)
    group_type: str = ""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]  # decoded for "consumer" groups only
    # KIP-848 groups only: what the coordinator wants the member to own, and its epoch
    target_assignment: tuple[TopicPartition, ...] = ()
    member_epoch: int = -1


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor chosen, for consumer groups
    members: tuple[MemberDescription, ...]
    coordinator_id: int
    group_type: str = "classic"  # "consumer" for a KIP-848 group
    group_epoch: int = -1  # KIP-848 groups only
    assignment_epoch: int = -1  # KIP-848 groups only: the epoch of the target assignment


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of a ConsumerProtocolAssignment (int16 version, [topic [partition]],
    then user data and, v1+, nothing a describer needs)."""
    if not data:
        return ()
    try:
        pos = 2
        (topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        result = []
        for _ in range(max(topics, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2 : pos + 2 + size].decode()
            pos += 2 + size
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(count, 0)):
                result.append(TopicPartition(topic, struct.unpack_from(">i", data, pos)[0]))
                pos += 4
    except (struct.error, UnicodeDecodeError) as exc:
        raise MalformedFrame(f"unreadable consumer assignment: {exc}") from exc
    return tuple(result)


async def coordinator(cluster: Cluster, group_id: str) -> tuple[int, BrokerConnection]:
    node_id = await cluster.find_coordinator(GROUP_KEY_TYPE, group_id)
    return node_id, await cluster.connection(node_id)


# answers after which the request is sent again to the coordinator found anew, as Kafka's Admin
# does: the coordinator is loading the group's partition, or is no longer (or not yet) it
_COORDINATOR_MOVING = COORDINATOR_PENDING | {ErrorCode.not_coordinator}


async def at_coordinator(
    cluster: Cluster, group_id: str, send: Callable[[BrokerConnection], Awaitable[T]]
) -> T:
    """`send` to the group's coordinator; while it raises COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR (a new offsets topic loading, a coordinator
    that moved), the coordinator is found and asked again with backoff, for up to
    request_timeout_ms; then, or for any other error, the error is raised."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + cluster.request_timeout_ms / 1000
    for attempt in itertools.count():
        _node, connection = await coordinator(cluster, group_id)
        try:
            return await send(connection)
        except KafkaError as exc:
            pause = cluster.backoff_s(attempt)
            if exc.code not in _COORDINATOR_MOVING or loop.time() + pause > deadline:
                raise
            log.debug("group %r: %s; asking its coordinator again", group_id, exc)
            await asyncio.sleep(pause)
    raise AssertionError("itertools.count() does not end")


async def list_groups(cluster: Cluster, *, states: Collection[str] = ()) -> list[GroupListing]:
    await cluster.refresh_metadata(())
    listings: list[GroupListing] = []
    for node_id in sorted(cluster.metadata.brokers):
        connection = await cluster.connection(node_id)
        answer = await connection.request(
            ApiKey.LIST_GROUPS, {"states_filter": sorted(states), "types_filter": []}
        )
        raise_for(answer.error_code, None, f"ListGroups on broker {node_id}")
        listings.extend(
            GroupListing(
                str(g.group_id),
                str(getattr(g, "group_state", "")),
                str(g.protocol_type),
                node_id,
                str(getattr(g, "group_type", "")),
            )
            for g in answer.groups
        )
    return sorted(listings, key=lambda listing: listing.group_id)


async def describe_groups(
    cluster: Cluster, group_ids: Iterable[str]
) -> dict[str, GroupDescription]:
    """Each group's state, protocol and members. KIP-848 groups are asked with
    ConsumerGroupDescribe (where the coordinator serves it), the others, and every group on
    an older broker, with DescribeGroups. A group nobody knows raises GROUP_ID_NOT_FOUND
    (DescribeGroups v6+; older versions describe it as Dead). Groups whose coordinator is
    loading or moved are asked again, as at_coordinator does, for up to request_timeout_ms."""
    wanted = list(dict.fromkeys(group_ids))
    found: dict[str, GroupDescription] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + cluster.request_timeout_ms / 1000
    left = wanted
    for attempt in itertools.count():
        moving = await _describe_round(cluster, left, found)
        if not moving:
            return {group_id: found[group_id] for group_id in wanted}
        pause = cluster.backoff_s(attempt)
        if loop.time() + pause > deadline:
            raise next(iter(moving.values()))
        log.debug("groups %s: coordinator loading or moved; asking again", sorted(moving))
        await asyncio.sleep(pause)
        left = list(moving)
    raise AssertionError("itertools.count() does not end")


async def _describe_round(
    cluster: Cluster, group_ids: list[str], found: dict[str, GroupDescription]
) -> dict[str, KafkaError]:
    """One round of describe_groups: fills `found`; returns the groups to ask again (their
    coordinator is loading or moved) with the error each got. Other errors are raised."""
    by_coordinator: dict[int, list[str]] = defaultdict(list)
    # asked all at once (pipelined on the connections), not one round trip after another
    nodes = await asyncio.gather(
        *(cluster.find_coordinator(GROUP_KEY_TYPE, group_id) for group_id in group_ids)
    )
    for group_id, node_id in zip(group_ids, nodes, strict=True):
        by_coordinator[node_id].append(group_id)
    moving: dict[str, KafkaError] = {}
    for node_id, ids in by_coordinator.items():
        connection = await cluster.connection(node_id)
        classic = await _describe_consumer_groups(connection, ids, node_id, found, moving)
        if not classic:
            continue
        answer = await connection.request(
            ApiKey.DESCRIBE_GROUPS, {"groups": classic, "include_authorized_operations": False}
        )
        for group in answer.groups:
            group_id = str(group.group_id)
            if group.error_code in _COORDINATOR_MOVING:
                message = getattr(group, "error_message", None)
                moving[group_id] = error_for(group.error_code, message, f"group {group_id}")
                continue
            raise_for(group.error_code, getattr(group, "error_message", None), f"group {group_id}")
            found[group_id] = _group(group, node_id)
    return moving


async def _describe_consumer_groups(
    connection: BrokerConnection,
    ids: list[str],
    node_id: int,
    found: dict[str, GroupDescription],
    moving: dict[str, KafkaError],
) -> list[str]:
    """ConsumerGroupDescribe: fills `found` with the KIP-848 groups, and `moving` with those
    whose coordinator is loading or moved; returns the ids left for DescribeGroups (classic
    groups and unknown ones answer GROUP_ID_NOT_FOUND here)."""
    try:
        version = connection.version_for(CONSUMER_GROUP_DESCRIBE)
    except UnsupportedVersionError:
        return ids
    answer = await connection.request(
        CONSUMER_GROUP_DESCRIBE,
        {"group_ids": ids, "include_authorized_operations": False},
        version=version,
    )
    left = []
    for group in answer.groups:
        group_id = str(group.group_id)
        if group.error_code == ErrorCode.group_id_not_found:
            left.append(group_id)
            continue
        if group.error_code in _COORDINATOR_MOVING:
            moving[group_id] = error_for(group.error_code, group.error_message, f"group {group_id}")
            continue
        raise_for(group.error_code, group.error_message, f"group {group_id}")
        found[group_id] = _consumer_group(group, node_id)
    return left


def _partitions(assignment: Any) -> tuple[TopicPartition, ...]:
    return tuple(
        sorted(
            TopicPartition(str(t.topic_name), int(p))
            for t in assignment.topic_partitions
            for p in t.partitions
        )
    )


def _consumer_group(group: Any, node_id: int) -> GroupDescription:
    return GroupDescription(
        str(group.group_id),
        str(group.group_state),
        CONSUMER_PROTOCOL,
        str(group.assignor_name),
        tuple(
            MemberDescription(
                str(m.member_id),
                m.instance_id,
                str(m.client_id),
                str(m.client_host),
                _partitions(m.assignment),
                _partitions(m.target_assignment),
                int(m.member_epoch),
            )
            for m in group.members
        ),
        node_id,
        "consumer",
        int(group.group_epoch),
        int(group.assignment_epoch),
    )


def _group(group: Any, node_id: int) -> GroupDescription:
    consumer = group.protocol_type == CONSUMER_PROTOCOL
    return GroupDescription(
        str(group.group_id),
        str(group.group_state),
        str(group.protocol_type),
        str(group.protocol_data),
        tuple(
            MemberDescription(
                str(m.member_id),
                getattr(m, "group_instance_id", None),
                str(m.client_id),
                str(m.client_host),
                decode_assignment(bytes(m.member_assignment)) if consumer else (),
            )
            for m in group.members
        ),
        node_id,
    )


async def list_group_offsets(
    cluster: Cluster, group_id: str, *, require_stable: bool = False
) -> dict[TopicPartition, int]:
    """The group's committed offsets (the next offset to read). `require_stable` waits for
    pending transactional commits (KIP-447): UNSTABLE_OFFSET_COMMIT while one is open."""
    return await at_coordinator(
        cluster, group_id, lambda connection: _fetch_offsets(connection, group_id, require_stable)
    )


async def _fetch_offsets(
    connection: BrokerConnection, group_id: str, require_stable: bool
) -> dict[TopicPartition, int]:
    version = connection.version_for(ApiKey.OFFSET_FETCH, max_version=LAST_OFFSET_FETCH_WITH_NAMES)
    answer = await connection.request(
        ApiKey.OFFSET_FETCH,
        {
            "group_id": group_id,
            "topics": None,
            "require_stable": require_stable,
            "groups": [{"group_id": group_id, "topics": None}],
        },
        version=version,
    )
    groups = getattr(answer, "groups", None)
    entry: Any = groups[0] if groups else answer
    raise_for(entry.error_code, None, f"group {group_id}")
    offsets = {}
    for topic in entry.topics:
        for partition in topic.partitions:
            raise_for(partition.error_code, None, f"{topic.name}-{partition.partition_index}")
            if partition.committed_offset >= 0:
                offsets[TopicPartition(topic.name, partition.partition_index)] = int(
                    partition.committed_offset
                )
    return offsets


async def alter_group_offsets(
    cluster: Cluster, group_id: str, offsets: Mapping[TopicPartition, int]
) -> None:
    """Commits offsets for a group without members (a "simple" commit: generation -1); a group
    with members answers UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION."""
    topics: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for tp, offset in sorted(offsets.items()):
        topics[tp.topic].append((tp.partition, offset))
    topic_ids = {topic: (await cluster.topic(topic)).topic_id for topic in topics}  # v10 wants ids
    await at_coordinator(
        cluster, group_id, lambda connection: _commit(connection, group_id, topics, topic_ids)
    )


async def _commit(
    connection: BrokerConnection,
    group_id: str,
    topics: Mapping[str, list[tuple[int, int]]],
    topic_ids: Mapping[str, Any],
) -> None:
    answer = await connection.request(
        ApiKey.OFFSET_COMMIT,
        {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time": -1,
            "topics": [
                {
                    "name": topic,
                    "topic_id": topic_ids[topic],
                    "partitions": [
                        {
                            "partition_index": partition,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                        for partition, offset in partitions
                    ],
                }
                for topic, partitions in topics.items()
            ],
        },
    )
    names = {topic_id: name for name, topic_id in topic_ids.items()}
    for topic in answer.topics:
        name = getattr(topic, "name", None) or names.get(getattr(topic, "topic_id", None), "?")
        for partition in topic.partitions:
            raise_for(partition.error_code, None, f"{name}-{partition.partition_index}")


async def delete_groups(cluster: Cluster, group_ids: Iterable[str]) -> None:
    """Deletes empty groups with their offsets; NON_EMPTY_GROUP while members remain."""
    for group_id in dict.fromkeys(group_ids):
        await at_coordinator(cluster, group_id, functools.partial(_delete_group, group_id=group_id))


async def _delete_group(connection: BrokerConnection, group_id: str) -> None:
    answer = await connection.request(ApiKey.DELETE_GROUPS, {"groups_names": [group_id]})
    for result in answer.results:
        raise_for(result.error_code, None, f"group {result.group_id}")


async def delete_group_offsets(
    cluster: Cluster, group_id: str, partitions: Iterable[TopicPartition]
) -> None:
    """Removes committed offsets of partitions the group no longer consumes (OffsetDelete);
    GROUP_SUBSCRIBED_TO_TOPIC while a member is subscribed to the topic."""
    for error in (await delete_group_offsets_by_partition(cluster, group_id, partitions)).values():
        if error is not None:
            raise error


async def delete_group_offsets_by_partition(
    cluster: Cluster, group_id: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, KafkaError | None]:
    """OffsetDelete with each partition's outcome (None: deleted), for tools that report them
    all; a group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP...) is raised."""
    topics: dict[str, list[int]] = defaultdict(list)
    for tp in dict.fromkeys(partitions):
        topics[tp.topic].append(tp.partition)
    return await at_coordinator(
        cluster, group_id, lambda connection: _delete_offsets(connection, group_id, topics)
    )


async def _delete_offsets(
    connection: BrokerConnection, group_id: str, topics: Mapping[str, list[int]]
) -> dict[TopicPartition, KafkaError | None]:
    answer = await connection.request(
        ApiKey.OFFSET_DELETE,
        {
            "group_id": group_id,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": p} for p in indexes]}
                for topic, indexes in topics.items()
            ],
        },
    )
    raise_for(answer.error_code, None, f"group {group_id}")
    results: dict[TopicPartition, KafkaError | None] = {}
    for topic in answer.topics:
        for partition in topic.partitions:
            tp = TopicPartition(str(topic.name), int(partition.partition_index))
            results[tp] = (
                error_for(partition.error_code, None, str(tp)) if partition.error_code else None
            )
    return results
