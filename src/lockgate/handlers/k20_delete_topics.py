"""DeleteTopics (key 20), versions 1–6.

Behaviour:
- Deletes each topic and its data; unknown name: UNKNOWN_TOPIC_OR_PARTITION; unknown id
  (v6): UNKNOWN_TOPIC_ID; internal topics: INVALID_TOPIC_EXCEPTION; delete.topic.enable=false:
  TOPIC_DELETION_DISABLED.
- Authorization: DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED (nothing deleted).
- The groups' committed offsets of a deleted topic and the share groups' state of it are
  deleted too (the topic directory tells the coordinators, as Kafka 4.4's metadata update).
Version notes: v5 error messages; v6 topics by name or id.
"""

from __future__ import annotations

import uuid
from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.DELETE_TOPICS, 1, 6)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    topics = ctx.services.topics
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in field(request, "topic_names", ())]
    responses = []
    for name, topic_id in wanted:
        entry: dict[str, Any] = {
            "name": name,
            "topic_id": topic_id or uuid.UUID(int=0),
            "error_code": 0,
            "error_message": None,
        }
        try:
            if not ctx.services.config.flag("delete.topic.enable"):
                raise KafkaProtocolError(ErrorCode.topic_deletion_disabled)
            if name is None:
                record = topics.by_id.get(topic_id) if topic_id else None
                if record is None:
                    raise KafkaProtocolError(ErrorCode.unknown_topic_id)
                name = record.name
                entry["name"] = name
            if not authorize(ctx, Operation.DELETE, ResourceType.TOPIC, name):
                raise KafkaProtocolError(ErrorCode.topic_authorization_failed)
            record = await ctx.services.admin.delete(name)
            entry["topic_id"] = record.topic_id
        except KafkaProtocolError as exc:
            entry["error_code"] = exc.code
            entry["error_message"] = exc.message or None
        responses.append(entry)
    return {"throttle_time": 0, "responses": responses}
