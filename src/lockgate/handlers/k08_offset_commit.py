"""OffsetCommit (key 8), versions 2–10.

Behaviour:
- Commits offsets for a group, durably, before answering. Generation -1 is accepted into an
  Empty group whatever member or instance id it names, and creates a group that does not
  exist. A generation >= 0 into a group that does not exist (never did, expired, deleted):
  GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before (as Kafka 4.4). Otherwise a commit
  naming a generation, member or instance must come from a current member (as Heartbeat):
  FENCED_INSTANCE_ID (another member's instance id), UNKNOWN_MEMBER_ID (an unknown member id,
  or an instance id the group does not know), ILLEGAL_GENERATION; one naming none into a
  group with members: UNKNOWN_MEMBER_ID; during CompletingRebalance: REBALANCE_IN_PROGRESS
  (commits during PreparingRebalance are allowed, as consumers commit while revoking). A
  member's accepted commit in Stable or PreparingRebalance restarts its session, as Kafka.
- Per partition: UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID at v10), metadata longer than
  offset.metadata.max.bytes: OFFSET_METADATA_TOO_LARGE.
- Authorization: READ on the group (GROUP_AUTHORIZATION_FAILED for every partition) and on
  each topic (TOPIC_AUTHORIZATION_FAILED for its partitions; the others are committed).
- A consumer-protocol group (KIP-848): the generation field is the member epoch; the member
  must exist (UNKNOWN_MEMBER_ID); a newer epoch is STALE_MEMBER_EPOCH; an older one (KIP-1251,
  a commit sent before the heartbeat's new epoch arrived) is accepted when every partition
  was assigned to the member at that epoch or before, STALE_MEMBER_EPOCH for the whole request
  otherwise; epoch -1 without member only while the group has no members; its members must
  use v9+ (UNSUPPORTED_VERSION); its classic members (mixed groups) commit at any version,
  ILLEGAL_GENERATION where the others get STALE_MEMBER_EPOCH.
Version notes: v2–4 retention time (ignored: offsets live as long as the group); v6 leader
epoch; v7 group instance id; v8 flexible; v9 member epochs (KIP-848), GROUP_ID_NOT_FOUND for
a group that does not exist; v10 topic ids.
"""

from __future__ import annotations

import uuid
from typing import Any

from lockgate.coordinator.group.records import CommittedOffset
from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


def topic_name(ctx: RequestContext, topic: Any) -> str | None:
    if ctx.api_version >= 10 and field(topic, "topic_id", None) is not None:
        record = ctx.services.topics.by_id.get(topic.topic_id)
        return record.name if record else None
    return str(topic.name)


@handles(ApiKey.OFFSET_COMMIT, 2, 10)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    offsets: dict[tuple[str, int], CommittedOffset] = {}
    unknown_ids = set()
    refused: dict[tuple[str, int], ErrorCode] = {}
    group_ok = authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id)
    for topic in request.topics:
        name = topic_name(ctx, topic)
        if name is None:
            unknown_ids.add(topic.topic_id)
            continue
        if not group_ok or not authorize(ctx, Operation.READ, ResourceType.TOPIC, name):
            code = (
                ErrorCode.topic_authorization_failed
                if group_ok
                else ErrorCode.group_authorization_failed
            )
            refused.update({(name, p.partition_index): code for p in topic.partitions})
            continue
        for p in topic.partitions:
            offsets[(name, p.partition_index)] = CommittedOffset(
                p.committed_offset,
                field(p, "committed_leader_epoch", -1),
                p.committed_metadata or "",
                ctx.received_ms,
            )
    results = (
        {}
        if not group_ok
        else await ctx.services.groups.commit(
            request.group_id,
            request.generation_id_or_member_epoch,
            request.member_id,
            field(request, "group_instance_id", None),
            offsets,
            ctx.api_version,
        )
    )
    results = {**results, **refused}
    topics = []
    for topic in request.topics:
        name = topic_name(ctx, topic)
        partitions = [
            {
                "partition_index": p.partition_index,
                "error_code": ErrorCode.unknown_topic_id
                if name is None
                else results[(name, p.partition_index)],
            }
            for p in topic.partitions
        ]
        topics.append(
            {
                "name": name or "",
                "topic_id": field(topic, "topic_id", uuid.UUID(int=0)),
                "partitions": partitions,
            }
        )
    return {"throttle_time": 0, "topics": topics}
