"""ShareGroupHeartbeat (key 76), version 1.

Behaviour: share group membership (KIP-932, docs/share-groups.md "Membership"). A member names
itself (a client-made member id of at most 36 characters), joins with epoch 0 and its topic
names, heartbeats with the epoch it was given, leaves with -1. The answer carries the member
epoch, the heartbeat interval and, when it changed (or on a join or a request with a
subscription), the member's assignment by topic id, computed by the `simple` assignor over the
share partitions already initialized: a topic's partitions are initialized after the heartbeat
that first subscribes to them, and assigned from a later one.
- Member ids are the client's; partitions are assigned once their share state is initialized
  (InitializeShareGroupState through the persister, after the heartbeat that subscribes).
Errors in Kafka 4.4's order:
- GROUP_AUTHORIZATION_FAILED: no READ on the group.
- INVALID_REQUEST: member id empty or longer than 36 characters ("Invalid member id").
- TOPIC_AUTHORIZATION_FAILED: a subscribed topic name without DESCRIBE.
- INVALID_REQUEST: empty group id, empty rack id, a join without topic names, epoch < -1.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as the other group APIs.
- Leave: GROUP_ID_NOT_FOUND (no such share group), UNKNOWN_MEMBER_ID.
- GROUP_ID_NOT_FOUND: an unknown group with a non-zero epoch, or a group of another type.
- GROUP_MAX_SIZE_REACHED (group.share.max.size) for a new member of a full group.
- UNKNOWN_MEMBER_ID (unknown member, epoch not 0), FENCED_MEMBER_EPOCH (epoch ahead, or behind
  other than the previous epoch).
Version notes: v1 only (v0 was Kafka 4.0's early access, removed in 4.1).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.group.share_group import MAX_MEMBER_ID_CHARS, ShareHeartbeatRequest
from lockgate.handlers.group_common import (
    accepted,
    heartbeat_refused,
    unauthorized_subscription,
)
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    def refused(code: ErrorCode, message: str | None = None) -> HandlerResult:
        return heartbeat_refused(code, message, None, 0)

    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return refused(ErrorCode.group_authorization_failed)
    member_id = request.member_id
    if not member_id or len(member_id) > MAX_MEMBER_ID_CHARS:
        return refused(ErrorCode.invalid_request, "Invalid member id")
    names = request.subscribed_topic_names
    denied = unauthorized_subscription(ctx, names)
    if denied:
        return refused(ErrorCode.topic_authorization_failed, denied)
    answer = await ctx.services.groups.share.heartbeat(
        ShareHeartbeatRequest(
            group_id=request.group_id,
            member_id=member_id,
            member_epoch=request.member_epoch,
            rack_id=request.rack_id,
            subscribed_topic_names=tuple(names) if names is not None else None,
            client_id=ctx.client_id or "",
            client_host=ctx.peer.rsplit(":", 1)[0],
        )
    )
    if answer.error:
        return refused(answer.error, answer.message)
    return accepted(ctx, answer)
