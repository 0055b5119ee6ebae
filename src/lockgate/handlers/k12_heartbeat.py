"""Heartbeat (key 12), versions 0–4.

Behaviour: keeps the member's session alive. UNKNOWN_MEMBER_ID (also for an instance id the
group does not know, even with a known member id, as Kafka 4.4), FENCED_INSTANCE_ID (another
member's instance id), ILLEGAL_GENERATION, and REBALANCE_IN_PROGRESS while the group is
rebalancing (the member must rejoin). A classic member of a consumer-protocol group (KIP-848
mixed groups) gets REBALANCE_IN_PROGRESS until it has rejoined up to its target assignment.
- Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED.
Version notes: v3 group instance id; v4 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.HEARTBEAT, 0, 4)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    error = ctx.services.groups.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        field(request, "group_instance_id", None),
    )
    return {"throttle_time": 0, "error_code": error}
