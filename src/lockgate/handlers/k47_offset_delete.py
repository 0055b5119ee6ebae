"""OffsetDelete (key 47), version 0.

Behaviour: deletes a group's committed offsets for partitions of topics no member is
subscribed to (GROUP_SUBSCRIBED_TO_TOPIC otherwise); unknown group: GROUP_ID_NOT_FOUND.
- Authorization: DELETE on the group (GROUP_AUTHORIZATION_FAILED for the request), READ on
  each topic (TOPIC_AUTHORIZATION_FAILED for its partitions, whose offsets stay).
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.OFFSET_DELETE, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if not authorize(ctx, Operation.DELETE, ResourceType.GROUP, request.group_id):
        return {
            "error_code": ErrorCode.group_authorization_failed,
            "throttle_time": 0,
            "topics": [],
        }
    readable = {
        t.name for t in request.topics if authorize(ctx, Operation.READ, ResourceType.TOPIC, t.name)
    }
    wanted = [
        (t.name, p.partition_index)
        for t in request.topics
        if t.name in readable
        for p in t.partitions
    ]
    error, results = await ctx.services.groups.delete_offsets(request.group_id, wanted)
    for t in request.topics:
        if t.name not in readable:
            for p in t.partitions:
                results[(t.name, p.partition_index)] = ErrorCode.topic_authorization_failed
    topics = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": results.get((t.name, p.partition_index), error),
                }
                for p in t.partitions
            ],
        }
        for t in request.topics
    ]
    return {"error_code": error, "throttle_time": 0, "topics": topics if not error else []}
