"""DescribeShareGroupOffsets (key 90), versions 0–1.

Behaviour: for each share group, each share partition's start offset (the share-partition
start offset, SPSO) and leader epoch as the share coordinator holds them, and (v1) its lag:
high watermark minus start offset minus delivery complete count (-1 when either is unknown).
- Topics null: every initialized share partition of the group; an empty list: no topics.
- A topic that does not exist: its partitions with start offset -1 and no error (zero topic
  id); a partition with no state: -1, leader epoch 0, lag -1. The group need not exist.
- GROUP_AUTHORIZATION_FAILED for a group without DESCRIBE; named topics without DESCRIBE answer
  TOPIC_AUTHORIZATION_FAILED per partition (zero topic id, start offset -1, lag -1), listed
  last; with topics null, topics without DESCRIBE are left out. NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS per group.
Version notes: v1 adds Lag (KIP-1226).
"""

from __future__ import annotations

import uuid
from typing import Any

from lockgate.coordinator.group.share_offsets import TOPIC_DENIED, TopicOffsets
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

ZERO_UUID = uuid.UUID(int=0)


def _topic(answer: TopicOffsets) -> dict[str, Any]:
    return {
        "topic_name": answer.name,
        "topic_id": answer.topic_id or ZERO_UUID,
        "partitions": [
            {
                "partition_index": p.partition,
                "start_offset": p.start_offset,
                "leader_epoch": p.leader_epoch,
                "lag": p.lag,
                "error_code": p.error,
                "error_message": p.message,
            }
            for p in answer.partitions
        ],
    }


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    offsets = ctx.services.groups.share_offsets
    groups = []
    for group in request.groups:
        entry: dict[str, Any] = {
            "group_id": group.group_id,
            "topics": [],
            "error_code": 0,
            "error_message": None,
        }
        groups.append(entry)
        if not authorize(ctx, Operation.DESCRIBE, ResourceType.GROUP, group.group_id):
            entry["error_code"] = ErrorCode.group_authorization_failed
            continue
        if group.topics is not None and not group.topics:
            continue
        denied: list[Any] = []
        wanted: list[Any] | None = None
        if group.topics is not None:
            wanted = []
            for topic in group.topics:
                allowed = authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic.topic_name)
                (wanted if allowed else denied).append(topic)
        code, answers = await offsets.describe(
            group.group_id,
            None if wanted is None else [(t.topic_name, list(t.partitions)) for t in wanted],
        )
        if code:
            entry["error_code"] = code
            continue
        if wanted is None:  # all partitions: topics the caller may not see are left out
            answers = [
                a for a in answers
                if authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, a.name, log_denied=False)
            ]  # fmt: skip
        entry["topics"] = [_topic(a) for a in answers] + [
            {
                "topic_name": t.topic_name,
                "topic_id": ZERO_UUID,
                "partitions": [
                    {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1,
                     "error_code": ErrorCode.topic_authorization_failed,
                     "error_message": TOPIC_DENIED}
                    for p in t.partitions
                ],
            }
            for t in denied
        ]  # fmt: skip
    return {"throttle_time": 0, "groups": groups}
