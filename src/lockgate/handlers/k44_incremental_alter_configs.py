"""IncrementalAlterConfigs (key 44), versions 0–1.

Behaviour:
- A resource naming a config twice, or giving a null value to anything but DELETE:
  INVALID_REQUEST ("Error due to duplicate config keys", "Null value not supported for : ..."),
  as Kafka checks before anything else; an unknown operation: INVALID_REQUEST.
- Topic resources: SET (0) and DELETE (1) change topic overrides, validated like CreateTopics
  (INVALID_CONFIG with Kafka's messages). APPEND (2) adds list items not there yet and
  SUBTRACT (3) removes the items given, on the topic's override or, without one, on Kafka's
  default of the config, as Kafka's controller does; on a config that is not a LIST
  (cleanup.policy and the throttled-replica lists are): INVALID_CONFIG "Can't APPEND to key X
  because its type is not LIST.". Unknown topic: UNKNOWN_TOPIC_OR_PARTITION. validate_only
  changes nothing.
- Broker resources: the empty name changes the cluster-wide default, a broker id that
  broker's own values (KIP-226), stored durably and cluster-wide, applied at run time
  without a restart. Only the properties lockgate re-reads at run time may change (the broker
  defaults of topic configs: log.retention.ms, log.segment.bytes, message.max.bytes,
  compression.type, ...); any other or a bad value: INVALID_REQUEST ("Cannot update these
  configs dynamically: [...]"), the whole resource unchanged. APPEND/SUBTRACT apply to
  log.cleanup.policy (on the resource's value, else its default); on any other property:
  INVALID_CONFIG ("Config value append is not allowed for config key: X"), as Kafka's broker.
  Broker loggers (type 8) and other types: INVALID_REQUEST.
- Group resources (type 32, KIP-848/KIP-932): a group's overrides of Kafka 4.4's group configs
  (share.auto.offset.reset, consumer.session.timeout.ms, ...), whether or not the group exists,
  stored durably and cluster-wide; the group's whole resulting set is checked as Kafka's
  GroupConfig.validate does: an unknown name, a bad value, a value outside the broker's
  group.*.min/max bounds, a session timeout not above the heartbeat interval: INVALID_CONFIG
  with Kafka's messages, nothing changed. DELETE of a name not set changes nothing;
  APPEND/SUBTRACT: INVALID_CONFIG ("Can't APPEND to key X because its type is not LIST.");
  the empty name: INVALID_REQUEST ("Default group resources are not allowed."). A consumer
  group's changed session timeout and heartbeat interval apply from its next heartbeat.
- Authorization: ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED), on the group
  (GROUP_AUTHORIZATION_FAILED) or, for a broker, on the cluster
  (CLUSTER_AUTHORIZATION_FAILED); nothing changes.
Version notes: v1 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.config.dynamic import broker_target
from lockgate.handlers.configs import (
    APPEND,
    BROKER,
    DELETE,
    GROUP,
    SET,
    SUBTRACT,
    TOPIC,
    alter_broker,
    check_config_entries,
    config_denied,
    incremental_broker_changes,
    incremental_topic_changes,
)
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation


def _check_request(resource: Any) -> None:
    check_config_entries(
        [c.name for c in resource.configs],
        [c.name for c in resource.configs if c.config_operation != DELETE and c.value is None],
    )
    for change in resource.configs:
        if change.config_operation not in (SET, DELETE, APPEND, SUBTRACT):
            raise KafkaProtocolError(
                ErrorCode.invalid_request, f"Unknown operations type {change.config_operation}"
            )


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> None:
    denied = config_denied(
        ctx, resource.resource_type, resource.resource_name, Operation.ALTER_CONFIGS
    )
    if denied is not None:
        raise denied
    if resource.resource_type not in (TOPIC, BROKER, GROUP):
        raise KafkaProtocolError(
            ErrorCode.invalid_request,
            f"resource type {resource.resource_type} is not supported",
        )
    _check_request(resource)
    name = resource.resource_name
    if resource.resource_type == GROUP:
        changes = [(c.name, c.config_operation, c.value) for c in resource.configs]
        await ctx.services.group_configs.alter(name, changes=changes, validate_only=validate_only)
        return
    if resource.resource_type == BROKER:
        dynamic = ctx.services.dynamic_configs
        target = broker_target(name)
        current = dynamic.default if target == "" else dynamic.brokers.get(target, {})
        set_values, delete = incremental_broker_changes(resource.configs, current)
        await alter_broker(ctx, name, dict(set_values), delete, validate_only)
        return
    record = ctx.services.topics.topics.get(name)
    if record is None:
        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
    set_values, delete = incremental_topic_changes(resource.configs, record.configs)
    await ctx.services.admin.alter_configs(name, set_values, delete, validate_only)


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
