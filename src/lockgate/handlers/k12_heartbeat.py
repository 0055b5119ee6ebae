"""Heartbeat (key 12), versions 0–4.

Behaviour: keeps the member's session alive. UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
ILLEGAL_GENERATION, and REBALANCE_IN_PROGRESS while the group is rebalancing (the member
must rejoin).
Version notes: v3 group instance id; v4 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey


@handles(ApiKey.HEARTBEAT, 0, 4)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    error = ctx.broker.groups.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        field(request, "group_instance_id", None),
    )
    return {"throttle_time": 0, "error_code": error}
