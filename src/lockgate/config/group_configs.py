# Group configs (ConfigResource type GROUP = 32, KIP-848 and KIP-932): per-group overrides of
# the group coordinator's broker settings, with the names, types, defaults and checks of Kafka
# 4.4's GroupConfig. The overrides of every group are one document (lockgate.storage.documents):
# the single node's storage engine (`group-configs.json`) or, in a cluster, the etcd key
# `group-configs`, watched by every broker, so a change made through any broker applies on all.
# As in Kafka (which keeps them in the metadata log), they are apart from the groups: a group
# that does not exist (yet) may have some, and DeleteGroups leaves them.
#
# Invariants: only known names whose values passed Kafka's checks are stored, normalised as
# Kafka's ConfigDef parses them (trimmed, booleans lower-case, lists joined by commas), and a
# group without overrides has no entry. What a group uses is its override clamped into the
# broker's bounds of the day (GroupConfig.evaluate: the bounds may have changed since the value
# was set), else the broker's value.
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lockgate.config.properties import BROKER_DEFAULTS, BrokerConfig, ConfigError, TopicConfigSpec
from lockgate.config.properties import check_value as check_typed_value
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.storage.documents import Document, open_document
from lockgate.storage.engine import StorageEngine

GROUP_CONFIGS_FILE = "group-configs.json"

# DescribeConfigsResponse.ConfigSource values a group config shows
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
GROUP_CONFIG = 8

# IncrementalAlterConfigs' operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

MAX_VALUE_CHARS = 32767  # Kafka's ConfigRecord keeps a value of at most Short.MAX_VALUE

# Kafka 4.4's defaults of the broker properties behind group configs that lockgate's broker
# does not otherwise read (the share and streams groups' ones): a value given with --set or
# --config wins, as for any property.
GROUP_BROKER_DEFAULTS: dict[str, str] = {
    "group.consumer.assignment.interval.ms": "1000",
    "group.consumer.min.assignment.interval.ms": "0",
    "group.consumer.max.assignment.interval.ms": "15000",
    "group.consumer.assignor.offload.enable": "true",
    "group.share.record.lock.duration.ms": "30000",
    "group.share.min.record.lock.duration.ms": "15000",
    "group.share.max.record.lock.duration.ms": "60000",
    "group.share.delivery.count.limit": "5",
    "group.share.min.delivery.count.limit": "2",
    "group.share.max.delivery.count.limit": "10",
    "group.share.partition.max.record.locks": "2000",
    "group.share.min.partition.max.record.locks": "100",
    "group.share.max.partition.max.record.locks": "4000",
    "group.share.min.assignment.interval.ms": "0",
    "group.share.max.assignment.interval.ms": "15000",
    "group.share.assignor.offload.enable": "true",
    "group.streams.session.timeout.ms": "45000",
    "group.streams.min.session.timeout.ms": "45000",
    "group.streams.max.session.timeout.ms": "60000",
    "group.streams.heartbeat.interval.ms": "5000",
    "group.streams.min.heartbeat.interval.ms": "5000",
    "group.streams.max.heartbeat.interval.ms": "15000",
    "group.streams.num.standby.replicas": "0",
    "group.streams.max.standby.replicas": "2",
    "group.streams.initial.rebalance.delay.ms": "3000",
    "group.streams.assignment.interval.ms": "1000",
    "group.streams.min.assignment.interval.ms": "0",
    "group.streams.max.assignment.interval.ms": "15000",
    "group.streams.assignor.offload.enable": "true",
    "group.streams.task.offset.interval.ms": "60000",
    "group.streams.min.task.offset.interval.ms": "15000",
    "group.streams.num.warmup.replicas": "2",
    "group.streams.max.warmup.replicas": "20",
    "group.streams.rack.aware.assignment.tags": "",
    "group.streams.acceptable.recovery.lag": "10000",
    "group.streams.assignors": "sticky",
}


@dataclass(frozen=True, slots=True)
class GroupConfigSpec:
    """One of Kafka 4.4's group configs: its type (ConfigDef's), ConfigDef's own validator
    (`at_least`, `choices`, or a named one), the broker property it overrides (its synonym and
    default; None: a fixed default) and the broker properties bounding it (lowest, highest)."""

    name: str
    kind: str
    broker_property: str | None
    default: str = ""  # the default when there is no broker property
    at_least: int | None = None
    choices: tuple[str, ...] = ()
    lowest: str | None = None
    highest: str | None = None
    internal: bool = False  # ConfigDef.defineInternal: listed only when set
    validator: str = ""  # "auto-offset-reset", "tags", "assignor", "dlq-topic"


