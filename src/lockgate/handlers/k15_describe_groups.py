"""DescribeGroups (key 15), versions 0–6.

Behaviour: state, protocol type and name, and members (id, instance id, client id and host,
metadata and assignment) of each group; an unknown group is reported as Dead with no members
(v0–5) or GROUP_ID_NOT_FOUND (v6, like Kafka 4). A consumer-protocol group (KIP-848) is
described as Kafka 4 does: Dead with no members (v0–5), GROUP_ID_NOT_FOUND "is not a classic
group" (v6); ConsumerGroupDescribe describes it. Before its offsets partition is loaded:
COORDINATOR_LOAD_IN_PROGRESS; coordinated by another broker (cluster mode): NOT_COORDINATOR.
- Authorization: DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED for it; KIP-430:
  asked with IncludeAuthorizedOperations, the bitfield of the group operations allowed.
Version notes: v3 authorized operations (not computed: -2147483648); v4 instance ids; v5
flexible; v6 error message and GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.group.state import GroupState
from lockgate.coordinator.group.views import NotFound
from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize, authorized_operations

NO_AUTHORIZED_OPERATIONS = -(2**31)


@handles(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    coordinator = ctx.services.groups
    described = []
    include_operations = field(request, "include_authorized_operations", False)
    for group_id in request.groups:
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": NO_AUTHORIZED_OPERATIONS,
        }
        if not authorize(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            entry["error_code"] = ErrorCode.group_authorization_failed
            described.append(entry)
            continue
        if include_operations:
            entry["authorized_operations"] = authorized_operations(
                ctx, ResourceType.GROUP, group_id
            )
        group = coordinator.describe_classic(group_id)
        if isinstance(group, ErrorCode):
            entry["error_code"] = group
        elif isinstance(group, NotFound):  # before v6: Dead, with no members
            if ctx.api_version >= 6:
                entry["error_code"] = ErrorCode.group_id_not_found
                entry["error_message"] = group.message
        else:
            entry["group_state"] = group.state.value
            entry["protocol_type"] = group.protocol_type
            entry["protocol_data"] = group.protocol or ""
            entry["members"] = [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata_for(group.protocol),
                    "member_assignment": m.assignment,
                }
                for m in group.members.values()
            ]
        described.append(entry)
    return {"throttle_time": 0, "groups": described}
