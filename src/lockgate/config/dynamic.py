# Dynamic broker configs (Kafka's KIP-226 subset that lockgate applies at run time): one
# document (lockgate.storage.documents) with the cluster-wide defaults and per-broker values. A
# single node keeps it in its storage engine (`broker-configs.json`); a cluster in the etcd key
# `broker-configs`, watched by every broker, so a change made through any broker applies on all.
#
# Invariants: `config.values` (what the rest of the broker reads) always holds, for each dynamic
# property, this broker's value if set, else the cluster default if set, else the static value
# (--config/--set, or the built-in default), and `static` keeps the latter for DescribeConfigs.
# Only properties in DYNAMIC_BROKER_CONFIGS are ever stored; each new document is applied whole
# and then `listeners` are called (the topics re-resolve their log settings).
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from lockgate.config.properties import BROKER_DEFAULTS, TOPIC_CONFIGS, BrokerConfig, ConfigError
from lockgate.config.properties import check_value as check_topic_value
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.storage.documents import Document, open_document
from lockgate.storage.engine import StorageEngine

BROKER_CONFIGS_FILE = "broker-configs.json"

# Kafka's DescribeConfigsResponse.ConfigSource values
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# The broker properties behind topic configs: Kafka changes all of them at run time
# (DynamicLogConfig), and so does lockgate, since every topic's log settings are re-resolved
# from them. Other properties are read once at start-up by the part they configure.
_BACKED = {spec.broker_property: spec for spec in TOPIC_CONFIGS.values() if spec.broker_property}
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(_BACKED)


@dataclass(frozen=True, slots=True)
class Resolved:
    """A broker property's effective value, where it comes from, and the values beneath it
    (Kafka's synonyms, most important first: (source, value))."""

    value: str
    source: int
    synonyms: tuple[tuple[int, str], ...]


def _decode(data: bytes | None) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    if not data:
        return {}, {}
    document = json.loads(data)
    brokers = {str(k): dict(v) for k, v in document.get("brokers", {}).items()}
    return dict(document.get("default", {})), brokers


def _encode(default: Mapping[str, str], brokers: Mapping[str, Mapping[str, str]]) -> bytes:
    kept = {node: dict(sorted(values.items())) for node, values in brokers.items() if values}
    return json.dumps(
        {"version": 1, "default": dict(sorted(default.items())), "brokers": kept}, sort_keys=True
    ).encode()


def check_changes(set_values: Mapping[str, str | None], delete: Iterable[str]) -> dict[str, str]:
    """The values normalised; INVALID_REQUEST (Kafka's messages) for a property that cannot
    change at run time or a bad value, the whole resource refused."""
    names = sorted({*set_values, *delete})
    fixed = [name for name in names if name not in DYNAMIC_BROKER_CONFIGS]
    if fixed:
        raise KafkaProtocolError(
            ErrorCode.invalid_request,
            f"Cannot update these configs dynamically: [{', '.join(fixed)}]",
        )
    checked = {}
    for name, value in set_values.items():
        if value is None:
            raise KafkaProtocolError(ErrorCode.invalid_request, f"Null value for {name}")
        try:
            checked[name] = check_topic_value(_BACKED[name], value, name)
        except ConfigError as exc:  # Kafka's message, naming the broker property
            raise KafkaProtocolError(ErrorCode.invalid_request, str(exc)) from None
    return checked


def broker_target(name: str) -> str:
    """'' (the cluster default) or a broker id; INVALID_REQUEST for anything else."""
    if name == "":
        return name
    if not name.isdigit():
        raise KafkaProtocolError(ErrorCode.invalid_request, f"Invalid broker id {name!r}")
    return str(int(name))


class DynamicBrokerConfigs:
    def __init__(self, config: BrokerConfig, node_id: int, document: Document) -> None:
        self.config = config
        self.node = str(node_id)
        self.document = document
        self.static = {name: config.values[name] for name in DYNAMIC_BROKER_CONFIGS}
        self.default: dict[str, str] = {}
        self.brokers: dict[str, dict[str, str]] = {}
        self.listeners: list[Callable[[], None]] = []
        document.listeners.append(self._take)
        self._take(document.value)

    def _take(self, data: bytes | None) -> None:
        self.default, self.brokers = _decode(data)
        mine = self.brokers.get(self.node, {})
        changed = False
        for name in DYNAMIC_BROKER_CONFIGS:
            value = mine.get(name, self.default.get(name, self.static[name]))
            if self.config.values[name] != value:
                self.config.values[name] = value
                changed = True
        if changed:
            for listener in list(self.listeners):
                listener()

    async def start(self) -> None:
        await self.document.start()

    async def close(self) -> None:
        await self.document.close()

    def resolve(self, name: str) -> Resolved:
        """This broker's view of a property, as DescribeConfigs shows it."""
        layers: list[tuple[int, str]] = []
        if name in self.brokers.get(self.node, {}):
            layers.append((DYNAMIC_BROKER_CONFIG, self.brokers[self.node][name]))
        if name in self.default:
            layers.append((DYNAMIC_DEFAULT_BROKER_CONFIG, self.default[name]))
        static = self.static.get(name, self.config.values.get(name, ""))
        if name in BROKER_DEFAULTS and static == BROKER_DEFAULTS[name]:
            layers.append((DEFAULT_CONFIG, static))
        else:
            layers.append((STATIC_BROKER_CONFIG, static))
            if name in BROKER_DEFAULTS:
                layers.append((DEFAULT_CONFIG, BROKER_DEFAULTS[name]))
        source, value = layers[0]
        return Resolved(value, source, tuple(layers))

    def dynamic_default(self) -> dict[str, str]:
        return dict(self.default)

    async def alter(
        self,
        target: str,
        set_values: Mapping[str, str],
        delete: Sequence[str],
        *,
        replace: bool = False,
    ) -> None:
        """Changes the cluster default ('') or one broker's values (already checked);
        `replace` (legacy AlterConfigs) drops every other value of that resource."""

        def compute(data: bytes | None) -> bytes | None:
            default, brokers = _decode(data)
            values = default if target == "" else brokers.setdefault(target, {})
            before = dict(values)
            if replace:
                values.clear()
            for name in delete:
                values.pop(name, None)
            values.update(set_values)
            return None if values == before else _encode(default, brokers)

        await self.document.change(compute)


def open_dynamic_configs(
    config: BrokerConfig, node_id: int, storage: StorageEngine, cluster_url: str
) -> DynamicBrokerConfigs:
    """The cluster's document when lockgate.cluster names one, else the single node's (read
    at once, so topics load with the dynamic values)."""
    document = open_document(storage, cluster_url, "broker-configs", BROKER_CONFIGS_FILE)
    return DynamicBrokerConfigs(config, node_id, document)
