"""ConsumerGroupHeartbeat (key 68), versions 0–1.

Behaviour: the consumer group protocol (KIP-848, docs/consumer-groups.md). A member joins with
epoch 0, heartbeats with the epoch it was given, leaves with -1 (a static member with -2, keeping
its assignment until its session expires). The answer carries the member epoch, the heartbeat
interval and, when it changed (or the request was a full one), the member's assignment by topic
id, computed by the server-side assignor and handed out incrementally.
- INVALID_REQUEST: empty group or member id, an empty instance id, a join without rebalance
  timeout or subscription or with owned partitions, epoch -2 without instance id.
- UNSUPPORTED_ASSIGNOR (not in group.consumer.assignors), INVALID_REGULAR_EXPRESSION.
- GROUP_ID_NOT_FOUND: an unknown group with a non-zero epoch, or a classic group with members.
- UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH (epoch ahead, or behind other than the previous epoch
  with a subset of the assignment), UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID,
  GROUP_MAX_SIZE_REACHED (group.consumer.max.size).
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as the other group APIs.
- A member asked to revoke partitions is removed when its rebalance timeout passes: counted
  from the heartbeat that asked it, again in full at a new epoch that asks for more, and
  again in full when the coordinator loads the group (restart, failover), as Kafka 4.4,
  which does not persist the deadline. A static member that restarts (a new member id, its
  instance id, epoch 0) takes its predecessor's place and assignment as a new member would:
  previous epoch 0 in its records, as Kafka 4.4.
- Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED; DESCRIBE on every
  subscribed topic name, else TOPIC_AUTHORIZATION_FAILED naming them.
Version notes: v0 lets the coordinator choose the member id (an empty one on join); v1 requires
the client's own member id (a UUID) and adds SubscribedTopicRegex.
"""

from __future__ import annotations

import uuid
from typing import Any

from lockgate.coordinator.group.assignors import Assignment
from lockgate.coordinator.group.consumer_group import JOIN_EPOCH, HeartbeatRequest
from lockgate.handlers.common import field, millis
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


def _owned(ctx: RequestContext, topics: Any) -> Assignment | None:
    if topics is None:
        return None
    by_id = ctx.services.topics.by_id
    owned: dict[str, frozenset[int]] = {}
    for topic in topics:
        record = by_id.get(topic.topic_id)
        if record is not None:  # a deleted topic's partitions are owned by nobody
            owned[record.name] = frozenset(int(p) for p in topic.partitions)
    return owned


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    def refused(code: ErrorCode, message: str | None = None) -> HandlerResult:
        return heartbeat_refused(code, message, request.member_id or None, request.member_epoch)

    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return refused(ErrorCode.group_authorization_failed)
    names = request.subscribed_topic_names
    denied = unauthorized_subscription(ctx, names)
    if denied:
        return refused(ErrorCode.topic_authorization_failed, denied)
    member_id = request.member_id
    if ctx.api_version == 0 and not member_id and request.member_epoch == JOIN_EPOCH:
        member_id = str(uuid.uuid4())  # v0: the coordinator names new members
    rebalance_timeout = millis(request.rebalance_timeout)
    answer = await ctx.services.groups.consumer.heartbeat(
        HeartbeatRequest(
            group_id=request.group_id,
            member_id=member_id,
            member_epoch=request.member_epoch,
            instance_id=request.instance_id,
            rack_id=request.rack_id,
            rebalance_timeout_ms=rebalance_timeout,
            subscribed_topic_names=tuple(names) if names is not None else None,
            subscribed_topic_regex=field(request, "subscribed_topic_regex", None),
            server_assignor=request.server_assignor,
            owned=_owned(ctx, request.topic_partitions),
            client_id=ctx.client_id or "",
            client_host=ctx.peer.rsplit(":", 1)[0],
        )
    )
    if answer.error:
        return refused(answer.error, answer.message)
    return accepted(ctx, answer)
