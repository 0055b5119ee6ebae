"""LeaveGroup (key 13), versions 0–5.

Behaviour: removes the members and rebalances the rest. v0–2 name one member id; v3+ a batch
of members by id or group instance id, each answered on its own with the member id it was
named by (an empty one for an administrator's removal by instance id), as Kafka 4.4:
UNKNOWN_MEMBER_ID (an unknown member id, or an instance id the group does not know),
FENCED_INSTANCE_ID (the instance belongs to another member id). A member id still pending
(told MEMBER_ID_REQUIRED) leaves without error, and, as any departure, rebalances the group.
In a consumer-protocol group (KIP-848 mixed groups) the classic members leave it and a new
group epoch begins.
- Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED.
Version notes: v3 batched; v4 flexible; v5 reason.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.LEAVE_GROUP, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    groups = ctx.services.groups
    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        denied = ErrorCode.group_authorization_failed
        return {"throttle_time": 0, "error_code": denied, "members": []}
    if ctx.api_version < 3:
        error, answers = groups.leave(request.group_id, [(request.member_id, None)])
        if not error and answers:
            error = answers[0]["error_code"]
        return {"throttle_time": 0, "error_code": error, "members": []}
    error, answers = groups.leave(
        request.group_id, [(m.member_id, m.group_instance_id) for m in request.members]
    )
    return {"throttle_time": 0, "error_code": error, "members": answers}
