"""AlterShareGroupOffsets (key 91), version 0.

Behaviour: resets share partitions' start offsets (SPSO): the share group must be Empty (a
missing one is created, Empty); its partitions are marked initializing, then initialized at the
given start offsets with state epoch = the group epoch through the persister.
- GROUP_AUTHORIZATION_FAILED (no READ on the group), INVALID_GROUP_ID (empty id),
  GROUP_ID_NOT_FOUND (a group of another type), NON_EMPTY_GROUP, NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS: top level, with no topics.
- Per partition: TOPIC_AUTHORIZATION_FAILED (no READ on the topic), UNKNOWN_TOPIC_OR_PARTITION
  (no such topic, or a partition index past its count), or the persister's error.
Version notes: v0 flexible (the only version).
"""

from __future__ import annotations

import uuid
from typing import Any

from lockgate.coordinator.group.share_offsets import AlterTopic, PartitionError, message
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

ZERO_UUID = uuid.UUID(int=0)


def _topic(answer: AlterTopic) -> dict[str, Any]:
    return {
        "topic_name": answer.name,
        "topic_id": answer.topic_id or ZERO_UUID,
        "partitions": [
            {"partition_index": p.partition, "error_code": p.error, "error_message": p.message}
            for p in answer.partitions
        ],
    }


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    def refused(code: ErrorCode, text: str | None = None) -> HandlerResult:
        return {"throttle_time": 0, "error_code": code, "error_message": text, "responses": []}

    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return refused(ErrorCode.group_authorization_failed)
    topics = ctx.services.topics.topics
    rejected: list[AlterTopic] = []
    wanted = []
    for topic in request.topics:
        if not authorize(ctx, Operation.READ, ResourceType.TOPIC, topic.topic_name):
            code = ErrorCode.topic_authorization_failed
        elif topic.topic_name not in topics:
            code = ErrorCode.unknown_topic_or_partition
        else:
            wanted.append((topic.topic_name, [(p.partition_index, p.start_offset)
                                              for p in topic.partitions]))  # fmt: skip
            continue
        known = topics.get(topic.topic_name)
        errors = [PartitionError(p.partition_index, code, message(code)) for p in topic.partitions]
        rejected.append(AlterTopic(topic.topic_name, known.topic_id if known else None, errors))
    result = await ctx.services.groups.share_offsets.alter(request.group_id, wanted)
    if result.error:
        return refused(result.error, result.message)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "responses": [_topic(t) for t in rejected + list(result.topics)],
    }
