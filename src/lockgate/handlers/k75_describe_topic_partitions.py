"""DescribeTopicPartitions (key 75), version 0.

Behaviour (as Kafka 4's handler, which the Java AdminClient's describeTopics uses):
- An empty topic list = every topic the session may DESCRIBE; otherwise the named topics.
  Topics are answered in name order; partitions with leader, leader epoch, replicas, ISR,
  offline replicas and empty eligible-leader-replica lists (lockgate has no ELR, KIP-966).
- Paging: at most min(ResponsePartitionLimit, max.request.partition.size.limit), at least 1,
  partitions per response. The Cursor (topic, partition) says where to start; when the limit
  cuts a topic, NextCursor points at its next partition; when it is used up exactly at a topic's
  end, NextCursor points at partition 0 of the next topic. Topics named before the cursor's
  topic are skipped; a cursor topic missing from the named list, or a negative cursor partition,
  gets INVALID_REQUEST for every named topic.
- A named topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an
  illegal name); one the session may not DESCRIBE: TOPIC_AUTHORIZATION_FAILED with the zero
  topic id, listed after the others (its existence not disclosed). An all-topics request just
  leaves those out.
- KIP-430: every topic answered (but the unauthorized ones) carries the bitfield of the
  operations the session may perform on it (the request has no flag for it: Kafka always fills
  it in).
- A partition without a leader: LEADER_NOT_AVAILABLE with leader -1; led by a broker without
  the request's listener: LISTENER_NOT_FOUND with leader -1.
Version notes: v0 only (flexible).
"""

from __future__ import annotations

import uuid
from typing import Any

from lockgate.cluster.membership import on_listener
from lockgate.cluster.metadata import NO_LEADER, PartitionState, TopicRecord
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize, authorized_operations
from lockgate.topics.directory import validate_topic_name

ZERO_ID = uuid.UUID(int=0)
NO_AUTHORIZED_OPERATIONS = -(2**31)


def _topic(code: ErrorCode, name: str, topic_id: uuid.UUID, internal: bool) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": internal,
        "partitions": [],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def partition_entries(
    ctx: RequestContext, record: TopicRecord, start: int, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """The partitions from `start`, at most `limit`, and the next index (-1 at the end)."""
    membership = ctx.services.membership
    registered = membership.brokers()
    alive = {b.node_id for b in registered}
    reachable = {b.node_id for b in on_listener(registered, ctx.session.listener)}
    end = min(record.partitions, start + limit)
    entries = []
    for index in range(start, end):
        state = membership.partition(record.name, index) or PartitionState((), NO_LEADER, -1, ())
        error, leader = ErrorCode.none, state.leader
        if state.leader == NO_LEADER:
            error = ErrorCode.leader_not_available
        elif state.leader not in reachable:
            error = (
                ErrorCode.listener_not_found
                if state.leader in alive
                else ErrorCode.leader_not_available
            )
            leader = NO_LEADER
        entries.append(
            {
                "error_code": error,
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": state.leader_epoch,
                "replica_nodes": state.replicas,
                "isr_nodes": state.isr,
                "eligible_leader_replicas": (),
                "last_known_elr": (),
                "offline_replicas": tuple(
                    r for r in state.replicas if r not in alive or state.leader == NO_LEADER
                ),
            }
        )
    return entries, (end if end < record.partitions else -1)


def _missing(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except KafkaProtocolError as exc:
        return ErrorCode(exc.code)
    return ErrorCode.unknown_topic_or_partition


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    known = ctx.services.topics.topics
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    named = {topic.name for topic in request.topics}
    if cursor is not None and (
        cursor.partition_index < 0 or (not fetch_all and cursor_topic not in named)
    ):
        return {
            "throttle_time": 0,
            "topics": [
                _topic(ErrorCode.invalid_request, name, ZERO_ID, False) for name in sorted(named)
            ],
            "next_cursor": None,
        }
    candidates = sorted(n for n in (known if fetch_all else named) if n >= cursor_topic)
    denied: list[dict[str, Any]] = []
    allowed: list[str] = []
    for name in candidates:
        if authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name, log_denied=not fetch_all):
            allowed.append(name)
        elif not fetch_all:
            denied.append(_topic(ErrorCode.topic_authorization_failed, name, ZERO_ID, False))
    broker_limit = ctx.services.config.integer("max.request.partition.size.limit")
    limit = max(min(broker_limit, request.response_partition_limit), 1)
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in allowed:
        if limit == 0:  # used up at a topic boundary: the next page starts with this topic
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        record = known.get(name)
        if record is None:
            if not fetch_all:
                missing = _topic(_missing(name), name, ZERO_ID, False)
                missing["topic_authorized_operations"] = authorized_operations(
                    ctx, ResourceType.TOPIC, name
                )
                topics.append(missing)
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        partitions, following = partition_entries(ctx, record, start, limit)
        entry = _topic(ErrorCode.none, name, record.topic_id, record.internal)
        entry["partitions"] = partitions
        entry["topic_authorized_operations"] = authorized_operations(ctx, ResourceType.TOPIC, name)
        topics.append(entry)
        if following != -1:
            next_cursor = {"topic_name": name, "partition_index": following}
            break
        limit -= len(partitions)
    return {"throttle_time": 0, "topics": topics + denied, "next_cursor": next_cursor}