def _bounded(name: str, kind: str, family: str, setting: str, at_least: int) -> GroupConfigSpec:
    """A config bounded by the broker's group.<family>.min.<setting> and .max.<setting>."""
    return GroupConfigSpec(
        name,
        kind,
        f"group.{family}.{setting}",
        at_least=at_least,
        lowest=f"group.{family}.min.{setting}",
        highest=f"group.{family}.max.{setting}",
    )


# In Kafka's order of definition, which is the order ConfigDef parses (and refuses) them in
GROUP_CONFIGS: dict[str, GroupConfigSpec] = {
    spec.name: spec
    for spec in (
        _bounded("consumer.session.timeout.ms", "int", "consumer", "session.timeout.ms", 1),
        _bounded("consumer.heartbeat.interval.ms", "int", "consumer", "heartbeat.interval.ms", 1),
        _bounded("consumer.assignment.interval.ms", "int", "consumer", "assignment.interval.ms", 0),
        GroupConfigSpec(
            "consumer.assignor.offload.enable",
            "boolean",
            "group.consumer.assignor.offload.enable",
            internal=True,
        ),
        _bounded("share.session.timeout.ms", "int", "share", "session.timeout.ms", 1),
        _bounded("share.heartbeat.interval.ms", "int", "share", "heartbeat.interval.ms", 1),
        _bounded("share.record.lock.duration.ms", "int", "share", "record.lock.duration.ms", 1000),
        _bounded("share.delivery.count.limit", "int", "share", "delivery.count.limit", 2),
        GroupConfigSpec(
            "share.partition.max.record.locks",
            "int",
            "group.share.partition.max.record.locks",
            at_least=100,
            lowest="group.share.min.partition.max.record.locks",
            highest="group.share.max.partition.max.record.locks",
        ),
        GroupConfigSpec(
            "share.auto.offset.reset", "string", None, "latest", validator="auto-offset-reset"
        ),
        GroupConfigSpec(
            "share.isolation.level",
            "string",
            None,
            "read_uncommitted",
            choices=("read_committed", "read_uncommitted"),
        ),
        GroupConfigSpec("share.renew.acknowledge.enable", "boolean", None, "true"),
        _bounded("share.assignment.interval.ms", "int", "share", "assignment.interval.ms", 0),
        GroupConfigSpec(
            "share.assignor.offload.enable",
            "boolean",
            "group.share.assignor.offload.enable",
            internal=True,
        ),
        _bounded("streams.session.timeout.ms", "int", "streams", "session.timeout.ms", 1),
        _bounded("streams.heartbeat.interval.ms", "int", "streams", "heartbeat.interval.ms", 1),
        GroupConfigSpec(
            "streams.num.standby.replicas",
            "int",
            "group.streams.num.standby.replicas",
            at_least=0,
            highest="group.streams.max.standby.replicas",
        ),
        GroupConfigSpec(
            "streams.initial.rebalance.delay.ms",
            "int",
            "group.streams.initial.rebalance.delay.ms",
            at_least=0,
        ),
        _bounded("streams.assignment.interval.ms", "int", "streams", "assignment.interval.ms", 0),
        GroupConfigSpec(
            "streams.assignor.offload.enable",
            "boolean",
            "group.streams.assignor.offload.enable",
            internal=True,
        ),
        GroupConfigSpec(
            "streams.task.offset.interval.ms",
            "int",
            "group.streams.task.offset.interval.ms",
            at_least=1,
            lowest="group.streams.min.task.offset.interval.ms",
            internal=True,
        ),
        GroupConfigSpec(
            "streams.num.warmup.replicas",
            "int",
            "group.streams.num.warmup.replicas",
            at_least=0,
            highest="group.streams.max.warmup.replicas",
            internal=True,
        ),
        GroupConfigSpec(
            "streams.rack.aware.assignment.tags",
            "list",
            "group.streams.rack.aware.assignment.tags",
            validator="tags",
        ),
        GroupConfigSpec(
            "streams.acceptable.recovery.lag",
            "long",
            "group.streams.acceptable.recovery.lag",
            at_least=0,
            internal=True,
        ),
        GroupConfigSpec(
            "streams.assignor.name", "string", "group.streams.assignors", validator="assignor"
        ),
        GroupConfigSpec("errors.deadletterqueue.topic.name", "string", None, ""),
        GroupConfigSpec("errors.deadletterqueue.copy.record.enable", "boolean", None, "false"),
    )
}

