# Shared by the config APIs: resource types, config sources and how a topic's, a broker's and a
# group's configs appear.
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockgate.config.dynamic import DYNAMIC_BROKER_CONFIGS, broker_target, check_changes
from lockgate.config.properties import CONFIG_TYPES, TOPIC_CONFIGS
from lockgate.handlers.registry import RequestContext
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32  # ConfigResource.Type.GROUP (KIP-848), not the ACL resource type

SOURCE_TOPIC = 1
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_DEFAULT = 5

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' operations
_OPERATION_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def config_denied(
    ctx: RequestContext, resource_type: int, name: str, operation: Operation
) -> KafkaProtocolError | None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, on the group, or on the cluster for a
    broker (and its loggers): the error to answer when the session may not, else None."""
    if resource_type == TOPIC:
        if not authorize(ctx, operation, ResourceType.TOPIC, name):
            return KafkaProtocolError(ErrorCode.topic_authorization_failed)
    elif resource_type == GROUP:
        if not authorize(ctx, operation, ResourceType.GROUP, name):
            return KafkaProtocolError(ErrorCode.group_authorization_failed)
    elif not authorize(ctx, operation, ResourceType.CLUSTER):
        return KafkaProtocolError(ErrorCode.cluster_authorization_failed)
    return None


def config_type(kind: str) -> int:
    return CONFIG_TYPES.get(kind, 2)


def check_config_entries(names: list[str], null_names: list[str]) -> None:
    """Kafka's checks of an alter request's resource before anything else: INVALID_REQUEST for
    a config named twice or a null value (`null_names`: those that may not be null)."""
    if len(set(names)) != len(names):
        raise KafkaProtocolError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    if null_names:
        raise KafkaProtocolError(
            ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(null_names)
        )


def _list_items(value: str | None) -> list[str]:
    return [item for item in (value or "").split(",") if item]


def incremental_topic_changes(
    changes: Any, current: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """A topic's IncrementalAlterConfigs operations as values to set and names to delete, as
    Kafka's controller computes them: APPEND adds the items not there yet and SUBTRACT
    removes the items given, both on the topic's override or, without one, on Kafka's own
    default of the config (not the broker's); APPEND/SUBTRACT of a config that is not a LIST:
    INVALID_CONFIG."""
    set_values: dict[str, str] = {}
    delete: list[str] = []
    for change in changes:
        name, operation = change.name, change.config_operation
        if operation == SET:
            set_values[name] = change.value
        elif operation == DELETE:
            delete.append(name)
        else:
            spec = TOPIC_CONFIGS.get(name)
            if spec is None or spec.kind != "list":
                raise KafkaProtocolError(
                    ErrorCode.invalid_config,
                    f"Can't {_OPERATION_NAMES[operation]} to key {name} because its type is "
                    "not LIST.",
                )
            items = _list_items(current.get(name, spec.default))
            given = change.value.split(",")
            if operation == APPEND:
                items += [item for item in dict.fromkeys(given) if item not in items]
            else:
                for item in given:
                    if item in items:
                        items.remove(item)
            set_values[name] = ",".join(items)
    return set_values, delete


def incremental_broker_changes(
    changes: Any, current: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """A broker resource's operations, as Kafka's broker prepares them: APPEND/SUBTRACT on
    the resource's dynamic value or, without one, the property's default; a property that is
    not a LIST: INVALID_CONFIG ("Config value append is not allowed ...")."""
    lists = {s.broker_property: s for s in TOPIC_CONFIGS.values() if s.kind == "list"}
    set_values: dict[str, str] = {}
    delete: list[str] = []
    for change in changes:
        name, operation = change.name, change.config_operation
        if operation == SET:
            set_values[name] = change.value
        elif operation == DELETE:
            delete.append(name)
        else:
            verb = _OPERATION_NAMES[operation].lower()
            spec = lists.get(name)
            if spec is None:
                raise KafkaProtocolError(
                    ErrorCode.invalid_config,
                    f"Config value {verb} is not allowed for config key: {name}",
                )
            value = current.get(name, spec.default)
            old = value.split(",") if value else []
            given = change.value.split(",")
            if operation == APPEND:
                items = old + [item for item in given if item not in old]
            else:
                items = list(old)
                for item in given:
                    if item in items:
                        items.remove(item)
            set_values[name] = ",".join(items)
    return set_values, delete


def _synonyms(layers: Any, wanted: bool) -> list[dict[str, Any]]:
    return [{"name": n, "value": v, "source": src} for n, v, src in layers] if wanted else []


def describe_topic(
    ctx: RequestContext, name: str, keys: Any, synonyms: bool = False
) -> list[dict[str, Any]]:
    """Every topic config: the override (DYNAMIC_TOPIC_CONFIG) or the broker property behind
    it, with that property's own source; synonyms list the override then the broker's layers."""
    topics = ctx.services.topics
    record = topics.topics.get(name)
    if record is None:
        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
    resolved = topics.resolved_configs(name)
    dynamic = ctx.services.dynamic_configs
    entries = []
    for key, value in sorted(resolved.items()):
        if keys is not None and key not in keys:
            continue
        spec = TOPIC_CONFIGS[key]
        layers: list[tuple[str, str | None, int]] = []
        if key in record.configs:
            layers.append((key, record.configs[key], SOURCE_TOPIC))
        if spec.broker_property is not None:
            below = dynamic.resolve(spec.broker_property)
            layers += [(spec.broker_property, v, source) for source, v in below.synonyms]
        else:
            layers.append((key, spec.default, SOURCE_DEFAULT))
        entry = _entry(key, value, False, layers[0][2], config_type(spec.kind))
        entry["synonyms"] = _synonyms(layers, synonyms)
        entries.append(entry)
    return entries


def describe_broker(
    ctx: RequestContext, name: str, keys: Any, synonyms: bool = False
) -> list[dict[str, Any]]:
    """The cluster default resource ('') lists only the dynamic defaults set, as Kafka; this
    broker's id lists every property, read-only unless it can change at run time."""
    dynamic = ctx.services.dynamic_configs
    if name == "":
        return [
            _entry(key, value, False, SOURCE_DYNAMIC_DEFAULT_BROKER, _broker_type(key))
            | {"synonyms": _synonyms([(key, value, SOURCE_DYNAMIC_DEFAULT_BROKER)], synonyms)}
            for key, value in sorted(dynamic.dynamic_default().items())
            if keys is None or key in keys
        ]
    if name != str(ctx.services.node_id):
        raise KafkaProtocolError(
            ErrorCode.invalid_request, f"this is broker {ctx.services.node_id}"
        )
    entries = []
    for key in sorted(ctx.services.config.values):
        if keys is not None and key not in keys:
            continue
        resolved = dynamic.resolve(key)
        sensitive = _sensitive(key)
        value = None if sensitive else resolved.value
        entry = _entry(
            key, value, key not in DYNAMIC_BROKER_CONFIGS, resolved.source, _broker_type(key)
        )
        entry["is_sensitive"] = sensitive
        layers = [(key, None if sensitive else v, source) for source, v in resolved.synonyms]
        entry["synonyms"] = _synonyms(layers, synonyms)
        entries.append(entry)
    return entries


def describe_group(
    ctx: RequestContext, name: str, keys: Any, synonyms: bool = False
) -> list[dict[str, Any]]:
    """Every config of a group, whether or not the group exists (as Kafka): its override
    (GROUP_CONFIG) or the broker's value, with the broker property's layers as synonyms."""
    entries = []
    for described in ctx.services.group_configs.describe(name, keys):
        entry = _entry(
            described.name, described.value, False, described.source, config_type(described.kind)
        )
        entry["synonyms"] = _synonyms([(n, v, s) for n, v, s in described.synonyms], synonyms)
        entries.append(entry)
    return entries


def _sensitive(key: str) -> bool:
    """Passwords and JAAS configs are never shown, as Kafka (value null, is_sensitive)."""
    return "password" in key or key.endswith("jaas.config") or key == "ssl.keystore.key"


def _broker_type(key: str) -> int:
    for spec in TOPIC_CONFIGS.values():
        if spec.broker_property == key:
            return config_type(spec.kind)
    return 2


def _entry(name: str, value: str | None, read_only: bool, source: int, kind: int) -> dict[str, Any]:
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


async def alter_broker(
    ctx: RequestContext,
    name: str,
    set_values: dict[str, str | None],
    delete: list[str],
    validate_only: bool,
    *,
    replace: bool = False,
) -> None:
    """A change of the cluster-wide default ('') or of one broker's dynamic configs, checked
    whole (INVALID_REQUEST, Kafka's messages) before anything is stored."""
    target = broker_target(name)
    checked = check_changes(set_values, delete)
    if not validate_only:
        await ctx.services.dynamic_configs.alter(target, checked, delete, replace=replace)
