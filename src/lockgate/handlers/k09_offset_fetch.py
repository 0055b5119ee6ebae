"""OffsetFetch (key 9), versions 1–10.

Behaviour:
- The committed offset, leader epoch and metadata of each requested partition (-1 when none);
  a null topic list (v2+) returns every committed offset of the group.
- RequireStable (v7+): a partition with transactional offsets pending in an open transaction
  gets UNSTABLE_OFFSET_COMMIT (the client retries); without it, pending offsets are simply
  invisible until the commit marker.
- v8+ batches groups; v10 names topics by id (unknown id: UNKNOWN_TOPIC_ID).
- v9+ member id and epoch: in a consumer-protocol group (KIP-848) a request naming a member
  must name a current one (UNKNOWN_MEMBER_ID) at exactly its epoch (STALE_MEMBER_EPOCH;
  ILLEGAL_GENERATION for a classic member of a mixed group; KIP-1251 relaxes commits only);
  a null member id with epoch -1 (the admin client) is not checked.
- Authorization: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED for it) and on each topic:
  a named topic gets TOPIC_AUTHORIZATION_FAILED, an all-topics fetch leaves it out.
Version notes: v2 top-level error; v3 throttle time; v5 leader epoch; v6 flexible.
"""

from __future__ import annotations

import uuid
from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


def _partitions_of(topic: Any) -> list[int]:
    indexes = field(topic, "partition_indexes", None)
    return list(indexes) if indexes is not None else []


def _described(ctx: RequestContext, answers: Any, *, named: bool) -> Any:
    """Topics the session may not DESCRIBE: left out of an all-topics fetch, answered
    TOPIC_AUTHORIZATION_FAILED when named."""
    allowed: dict[str, bool] = {}
    kept = {}
    for (name, index), answer in answers.items():
        if name not in allowed:
            allowed[name] = authorize(
                ctx, Operation.DESCRIBE, ResourceType.TOPIC, name, log_denied=named
            )
        if allowed[name]:
            kept[(name, index)] = answer
        elif named:
            kept[(name, index)] = (None, ErrorCode.topic_authorization_failed)
    return kept


def _group(
    ctx: RequestContext,
    group_id: str,
    topics: Any,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> dict[str, Any]:
    if not authorize(ctx, Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return {
            "group_id": group_id,
            "topics": [],
            "error_code": ErrorCode.group_authorization_failed,
        }
    by_id = ctx.api_version >= 10
    names: dict[str, str | None] = {}
    wanted: list[tuple[str, int]] | None = None
    if topics is not None:
        wanted = []
        for topic in topics:
            key = str(topic.topic_id) if by_id else topic.name
            record = ctx.services.topics.by_id.get(topic.topic_id) if by_id else None
            names[key] = (record.name if record else None) if by_id else topic.name
            name = names[key]
            if name is not None:
                wanted.extend((name, p) for p in _partitions_of(topic))
    error, answers = ctx.services.groups.fetch(group_id, wanted, require_stable, *member)
    if ctx.services.authorizer is not None:
        answers = _described(ctx, answers, named=topics is not None)
    grouped: dict[str, list[dict[str, Any]]] = {}
    for (name, index), (committed, partition_error) in sorted(answers.items()):
        grouped.setdefault(name, []).append(
            {
                "partition_index": index,
                "committed_offset": committed.offset if committed else -1,
                "committed_leader_epoch": committed.leader_epoch if committed else -1,
                "metadata": committed.metadata if committed else "",
                "error_code": partition_error,
            }
        )
    result_topics = []
    for name, partitions in grouped.items():
        record = ctx.services.topics.topics.get(name)
        result_topics.append(
            {
                "name": name,
                "topic_id": record.topic_id if record else uuid.UUID(int=0),
                "partitions": partitions,
            }
        )
    if topics is not None and by_id:
        for topic in topics:
            if names.get(str(topic.topic_id)) is None:
                result_topics.append(
                    {
                        "name": "",
                        "topic_id": topic.topic_id,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": -1,
                                "committed_leader_epoch": -1,
                                "metadata": "",
                                "error_code": ErrorCode.unknown_topic_id,
                            }
                            for p in _partitions_of(topic)
                        ],
                    }
                )
    return {"group_id": group_id, "topics": result_topics, "error_code": error}


@handles(ApiKey.OFFSET_FETCH, 1, 10)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    require_stable = field(request, "require_stable", False)
    if ctx.api_version >= 8:
        groups = [
            _group(
                ctx,
                g.group_id,
                g.topics,
                require_stable,
                (field(g, "member_id", None), field(g, "member_epoch", -1)),
            )
            for g in request.groups
        ]
        return {"throttle_time": 0, "groups": groups}
    answer = _group(ctx, request.group_id, request.topics, require_stable)
    return {"throttle_time": 0, "topics": answer["topics"], "error_code": answer["error_code"]}
