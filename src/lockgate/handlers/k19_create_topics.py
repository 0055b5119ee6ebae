"""CreateTopics (key 19), versions 2–7.

Behaviour:
- Creates each topic with its partition count (-1: num.partitions) and configs; replication
  factor must be 1 or -1 (INVALID_REPLICATION_FACTOR otherwise, one broker).
- Manual assignments must place every partition on this broker alone
  (INVALID_REPLICA_ASSIGNMENT) and exclude a partition count (INVALID_REQUEST).
- Existing topic: TOPIC_ALREADY_EXISTS; illegal name: INVALID_TOPIC_EXCEPTION; unknown or
  invalid config: INVALID_CONFIG; a name repeated in one request: INVALID_REQUEST.
- validate_only checks everything and creates nothing.
Version notes: v5+ returns partitions, replication factor and configs; v7 the topic id.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

CONFIG_SOURCE_DEFAULT = 5
CONFIG_SOURCE_TOPIC = 1


def _create(ctx: RequestContext, topic: Any, validate_only: bool) -> dict[str, Any]:
    partitions = topic.num_partitions
    if topic.assignments:
        if partitions != -1 or topic.replication_factor != -1:
            raise KafkaProtocolError(
                ErrorCode.invalid_request, "assignments exclude partition count and replication"
            )
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))) or any(
            tuple(a.broker_ids) != (ctx.broker.node_id,) for a in topic.assignments
        ):
            raise KafkaProtocolError(
                ErrorCode.invalid_replica_assignment,
                f"partitions must be 0..n-1, each on broker {ctx.broker.node_id} alone",
            )
        partitions = len(indexes)
    configs = {c.name: c.value for c in topic.configs}
    record = ctx.broker.topics.create(
        topic.name,
        partitions,
        1 if topic.assignments else topic.replication_factor,
        configs,
        validate_only=validate_only,
    )
    resolved = ctx.broker.config.resolve_topic(record.configs)
    return {
        "topic_id": record.topic_id,
        "num_partitions": record.partitions,
        "replication_factor": 1,
        "configs": [
            {
                "name": name,
                "value": value,
                "read_only": False,
                "config_source": CONFIG_SOURCE_TOPIC
                if name in record.configs
                else CONFIG_SOURCE_DEFAULT,
                "is_sensitive": False,
            }
            for name, value in sorted(resolved.items())
        ],
    }


@handles(ApiKey.CREATE_TOPICS, 2, 7)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    counts = Counter(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        entry: dict[str, Any] = {
            "name": topic.name,
            "topic_id": None,
            "error_code": 0,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        try:
            if counts[topic.name] > 1:
                raise KafkaProtocolError(ErrorCode.invalid_request, "topic named twice")
            entry.update(_create(ctx, topic, request.validate_only))
        except KafkaProtocolError as exc:
            entry["error_code"] = exc.code
            entry["error_message"] = exc.message or None
        results.append(entry)
    return {"throttle_time": 0, "topics": results}