# Kafka checks the bounds in this order (GroupConfig.validateValues), not the table's
_BOUND_ORDER = (
    "consumer.heartbeat.interval.ms",
    "consumer.session.timeout.ms",
    "consumer.assignment.interval.ms",
    "share.heartbeat.interval.ms",
    "share.session.timeout.ms",
    "share.record.lock.duration.ms",
    "share.delivery.count.limit",
    "share.partition.max.record.locks",
    "share.assignment.interval.ms",
    "streams.heartbeat.interval.ms",
    "streams.session.timeout.ms",
    "streams.num.standby.replicas",
    "streams.assignment.interval.ms",
    "streams.task.offset.interval.ms",
    "streams.num.warmup.replicas",
)
# (session timeout, heartbeat interval) pairs: the session must be the longer
_SESSION_PAIRS = tuple(
    (f"{family}.session.timeout.ms", f"{family}.heartbeat.interval.ms")
    for family in ("consumer", "share", "streams")
)
_LIST_SEPARATOR = re.compile(r"\s*,\s*")
# java.time.Duration.parse's ISO-8601 form: PnDTnHnMn.nS, signs allowed on the whole and on
# each part, letters in either case
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def iso_duration_ms(text: str) -> int | None:
    """Milliseconds of an ISO-8601 duration as java.time.Duration.parse reads it (fractions
    of a millisecond dropped); None if it is not one."""
    match = _ISO_DURATION.fullmatch(text)
    if match is None:
        return None
    sign, days, time_part, hours, minutes, seconds, fraction = match.groups()
    if days is None and time_part is None:
        return None
    if time_part is not None and hours is None and minutes is None and seconds is None:
        return None  # "PT" needs at least one part
    nanos = int(seconds or 0) * 10**9
    if fraction:
        scaled = int(fraction.ljust(9, "0"))
        nanos += -scaled if (seconds or "").startswith("-") else scaled
    total = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60) * 10**9
    total += nanos
    if sign == "-":
        total = -total
    return int(total / 10**6)


def _auto_offset_reset_is_valid(value: str) -> bool:
    """Kafka's ShareGroupAutoOffsetResetStrategy: earliest, latest, by_duration:<duration>
    (not negative); case matters."""
    if value in ("earliest", "latest"):
        return True
    if not value.startswith("by_duration:"):
        return False
    duration = iso_duration_ms(value[len("by_duration:") :])
    return duration is not None and duration >= 0


def _invalid_config(message: str) -> KafkaProtocolError:
    return KafkaProtocolError(ErrorCode.invalid_config, message)


def broker_value(config: BrokerConfig, name: str) -> str:
    """A broker property behind a group config: as given, else Kafka's default."""
    value = config.values.get(name)
    return value if value is not None else GROUP_BROKER_DEFAULTS[name]


def broker_int(config: BrokerConfig, name: str) -> int:
    try:
        return int(broker_value(config, name))
    except ValueError:
        raise ConfigError(f"{name}={broker_value(config, name)!r} is not a number") from None


def _assignor_names(config: BrokerConfig) -> list[str]:
    """The streams assignors the broker registers (group.streams.assignors), by name."""
    listed = broker_value(config, "group.streams.assignors").strip()
    return [item for item in _LIST_SEPARATOR.split(listed) if item]


def default_value(config: BrokerConfig, spec: GroupConfigSpec) -> str:
    """What a group without an override of `spec` has: the broker's value (the first
    registered assignor for streams.assignor.name), else Kafka's fixed default."""
    if spec.broker_property is None:
        return spec.default
    if spec.validator == "assignor":
        names = _assignor_names(config)
        return names[0] if names else ""
    return broker_value(config, spec.broker_property)


def _parse(spec: GroupConfigSpec, value: str) -> str:
    """ConfigDef's parsing and validator of one value: the value normalised, or
    INVALID_CONFIG with Kafka's message."""
    typed = TopicConfigSpec(
        spec.name, None, spec.default, spec.kind, spec.at_least, None, spec.choices
    )
    try:
        normalised = check_typed_value(typed, value)
    except ConfigError as exc:
        raise _invalid_config(str(exc)) from None
    if spec.validator == "auto-offset-reset" and not _auto_offset_reset_is_valid(normalised):
        raise _invalid_config(
            f"Invalid value {normalised} for configuration {spec.name}: Invalid value "
            f"`{normalised}` for configuration {spec.name}. The value must be either 'earliest', "
            "'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
        )
    return normalised


