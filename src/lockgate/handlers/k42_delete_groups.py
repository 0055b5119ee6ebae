"""DeleteGroups (key 42), versions 0–2.

Behaviour: deletes empty groups and their committed offsets (tombstones in
__consumer_offsets). A group with members: NON_EMPTY_GROUP; unknown: GROUP_ID_NOT_FOUND.
Version notes: v2 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    results = []
    for group_id in request.groups_names:
        results.append(
            {"group_id": group_id, "error_code": await ctx.broker.groups.delete_group(group_id)}
        )
    return {"throttle_time": 0, "results": results}
