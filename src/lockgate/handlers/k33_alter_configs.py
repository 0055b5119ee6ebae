"""AlterConfigs (key 33), versions 0–2 (the legacy, replace-everything form).

Behaviour: a config named twice or a null value: INVALID_REQUEST, as Kafka checks first. A
topic resource's overrides become exactly the given set (validated like CreateTopics:
INVALID_CONFIG); unknown topic: UNKNOWN_TOPIC_OR_PARTITION. A broker resource
('' the cluster default, or a broker id) gets exactly the given dynamic values, the others
removed, with IncrementalAlterConfigs' rules (INVALID_REQUEST for a property that cannot
change at run time). A group resource (type 32; Kafka 4.4 accepts it here too) gets exactly
the given group configs, checked whole as IncrementalAlterConfigs checks them (INVALID_CONFIG;
the empty name: INVALID_REQUEST). validate_only changes nothing.
- Authorization: ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED), on the group
  (GROUP_AUTHORIZATION_FAILED) or, for a broker, on the cluster
  (CLUSTER_AUTHORIZATION_FAILED); nothing changes.
Version notes: v2 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.configs import (
    BROKER,
    GROUP,
    TOPIC,
    alter_broker,
    check_config_entries,
    config_denied,
)
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    topics = ctx.services.topics
    responses = []
    for resource in request.resources:
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
        }
        try:
            denied = config_denied(
                ctx, resource.resource_type, resource.resource_name, Operation.ALTER_CONFIGS
            )
            if denied is not None:
                raise denied
            check_config_entries(
                [c.name for c in resource.configs],
                [c.name for c in resource.configs if c.value is None],
            )
            if resource.resource_type == BROKER:
                await alter_broker(
                    ctx,
                    resource.resource_name,
                    {c.name: c.value for c in resource.configs},
                    [],
                    request.validate_only,
                    replace=True,
                )
                responses.append(entry)
                continue
            if resource.resource_type == GROUP:
                await ctx.services.group_configs.alter(
                    resource.resource_name,
                    replace={c.name: c.value for c in resource.configs},
                    validate_only=request.validate_only,
                )
                responses.append(entry)
                continue
            if resource.resource_type != TOPIC:
                raise KafkaProtocolError(
                    ErrorCode.invalid_request,
                    f"resource type {resource.resource_type} is not supported",
                )
            name = resource.resource_name
            record = topics.topics.get(name)
            if record is None:
                raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
            new = {c.name: c.value for c in resource.configs if c.value is not None}
            dropped = [key for key in record.configs if key not in new]
            await ctx.services.admin.alter_configs(name, new, dropped, request.validate_only)
        except KafkaProtocolError as exc:
            entry["error_code"] = exc.code
            entry["error_message"] = exc.message or None
        responses.append(entry)
    return {"throttle_time": 0, "responses": responses}
