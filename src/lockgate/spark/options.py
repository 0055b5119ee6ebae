# spark/options.py — the connector's options, named as in Spark's Kafka connector, parsed once
# on the driver into plain picklable values.
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from lockgate.client.cluster import TopicPartition
from lockgate.client.security import ClientSecurity
from lockgate.client.security_options import security_from_properties

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
)
EARLIEST, LATEST = -2, -1


class OptionError(ValueError):
    """An option is missing or malformed; the message names it."""


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()
    starting: str = "latest"  # "earliest" | "latest" | JSON {"topic": {"0": offset}}
    ending: str = "latest"
    max_offsets_per_trigger: int | None = None
    read_committed: bool = True
    security: ClientSecurity | None = None  # kafka.security.protocol, kafka.ssl.*, kafka.sasl.*

    def offsets_spec(self, text: str, default: int) -> dict[TopicPartition, int] | int:
        """ "earliest"/"latest" → -2/-1 for every partition, or explicit offsets (-2/-1 allowed
        per partition, as in Spark)."""
        if text in ("earliest", "latest"):
            return EARLIEST if text == "earliest" else LATEST
        try:
            parsed = json.loads(text)
            return {
                TopicPartition(topic, int(p)): int(offset)
                for topic, partitions in parsed.items()
                for p, offset in partitions.items()
            }
        except (ValueError, AttributeError) as exc:
            raise OptionError(f"bad offsets {text!r}: {exc}") from exc


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    transactional_id_prefix: str
    # "delivery.guarantee": exactly_once (the default, 2PC) or at_least_once (an idempotent
    # producer per task, what Spark's own Kafka sink gives; a retried task writes again).
    exactly_once: bool = True
    security: ClientSecurity | None = None  # kafka.security.protocol, kafka.ssl.*, kafka.sasl.*


def _bootstrap(options: Mapping[str, str]) -> str:
    value = options.get("kafka.bootstrap.servers")
    if not value:
        raise OptionError("option kafka.bootstrap.servers is required")
    return value


def _security(options: Mapping[str, str]) -> ClientSecurity | None:
    """The Java client's security options with Spark's "kafka." prefix: security.protocol,
    ssl.truststore.location / ssl.keystore.location (PEM), ssl.key.password, sasl.mechanism,
    sasl.jaas.config (PLAIN or SCRAM login module)."""
    unprefixed = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
    try:
        return security_from_properties(unprefixed)
    except ValueError as exc:
        raise OptionError(f"kafka.* security options: {exc}") from None


def source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Spark's defaults: a batch read starts at the earliest offsets, a stream at the latest."""
    chosen = [name for name in ("subscribe", "subscribePattern", "assign") if options.get(name)]
    if len(chosen) != 1:
        raise OptionError("give exactly one of subscribe, subscribePattern, assign")
    assign: tuple[TopicPartition, ...] = ()
    if options.get("assign"):
        try:
            assign = tuple(
                TopicPartition(topic, int(p))
                for topic, partitions in json.loads(options["assign"]).items()
                for p in partitions
            )
        except (ValueError, AttributeError) as exc:
            raise OptionError(f"bad assign {options['assign']!r}: {exc}") from exc
    pattern = options.get("subscribePattern")
    if pattern is not None:
        re.compile(pattern)
    isolation = options.get("kafka.isolation.level", "read_committed")
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError("kafka.isolation.level must be read_committed or read_uncommitted")
    limit = options.get("maxOffsetsPerTrigger")
    return SourceOptions(
        bootstrap=_bootstrap(options),
        topics=tuple(t.strip() for t in options.get("subscribe", "").split(",") if t.strip()),
        pattern=pattern,
        assign=assign,
        starting=options.get("startingOffsets", "latest" if streaming else "earliest"),
        ending=options.get("endingOffsets", "latest"),
        max_offsets_per_trigger=int(limit) if limit else None,
        read_committed=isolation == "read_committed",
        security=_security(options),
    )


def sink_options(options: Mapping[str, str], default_prefix: str) -> SinkOptions:
    guarantee = options.get("delivery.guarantee", "exactly_once")
    if guarantee not in ("exactly_once", "at_least_once"):
        raise OptionError("delivery.guarantee must be exactly_once or at_least_once")
    return SinkOptions(
        bootstrap=_bootstrap(options),
        topic=options.get("topic"),
        transactional_id_prefix=options.get("transactional.id.prefix", default_prefix),
        exactly_once=guarantee == "exactly_once",
        security=_security(options),
    )
