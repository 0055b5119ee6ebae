"""DeleteGroups (key 42), versions 0–2.

Behaviour: deletes empty groups and their committed offsets (tombstones in
__consumer_offsets). A group with members: NON_EMPTY_GROUP; unknown: GROUP_ID_NOT_FOUND.
The group's configs (ConfigResource GROUP) stay, as in Kafka 4.4, which keeps them apart.
- Authorization: DELETE on the group, else GROUP_AUTHORIZATION_FAILED for it.
Version notes: v2 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    results = []
    for group_id in request.groups_names:
        if not authorize(ctx, Operation.DELETE, ResourceType.GROUP, group_id):
            error = ErrorCode.group_authorization_failed
        else:
            error = await ctx.services.groups.delete_group(group_id)
        results.append({"group_id": group_id, "error_code": error})
    return {"throttle_time": 0, "results": results}
