# Shared by the config APIs: resource types, config sources and how a topic's configs appear.
from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import RequestContext
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.server.config import BROKER_DEFAULTS, TOPIC_CONFIGS

TOPIC = 2
BROKER = 4

SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

_TYPES = {"long": 5, "int": 3, "bool": 1, "string": 2, "ratio": 6, "policy": 7}  # Kafka ConfigType


def config_denied(
    ctx: RequestContext, resource_type: int, name: str, operation: Operation
) -> KafkaProtocolError | None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on the cluster for a broker (and its
    loggers): the error to answer when the session may not, else None."""
    if resource_type == TOPIC:
        if not authorize(ctx, operation, ResourceType.TOPIC, name):
            return KafkaProtocolError(ErrorCode.topic_authorization_failed)
    elif not authorize(ctx, operation, ResourceType.CLUSTER):
        return KafkaProtocolError(ErrorCode.cluster_authorization_failed)
    return None


def config_type(kind: str) -> int:
    return _TYPES.get(kind, 2)


def describe_topic(ctx: RequestContext, name: str, keys: Any) -> list[dict[str, Any]]:
    topics = ctx.broker.topics
    record = topics.topics.get(name)
    if record is None:
        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
    resolved = topics.resolved_configs(name)
    entries = []
    for key, value in sorted(resolved.items()):
        if keys is not None and key not in keys:
            continue
        spec = TOPIC_CONFIGS[key]
        broker_set = spec.broker_property is not None and (
            ctx.broker.config.values.get(spec.broker_property)
            != BROKER_DEFAULTS.get(spec.broker_property)
        )
        source = (
            SOURCE_TOPIC
            if key in record.configs
            else SOURCE_STATIC_BROKER
            if broker_set
            else SOURCE_DEFAULT
        )
        entries.append(_entry(key, value, False, source, config_type(spec.kind)))
    return entries


def describe_broker(ctx: RequestContext, name: str, keys: Any) -> list[dict[str, Any]]:
    if name not in ("", str(ctx.broker.node_id)):
        raise KafkaProtocolError(ErrorCode.invalid_request, f"this is broker {ctx.broker.node_id}")
    values = ctx.broker.config.values
    return [
        _entry(
            key,
            value,
            True,
            SOURCE_STATIC_BROKER if value != BROKER_DEFAULTS.get(key) else SOURCE_DEFAULT,
            2,
        )
        for key, value in sorted(values.items())
        if keys is None or key in keys
    ]


def _entry(name: str, value: str, read_only: bool, source: int, kind: int) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": source,
        "is_default": source == SOURCE_DEFAULT,
        "is_sensitive": False,
        "synonyms": (),
        "config_type": kind,
        "documentation": None,
    }
