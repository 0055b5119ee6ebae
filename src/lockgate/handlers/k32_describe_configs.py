"""DescribeConfigs (key 32), versions 1–4.

Behaviour:
- Topic resources (type 2): every topic config with its effective value and source (topic
  override, else the source of the broker property behind it: dynamic per broker, dynamic
  cluster default, static, default); unknown topic: UNKNOWN_TOPIC_OR_PARTITION.
- Broker resources (type 4): this broker's id lists every property with its source, read-only
  unless it can change at run time (server/dynamic_config.py), passwords sensitive with a null
  value; the empty name (cluster default) lists only the dynamic defaults set, as Kafka.
  Another broker id: INVALID_REQUEST.
- Group resources (type 32, KIP-848/KIP-932): every group config of Kafka 4.4 (the internal
  ones only when set), whether or not the group exists: the group's override (GROUP_CONFIG)
  or the value of the broker property behind it (its source: static or default); the empty
  name: INVALID_REQUEST ("Group name must not be empty").
- Other resource types (broker loggers, 8, included): INVALID_REQUEST.
- Synonyms (v1+, when asked): the layers beneath the value, most important first, as Kafka.
- Authorization: DESCRIBE_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED), on the group
  (GROUP_AUTHORIZATION_FAILED) or, for a broker, on the cluster (CLUSTER_AUTHORIZATION_FAILED).
Version notes: v1 config source and synonyms; v3 config type and documentation; v4 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.configs import (
    BROKER,
    GROUP,
    TOPIC,
    config_denied,
    describe_broker,
    describe_group,
    describe_topic,
)
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    results = []
    synonyms = bool(request.include_synonyms)
    for resource in request.resources:
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": (),
        }
        keys = resource.configuration_keys
        try:
            denied = config_denied(
                ctx, resource.resource_type, resource.resource_name, Operation.DESCRIBE_CONFIGS
            )
            if denied is not None:
                raise denied
            if resource.resource_type == TOPIC:
                entry["configs"] = describe_topic(ctx, resource.resource_name, keys, synonyms)
            elif resource.resource_type == BROKER:
                entry["configs"] = describe_broker(ctx, resource.resource_name, keys, synonyms)
            elif resource.resource_type == GROUP:
                entry["configs"] = describe_group(ctx, resource.resource_name, keys, synonyms)
            else:
                raise KafkaProtocolError(
                    ErrorCode.invalid_request,
                    f"resource type {resource.resource_type} is not supported",
                )
        except KafkaProtocolError as exc:
            entry["error_code"] = exc.code
            entry["error_message"] = exc.message or None
        results.append(entry)
    return {"throttle_time": 0, "results": results}
