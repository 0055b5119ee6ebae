"""OffsetDelete (key 47), version 0.

Behaviour: deletes a group's committed offsets for partitions of topics no member is
subscribed to (GROUP_SUBSCRIBED_TO_TOPIC otherwise); unknown group: GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey


@handles(ApiKey.OFFSET_DELETE, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, results = await ctx.broker.groups.delete_offsets(request.group_id, wanted)
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
