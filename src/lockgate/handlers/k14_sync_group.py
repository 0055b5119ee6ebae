"""SyncGroup (key 14), versions 0–5.

Behaviour: the leader's assignments are stored and every member waiting in the generation
gets its own; followers wait for the leader. UNKNOWN_MEMBER_ID (also for an instance id the
group does not know, even with a known member id, as Kafka 4.4), FENCED_INSTANCE_ID (another
member's instance id), ILLEGAL_GENERATION (another generation), REBALANCE_IN_PROGRESS (a new
rebalance began), INCONSISTENT_GROUP_PROTOCOL (v5 protocol type/name differ from the group's).
A classic member of a consumer-protocol group (KIP-848 mixed groups) gets its current
assignment from the server-side assignor at once (ILLEGAL_GENERATION unless it names its
member epoch).
- Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED.
Version notes: v3 group instance id; v4 flexible; v5 protocol type/name.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.SYNC_GROUP, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "protocol_type": None,
            "protocol_name": None,
            "assignment": b"",
        }
    answer = await ctx.services.groups.sync(
        request.group_id,
        request.generation_id,
        request.member_id,
        field(request, "group_instance_id", None),
        field(request, "protocol_type", None),
        field(request, "protocol_name", None),
        {a.member_id: a.assignment for a in request.assignments},
    )
    return {
        "throttle_time": 0,
        "protocol_type": None,
        "protocol_name": None,
        "assignment": b"",
        **answer,
    }
