"""ListGroups (key 16), versions 0–5.

Behaviour: every group with its protocol type; v4 filters by state names, v5 by group type
("classic", or "consumer" for the consumer group protocol of KIP-848, whose states are Empty,
Assigning, Reconciling and Stable).
- Authorization: DESCRIBE on the cluster lists every group; without it, only the groups the
  principal may DESCRIBE.
Version notes: v3 flexible; v4 states filter; v5 types filter and group type.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize, filter_authorized


@handles(ApiKey.LIST_GROUPS, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    groups = ctx.services.groups.list_groups(
        {s.lower() for s in field(request, "states_filter", ())},
        {t.lower() for t in field(request, "types_filter", ())},
    )
    if isinstance(groups, ErrorCode):
        return {"throttle_time": 0, "error_code": groups, "groups": []}
    listed = [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type,
            "group_state": g.state,
            "group_type": g.group_type,
        }
        for g in groups
    ]
    # DESCRIBE on the cluster lists every group; else only those the principal may DESCRIBE
    if ctx.services.authorizer is not None and not authorize(
        ctx, Operation.DESCRIBE, ResourceType.CLUSTER, log_denied=False
    ):
        listed = filter_authorized(
            ctx, Operation.DESCRIBE, ResourceType.GROUP, listed, lambda g: str(g["group_id"])
        )
    return {"throttle_time": 0, "error_code": 0, "groups": listed}
