"""IncrementalAlterConfigs (key 44), versions 0–1.

Behaviour:
- Topic resources: SET (0) and DELETE (1) change topic overrides, validated like CreateTopics
  (INVALID_CONFIG); APPEND (2) and SUBTRACT (3) apply only to list configs, and no topic
  config lockgate supports is a list, so they get INVALID_CONFIG. Unknown topic:
  UNKNOWN_TOPIC_OR_PARTITION. validate_only changes nothing.
- Broker resources: the empty name changes the cluster-wide default, a broker id that
  broker's own values (KIP-226), stored durably and cluster-wide, applied at run time
  without a restart. Only the properties lockgate re-reads at run time may change (the broker
  defaults of topic configs: log.retention.ms, log.segment.bytes, message.max.bytes,
  compression.type, ...); any other, a bad value or APPEND/SUBTRACT: INVALID_REQUEST
  ("Cannot update these configs dynamically: [...]"), the whole resource unchanged.
  Broker loggers (type 8) and other types: INVALID_REQUEST.
- Authorization: ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or, for a broker, on
  the cluster (CLUSTER_AUTHORIZATION_FAILED); nothing changes.
Version notes: v1 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.configs import BROKER, TOPIC, alter_broker, config_denied
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation

SET, DELETE = 0, 1


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    denied = config_denied(
        ctx, resource.resource_type, resource.resource_name, Operation.ALTER_CONFIGS
    )
    if denied is not None:
        raise denied
    if resource.resource_type not in (TOPIC, BROKER):
        raise KafkaProtocolError(
            ErrorCode.invalid_request,
            f"resource type {resource.resource_type} is not supported",
        )
    set_values: dict[str, str] = {}
    delete: list[str] = []
    for change in resource.configs:
        if change.config_operation == SET:
            if change.value is None:
                raise KafkaProtocolError(ErrorCode.invalid_config, f"{change.name} has no value")
            set_values[change.name] = change.value
        elif change.config_operation == DELETE:
            delete.append(change.name)
        else:
            code = ErrorCode.invalid_config
            if resource.resource_type == BROKER:
                code = ErrorCode.invalid_request
            raise KafkaProtocolError(
                code, f"operation {change.config_operation} needs a list config"
            )
    if resource.resource_type == BROKER:
        await alter_broker(ctx, resource.resource_name, dict(set_values), delete, validate_only)
        return
    await ctx.broker.admin.alter_configs(resource.resource_name, set_values, delete, validate_only)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    responses = []
    for resource in request.resources:
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
        }
        try:
            await _alter(ctx, resource, request.validate_only)
        except KafkaProtocolError as exc:
            entry["error_code"] = exc.code
            entry["error_message"] = exc.message or None
        responses.append(entry)
    return {"throttle_time": 0, "responses": responses}
