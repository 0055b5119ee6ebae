"""JoinGroup (key 11), versions 0–9 (classic protocol).

Behaviour:
- A member without an id gets one; from v4 a dynamic member is first answered
  MEMBER_ID_REQUIRED with its new id and must join again with it. Static members
  (group.instance.id, v5+) join directly; a restarted static member takes its place back and
  its old incarnation gets FENCED_INSTANCE_ID.
- The join completes when every known member has rejoined or the rebalance timeout passes
  (members that did not rejoin are removed); a new group waits
  group.initial.rebalance.delay.ms, extended by each newcomer. The leader gets every member's
  metadata for the chosen protocol (the one all members support that most prefer).
- A known member joining again with unchanged metadata during CompletingRebalance, or a
  follower doing so while Stable, gets the current generation again without a rebalance (as
  Kafka: it may have lost the answer); the leader's rejoin or new metadata starts one.
- Errors: INVALID_GROUP_ID (empty id), INVALID_SESSION_TIMEOUT (outside
  group.min/max.session.timeout.ms), INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID,
  FENCED_INSTANCE_ID, COORDINATOR_LOAD_IN_PROGRESS.
- In a consumer-protocol group with members (KIP-848 mixed groups, docs/consumer-groups.md):
  the member's subscription and owned partitions go through the server-side assignor and it
  is answered at once as a follower (no leader), its member epoch as the generation; metadata
  that is no consumer protocol subscription: INCONSISTENT_GROUP_PROTOCOL. An empty
  consumer-protocol group becomes a classic group again (its offsets stay).
- Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED.
Version notes: v1 rebalance timeout; v4 member id required; v5 group instance id; v6
flexible; v7 protocol type/name in the answer; v8 reason; v9 skip assignment (always false).
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import field, millis
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.JOIN_GROUP, 0, 9)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None if ctx.api_version >= 7 else "",
            "leader": "",
            "skip_assignment": False,
            "member_id": request.member_id,
            "members": [],
        }
    session_ms = millis(request.session_timeout)
    answer = await ctx.services.groups.join(
        request.group_id,
        request.member_id,
        field(request, "group_instance_id", None),
        request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols],
        session_ms,
        millis(field(request, "rebalance_timeout", session_ms)),
        ctx.client_id or "",
        ctx.peer.rsplit(":", 1)[0],
        ctx.api_version >= 4,
    )
    return {
        "throttle_time": 0,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None if ctx.api_version >= 7 else "",
        "leader": "",
        "skip_assignment": False,
        "members": [],
        **answer,
    }
