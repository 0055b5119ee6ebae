"""ShareGroupDescribe (key 77), version 1.

Behaviour: for each share group (KIP-932): state (Empty, Stable), group epoch, target
assignment epoch, the assignor (`simple`), and every member with its rack id, epoch, client id
and host, subscribed topic names and current assignment (topic ids and names).
- INVALID_GROUP_ID for an empty group id (reported as ""); GROUP_ID_NOT_FOUND for an unknown
  group or one of another type ("not a share group"); NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS as the other group APIs. Groups are answered in Kafka's order:
  those not authorized, then empty ids, then the others.
- Authorization: DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED; DESCRIBE on every
  topic its members are assigned, else TOPIC_AUTHORIZATION_FAILED; KIP-430: with
  IncludeAuthorizedOperations, the bitfield of the group operations allowed.
Version notes: v1 only (v0 was Kafka 4.0's early access, removed in 4.1).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.group.share_group import ShareMember
from lockgate.handlers.group_common import described, found, wire_assignment
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize, authorized_operations

ASSIGNOR = "simple"


def _member(ctx: RequestContext, m: ShareMember) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "rack_id": m.rack_id,
        "member_epoch": m.member_epoch,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "subscribed_topic_names": list(m.subscribed_topic_names),
        "assignment": wire_assignment(ctx, m.assigned, names=True),
    }


@handles(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    coordinator = ctx.services.groups
    # Kafka's order: groups not authorized, then empty ids, then the others (in the request's
    # order; Kafka's, by coordinator partition in its hash map's order, only differs across
    # partitions)
    denied = [
        described(g, ErrorCode.group_authorization_failed)
        for g in request.group_ids
        if not authorize(ctx, Operation.DESCRIBE, ResourceType.GROUP, g)
    ]
    allowed = [g for g in request.group_ids if authorize(ctx, Operation.DESCRIBE,
               ResourceType.GROUP, g, log_denied=False)]  # fmt: skip
    invalid = [described("", ErrorCode.invalid_group_id) for g in allowed if not g]
    named = [g for g in allowed if g]
    entries = []
    for group_id in named:
        entry = described(group_id)
        entries.append(entry)
        view = found(entry, coordinator.describe_share(group_id))
        if view is None:
            continue
        assigned = {t for m in view.members.values() for t in m.assigned}
        if any(
            not authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t, log_denied=False)
            for t in sorted(assigned)
        ):
            entry["error_code"] = ErrorCode.topic_authorization_failed
            entry["error_message"] = (
                "The group has described topic(s) that the client is not authorized to describe."
            )
            continue
        if request.include_authorized_operations:
            entry["authorized_operations"] = authorized_operations(
                ctx, ResourceType.GROUP, group_id
            )
        entry.update(
            group_state=view.state,
            group_epoch=view.group_epoch,
            assignment_epoch=view.assignment_epoch,
            assignor_name=ASSIGNOR,
            members=[_member(ctx, m) for _, m in sorted(view.members.items())],
        )
    return {"throttle_time": 0, "groups": denied + invalid + entries}
