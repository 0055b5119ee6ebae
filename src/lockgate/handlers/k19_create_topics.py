"""CreateTopics (key 19), versions 2–7.

Behaviour:
- Creates each topic with its partition count (-1: num.partitions), replication factor (-1:
  default.replication.factor) and configs. A single node takes only 1; a cluster places the
  replicas over the registered brokers as Kafka's controller does, striped over their racks
  (broker.rack; INVALID_REPLICATION_FACTOR if there are fewer brokers).
- Manual assignments exclude a partition count (INVALID_REQUEST) and must number partitions
  0..n-1 with distinct registered brokers, as many for each (a single node: itself alone;
  INVALID_REPLICA_ASSIGNMENT otherwise).
- Existing topic: TOPIC_ALREADY_EXISTS; illegal name: INVALID_TOPIC_EXCEPTION; unknown or
  invalid config: INVALID_CONFIG; a name repeated in one request: INVALID_REQUEST.
- validate_only checks everything and creates nothing.
- Authorization: CREATE on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED.
Version notes: v5+ returns partitions, replication factor and configs; v7 the topic id.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

CONFIG_SOURCE_DEFAULT = 5
CONFIG_SOURCE_TOPIC = 1


async def _create(ctx: RequestContext, topic: Any, validate_only: bool) -> dict[str, Any]:
    assignments = None
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise KafkaProtocolError(
                ErrorCode.invalid_request, "assignments exclude partition count and replication"
            )
        assignments = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
        if sorted(assignments) != list(range(len(topic.assignments))):
            raise KafkaProtocolError(
                ErrorCode.invalid_replica_assignment, "partitions must be numbered 0..n-1"
            )
        assignments = dict(sorted(assignments.items()))
    configs = {c.name: c.value for c in topic.configs}
    record = await ctx.services.admin.create(
        topic.name,
        len(assignments) if assignments else topic.num_partitions,
        topic.replication_factor,
        configs,
        validate_only=validate_only,
        assignments=assignments,
    )
    resolved = ctx.services.config.resolve_topic(record.configs)
    first = ctx.services.membership.partition(record.name, 0)
    if assignments:
        factor = len(assignments[0])
    elif first is not None and first.replicas:
        factor = len(first.replicas)
    else:
        factor = ctx.services.topics.replication_factor(topic.replication_factor)
    return {
        "topic_id": record.topic_id,
        "num_partitions": record.partitions,
        "replication_factor": factor,
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
    # CREATE on the cluster covers every topic; else each needs CREATE on its name
    cluster_create = authorize(ctx, Operation.CREATE, ResourceType.CLUSTER, log_denied=False)
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
            if not cluster_create and not authorize(
                ctx, Operation.CREATE, ResourceType.TOPIC, topic.name
            ):
                raise KafkaProtocolError(ErrorCode.topic_authorization_failed)
            entry.update(await _create(ctx, topic, request.validate_only))
        except KafkaProtocolError as exc:
            entry["error_code"] = exc.code
            entry["error_message"] = exc.message or None
        results.append(entry)
    return {"throttle_time": 0, "topics": results}
