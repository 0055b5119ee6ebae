"""DeleteShareGroupOffsets (key 92), version 0.

Behaviour: deletes the share state of whole topics of an Empty share group: the topics'
initialized share partitions become deleting, their state is deleted through the persister,
then they are forgotten (the next subscription initializes them afresh).
- GROUP_AUTHORIZATION_FAILED (no DELETE on the group), INVALID_GROUP_ID (empty id),
  GROUP_ID_NOT_FOUND (no such group, or one of another type), NON_EMPTY_GROUP, NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS: top level, with no topics.
- Per topic: TOPIC_AUTHORIZATION_FAILED (no READ on the topic, listed first),
  UNKNOWN_TOPIC_OR_PARTITION (no such topic; or "There is no offset information to delete."),
  or the persister's error. A group that never had share partitions answers no topic at all.
Version notes: v0 flexible (the only version).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.group.share_offsets import TOPIC_DENIED
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    def refused(code: ErrorCode, text: str | None = None) -> HandlerResult:
        return {"throttle_time": 0, "error_code": code, "error_message": text, "responses": []}

    if not authorize(ctx, Operation.DELETE, ResourceType.GROUP, request.group_id):
        return refused(ErrorCode.group_authorization_failed)
    responses: list[dict[str, Any]] = []
    wanted = []
    for topic in request.topics:
        if authorize(ctx, Operation.READ, ResourceType.TOPIC, topic.topic_name):
            wanted.append(topic.topic_name)
        else:
            responses.append({"topic_name": topic.topic_name, "topic_id": None,
                              "error_code": ErrorCode.topic_authorization_failed,
                              "error_message": TOPIC_DENIED})  # fmt: skip
    result = await ctx.services.groups.share_offsets.delete(request.group_id, wanted)
    if result.error:
        return refused(result.error, result.message)
    responses += [
        {"topic_name": t.name, "topic_id": t.topic_id, "error_code": t.error,
         "error_message": t.message}
        for t in result.topics
    ]  # fmt: skip
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses}
