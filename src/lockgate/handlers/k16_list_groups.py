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
    coordinator = ctx.services.groups
    if not coordinator.loaded:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.coordinator_load_in_progress,
            "groups": [],
        }
    states = {s.lower() for s in field(request, "states_filter", ())}
    types = {t.lower() for t in field(request, "types_filter", ())}
    listed = []
    for g in sorted(coordinator.groups.values(), key=lambda g: g.group_id):
        state = g.consumer.state.value if g.consumer is not None else g.state.value
        group_type = "consumer" if g.consumer is not None else "classic"
        if (not states or state.lower() in states) and (not types or group_type in types):
            listed.append(
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": state,
                    "group_type": group_type,
                }
            )
    # DESCRIBE on the cluster lists every group; else only those the principal may DESCRIBE
    if ctx.services.authorizer is not None and not authorize(
        ctx, Operation.DESCRIBE, ResourceType.CLUSTER, log_denied=False
    ):
        listed = filter_authorized(
            ctx, Operation.DESCRIBE, ResourceType.GROUP, listed, lambda g: str(g["group_id"])
        )
    return {"throttle_time": 0, "error_code": 0, "groups": listed}
