"""ConsumerGroupDescribe (key 69), versions 0–1.

Behaviour: for each consumer-protocol group (KIP-848): state (Empty, Assigning, Reconciling,
Stable), group epoch, target assignment epoch, the assignor in use, and every member with its
epoch, instance and rack ids, client id and host, subscription (names or regex), current
assignment and target assignment (topic ids and names).
- GROUP_ID_NOT_FOUND for an unknown group or a classic one ("not a consumer group");
  NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as the other group APIs.
- Authorization: DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED; DESCRIBE on every
  topic its members subscribe to or are assigned, else TOPIC_AUTHORIZATION_FAILED; KIP-430:
  with IncludeAuthorizedOperations, the bitfield of the group operations allowed.
Version notes: v1 adds MemberType (1: a consumer-protocol member, 0: a classic member of a
mixed group).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.group.consumer_group import ConsumerGroup, ConsumerMember
from lockgate.handlers.group_common import described, found, wire_assignment
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize, authorized_operations

CONSUMER_MEMBER_TYPE = 1
CLASSIC_MEMBER_TYPE = 0


def _member(ctx: RequestContext, group: ConsumerGroup, m: ConsumerMember) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "instance_id": m.instance_id,
        "rack_id": m.rack_id,
        "member_epoch": m.member_epoch,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "subscribed_topic_names": list(m.subscribed_topic_names),
        "subscribed_topic_regex": m.subscribed_topic_regex,
        "assignment": wire_assignment(ctx, m.assigned, names=True),
        "target_assignment": wire_assignment(ctx, group.target.get(m.member_id, {}), names=True),
        "member_type": CLASSIC_MEMBER_TYPE if m.classic is not None else CONSUMER_MEMBER_TYPE,
    }


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    coordinator = ctx.services.groups
    entries = []
    for group_id in request.group_ids:
        entry = described(group_id)
        entries.append(entry)
        if not authorize(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            entry["error_code"] = ErrorCode.group_authorization_failed
            continue
        view = found(entry, coordinator.describe_consumer(group_id))
        if view is None:
            continue
        group = view.group
        denied = sorted(
            t
            for t in view.topics
            if not authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, t, log_denied=False)
        )
        if denied:
            entry["error_code"] = ErrorCode.topic_authorization_failed
            entry["error_message"] = "The described group uses topics that the client is not "
            entry["error_message"] += "authorized to describe."
            continue
        if request.include_authorized_operations:
            entry["authorized_operations"] = authorized_operations(
                ctx, ResourceType.GROUP, group_id
            )
        entry.update(
            group_state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=view.assignor,
            members=[_member(ctx, group, m) for m in group.members.values()],
        )
    return {"throttle_time": 0, "groups": entries}