def validate(overrides: Mapping[str, str], config: BrokerConfig) -> dict[str, str]:
    """A group's complete set of overrides checked as Kafka's GroupConfig.validate does, in
    its order (names, duplicate tags, each value's type and validator, the broker's bounds,
    session above heartbeat, the dead-letter topic name): the values normalised, or
    INVALID_CONFIG with Kafka's message."""
    for name in overrides:
        if name not in GROUP_CONFIGS:
            raise _invalid_config(f"Unknown group config name: {name}")
    tags = overrides.get("streams.rack.aware.assignment.tags")
    if tags is not None:
        raw = _LIST_SEPARATOR.split(tags.strip()) if tags.strip() else []
        if len(set(raw)) != len(raw):
            raise _invalid_config(
                "streams.rack.aware.assignment.tags must not contain duplicate tag keys."
            )
    parsed = {
        name: _parse(spec, overrides[name])
        for name, spec in GROUP_CONFIGS.items()
        if name in overrides
    }
    for name in _BOUND_ORDER:
        if name not in parsed:
            continue
        spec = GROUP_CONFIGS[name]
        value = int(parsed[name])
        low = broker_int(config, spec.lowest) if spec.lowest else None
        high = broker_int(config, spec.highest) if spec.highest else None
        if low is not None and high is not None:
            if not low <= value <= high:
                raise _invalid_config(f"{name} must be in the range {low} to {high} inclusive.")
        elif high is not None and value > high:
            raise _invalid_config(f"{name} must be less than or equal to {high}")
        elif low is not None and value < low:
            raise _invalid_config(f"{name} must be greater than or equal to {low}")
    assignor = parsed.get("streams.assignor.name")
    if assignor is not None and assignor not in (names := _assignor_names(config)):
        raise _invalid_config(
            f"streams.assignor.name '{assignor}' is not a registered task assignor. "
            f"Registered assignors are: [{', '.join(names)}]."
        )
    for session, heartbeat in _SESSION_PAIRS:
        if session in parsed or heartbeat in parsed:
            effective_session = int(
                parsed.get(session, default_value(config, GROUP_CONFIGS[session]))
            )
            effective_heartbeat = int(
                parsed.get(heartbeat, default_value(config, GROUP_CONFIGS[heartbeat]))
            )
            if effective_session <= effective_heartbeat:
                raise _invalid_config(f"{session} must be greater than {heartbeat}")
    if parsed.get("errors.deadletterqueue.topic.name", "").startswith("__"):
        raise _invalid_config(
            "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'"
        )
    return parsed


def clamped(name: str, value: str, config: BrokerConfig) -> str:
    """An override as the group uses it: within the broker's bounds of the day (Kafka's
    GroupConfig.evaluate, which logs and caps a value set under wider bounds)."""
    spec = GROUP_CONFIGS[name]
    if spec.lowest is None and spec.highest is None:
        return value
    number = int(value)
    if spec.lowest is not None:
        number = max(number, broker_int(config, spec.lowest))
    if spec.highest is not None:
        number = min(number, broker_int(config, spec.highest))
    return str(number)


def incremental(
    current: Mapping[str, str], changes: Iterable[tuple[str, int, str | None]]
) -> dict[str, str]:
    """A group's overrides after IncrementalAlterConfigs' operations, before validate():
    SET and DELETE (of any name: deleting what is not there changes nothing); APPEND and
    SUBTRACT: INVALID_CONFIG, as no group config is a LIST to Kafka's controller; a value
    longer than a config record holds: INVALID_CONFIG."""
    result = dict(current)
    for name, operation, value in changes:
        if operation in (APPEND, SUBTRACT):
            verb = "APPEND" if operation == APPEND else "SUBTRACT"
            raise _invalid_config(f"Can't {verb} to key {name} because its type is not LIST.")
        if operation == DELETE:
            result.pop(name, None)
        elif value is not None:
            result[name] = value
    _check_sizes(result, current)
    return result


