"""CreatePartitions (key 37), versions 0–3.

Behaviour:
- Grows a topic to `count` partitions; a count not above the current one: INVALID_PARTITIONS;
  unknown topic: UNKNOWN_TOPIC_OR_PARTITION; assignments must name distinct registered
  brokers for each new partition, as many for each (a single node: itself alone;
  INVALID_REPLICA_ASSIGNMENT otherwise); without them, the new partitions are placed as
  CreateTopics places them (rack-aware); validate_only changes nothing.
- Authorization: ALTER on the topic, else TOPIC_AUTHORIZATION_FAILED (nothing changes).
Version notes: v2 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    results = []
    for topic in request.topics:
        entry: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None}
        try:
            if not authorize(ctx, Operation.ALTER, ResourceType.TOPIC, topic.name):
                raise KafkaProtocolError(ErrorCode.topic_authorization_failed)
            assignments = None
            if topic.assignments is not None:
                assignments = {i: tuple(a.broker_ids) for i, a in enumerate(topic.assignments)}
            await ctx.services.admin.add_partitions(
                topic.name, topic.count, request.validate_only, assignments
            )
        except KafkaProtocolError as exc:
            entry["error_code"] = exc.code
            entry["error_message"] = exc.message or None
        results.append(entry)
    return {"throttle_time": 0, "results": results}