def replaced(current: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """A group's overrides after the legacy AlterConfigs: exactly `values`."""
    _check_sizes(values, current)
    return dict(values)


def _check_sizes(new: Mapping[str, str], current: Mapping[str, str]) -> None:
    for name, value in new.items():
        if current.get(name) != value and len(value) > MAX_VALUE_CHARS:
            raise _invalid_config(
                "The configuration value cannot be added because it exceeds the maximum value "
                f"size of {MAX_VALUE_CHARS} bytes."
            )


def check_group_name(group: str, describing: bool) -> None:
    """The empty name (Kafka's default resource) is no group: INVALID_REQUEST."""
    if not group:
        message = (
            "Group name must not be empty"
            if describing
            else "Default group resources are not allowed."
        )
        raise KafkaProtocolError(ErrorCode.invalid_request, message)


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    """One group config as DescribeConfigs shows it: its value and source, and the layers
    beneath (name, value, source), most important first (Kafka's synonyms)."""

    name: str
    value: str
    source: int
    kind: str
    synonyms: tuple[tuple[str, str, int], ...]


def _broker_layers(config: BrokerConfig, spec: GroupConfigSpec) -> list[tuple[str, str, int]]:
    """The broker property behind a config as Kafka lists its synonyms: the value given at
    start-up (STATIC_BROKER_CONFIG) over Kafka's default (DEFAULT_CONFIG)."""
    if spec.broker_property is None:
        return [(spec.name, spec.default, DEFAULT_CONFIG)]
    name = spec.broker_property
    default = BROKER_DEFAULTS.get(name, GROUP_BROKER_DEFAULTS.get(name, ""))
    given = config.values.get(name)
    layers = []
    if given is not None and given != default:
        layers.append((name, given, STATIC_BROKER_CONFIG))
    layers.append((name, default, DEFAULT_CONFIG))
    return layers


def describe(
    overrides: Mapping[str, str], config: BrokerConfig, keys: Sequence[str] | None = None
) -> list[DescribedConfig]:
    """Every config of a group, by name: its override (GROUP_CONFIG) or the broker's value
    with that property's source; internal configs only when set on the group."""
    described = []
    for name, spec in sorted(GROUP_CONFIGS.items()):
        if keys and name not in keys:
            continue
        if spec.internal and name not in overrides:
            continue
        layers = _broker_layers(config, spec)
        if name in overrides:
            layers.insert(0, (name, overrides[name], GROUP_CONFIG))
            value = overrides[name]
        else:
            value = default_value(config, spec)
        described.append(DescribedConfig(name, value, layers[0][2], spec.kind, tuple(layers)))
    return described


def _decode(data: bytes | None) -> dict[str, dict[str, str]]:
    if not data:
        return {}
    document = json.loads(data)
    return {str(group): dict(values) for group, values in document.get("groups", {}).items()}


def _encode(groups: Mapping[str, Mapping[str, str]]) -> bytes:
    kept = {group: dict(sorted(values.items())) for group, values in groups.items() if values}
    return json.dumps({"version": 1, "groups": dict(sorted(kept.items()))}).encode()


class GroupConfigs:
    """The overrides of every group, as the document holds them (`groups`), and what each
    group uses."""

    def __init__(self, config: BrokerConfig, document: Document) -> None:
        self.config = config
        self.document = document
        self.groups: dict[str, dict[str, str]] = {}
        document.listeners.append(self._take)
        self._take(document.value)

    def _take(self, data: bytes | None) -> None:
        self.groups = _decode(data)

    async def start(self) -> None:
        await self.document.start()

    async def close(self) -> None:
        await self.document.close()

    def overrides(self, group: str) -> dict[str, str]:
        return dict(self.groups.get(group, {}))

    def describe(self, group: str, keys: Sequence[str] | None = None) -> list[DescribedConfig]:
        check_group_name(group, describing=True)
        return describe(self.groups.get(group, {}), self.config, keys)

    def override_int(self, group: str, name: str) -> int | None:
        """The group's override of an integer config within the broker's bounds, or None."""
        value = self.groups.get(group, {}).get(name)
        return None if value is None else int(clamped(name, value, self.config))

    def consumer_session_timeout_ms(self, group: str) -> int | None:
        return self.override_int(group, "consumer.session.timeout.ms")

    def consumer_heartbeat_interval_ms(self, group: str) -> int | None:
        return self.override_int(group, "consumer.heartbeat.interval.ms")

    async def alter(
        self,
        group: str,
        *,
        changes: Sequence[tuple[str, int, str | None]] = (),
        replace: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Applies IncrementalAlterConfigs' `changes`, or the legacy AlterConfigs' `replace`
        (the group's whole set), checked whole against the latest document: INVALID_REQUEST /
        INVALID_CONFIG with nothing changed. `validate_only` checks and stores nothing."""
        check_group_name(group, describing=False)

        def resulting(groups: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
            current = groups.get(group, {})
            new = (
                replaced(current, replace) if replace is not None else incremental(current, changes)
            )
            return validate(new, self.config)

        if validate_only:
            resulting(self.groups)
            return

        def compute(data: bytes | None) -> bytes | None:
            groups = _decode(data)
            new = resulting(groups)
            if new == groups.get(group, {}):
                return None
            groups[group] = new
            return _encode(groups)

        await self.document.change(compute)


def open_group_configs(
    config: BrokerConfig, storage: StorageEngine, cluster_url: str
) -> GroupConfigs:
    """The cluster's document when lockgate.cluster names one, else the single node's (read
    at once, so the groups load with their configs)."""
    document = open_document(storage, cluster_url, "group-configs", GROUP_CONFIGS_FILE)
    return GroupConfigs(config, document)
