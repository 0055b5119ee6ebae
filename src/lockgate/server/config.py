# Broker and topic configuration, using Kafka's property names wherever Kafka has one.
#
# Broker properties come from defaults < --config FILE (Java .properties) < --set name=value.
# Topic configs resolve as topic override < the broker property that backs it < default.
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockgate.log.config import LogConfig
from lockgate.protocol.recompress import COMPRESSION_TYPES, target_codec

DAY_MS = 24 * 3600 * 1000

BROKER_DEFAULTS: dict[str, str] = {
    "node.id": "0",
    "listeners": "127.0.0.1:9092",
    "advertised.listeners": "",
    "log.dirs": "lockgate-data",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "log.retention.ms": str(7 * DAY_MS),
    "log.retention.bytes": "-1",
    "log.retention.check.interval.ms": "300000",
    "log.segment.bytes": str(1 << 30),
    "log.roll.ms": str(7 * DAY_MS),
    "log.index.interval.bytes": "4096",
    "log.message.timestamp.type": "CreateTime",
    "log.cleanup.policy": "delete",
    "log.cleaner.enable": "true",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.dedupe.buffer.size": str(128 * 1024 * 1024),
    "log.cleaner.delete.retention.ms": str(DAY_MS),
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleaner.min.compaction.lag.ms": "0",
    "message.max.bytes": "1048588",
    "min.insync.replicas": "1",
    "compression.type": "producer",
    "socket.request.max.bytes": str(100 * 1024 * 1024),
    "queued.max.requests": "500",
    # Kafka's default is -1 (unbounded); lockgate bounds the bytes of requests being read or
    # waiting by default (a request larger than the bound is read alone); <= 0 is unbounded.
    "queued.max.request.bytes": str(200 * 1024 * 1024),
    "connections.max.idle.ms": "600000",
    "max.connections": "2147483647",
    "max.connections.per.ip": "2147483647",
    "max.connections.per.ip.overrides": "",
    "fetch.max.bytes": str(55 * 1024 * 1024),
    # DescribeTopicPartitions answers at most this many partitions per response (Kafka's)
    "max.request.partition.size.limit": "2000",
    "max.incremental.fetch.session.cache.slots": "1000",
    "transaction.state.log.num.partitions": "50",
    "offsets.topic.num.partitions": "50",
    # cluster mode: replicas of __consumer_offsets and __transaction_state (a single node keeps
    # one), and the transaction log's min.insync.replicas
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "offsets.topic.segment.bytes": str(100 * 1024 * 1024),
    "transaction.state.log.segment.bytes": str(100 * 1024 * 1024),
    "transaction.max.timeout.ms": "900000",
    "transaction.two.phase.commit.enable": "false",
    "transactional.id.expiration.ms": str(7 * DAY_MS),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    # The consumer group protocol (KIP-848): server-side assignors (the first is the default),
    # the members' session timeout and heartbeat interval (each within its min/max), max members
    "group.consumer.assignors": "uniform,range",
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.min.session.timeout.ms": "45000",
    "group.consumer.max.session.timeout.ms": "60000",
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.min.heartbeat.interval.ms": "5000",
    "group.consumer.max.heartbeat.interval.ms": "15000",
    "group.consumer.max.size": "2147483647",
    # Mixed groups (Kafka 4's online migration): upgrade (a stable classic group converts when a
    # consumer-protocol member joins), downgrade (back when only classic members are left), both
    # (bidirectional) or disabled
    "group.consumer.migration.policy": "bidirectional",
    "offset.metadata.max.bytes": "4096",
    # Kafka's offsets.retention.minutes (an alias of this finer lockgate property): offsets of
    # a group that has been Empty this long (or, without group metadata, committed this long
    # ago) expire (KIP-211)
    "offsets.retention.ms": str(7 * DAY_MS),
    "offsets.retention.check.interval.ms": "600000",
    "producer.id.expiration.ms": str(DAY_MS),
    "producer.id.expiration.check.interval.ms": "600000",
    # lockgate's own: "fsync" answers acks=all produces only after their data is fsynced
    # (group commit); "page-cache" answers once the data is written, like Kafka's default.
    "lockgate.durability": "fsync",
    # Budget of segment-file descriptors kept open (LRU); 0 derives it from RLIMIT_NOFILE
    # (half the soft limit, after raising it to the hard limit at startup).
    "lockgate.max.open.files": "0",
    # Snapshots of the internal partitions' coordinator state, so that a start loads a snapshot
    # plus the records after it: taken this often (for partitions that changed) and at a clean
    # stop; -1 turns them off.
    "lockgate.coordinator.snapshot.interval.ms": "60000",
    # Prometheus endpoint (GET /metrics); -1 turns it off, 0 picks a free port.
    "lockgate.metrics.port": "-1",
    "lockgate.metrics.host": "127.0.0.1",
    # At most this many lockgate_consumer_lag series (group, topic, partition) per scrape.
    "lockgate.metrics.consumer.lag.max.series": "10000",
    # Log lines as text ("plain") or one JSON object per line ("json"); --log-format wins.
    "lockgate.log.format": "plain",
    # Cluster mode: the etcd URL (etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]); empty, the
    # default, is the single-node broker that needs nothing else.
    "lockgate.cluster": "",
    "broker.session.timeout.ms": "9000",
    "broker.heartbeat.interval.ms": "2000",
    "unclean.leader.election.enable": "false",
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.backoff.ms": "1000",
    # Security (docs/security.md). Listeners are NAME://HOST:PORT; a name that is not a
    # security protocol needs listener.security.protocol.map. Every ssl.* and sasl.* property
    # may also be given per listener as listener.name.<name>.<property>.
    "listener.security.protocol.map": (
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    ),
    "inter.broker.listener.name": "",
    "security.inter.broker.protocol": "PLAINTEXT",
    "ssl.keystore.type": "PEM",
    "ssl.keystore.location": "",
    "ssl.keystore.password": "",
    "ssl.key.password": "",
    "ssl.keystore.certificate.chain": "",
    "ssl.keystore.key": "",
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": "",
    "ssl.truststore.password": "",
    "ssl.truststore.certificates": "",
    "ssl.client.auth": "none",
    "ssl.protocol": "TLSv1.3",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.cipher.suites": "",
    "ssl.endpoint.identification.algorithm": "https",
    # Kafka's default is GSSAPI, which lockgate does not serve.
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    "sasl.jaas.config": "",
    "connections.max.reauth.ms": "0",
    "connection.failed.authentication.delay.ms": "100",
    # The authorizer: empty (no authorization, Kafka's default) or Kafka's StandardAuthorizer
    # (or the older AclAuthorizer) class name, which both select lockgate's ACL authorizer.
    "authorizer.class.name": "",
    "super.users": "",
    "allow.everyone.if.no.acl.found": "false",
    # Client quotas (KIP-13, KIP-124): rates are measured over quota.window.num windows of
    # quota.window.size.seconds.
    "quota.window.num": "11",
    "quota.window.size.seconds": "1",
}

# Kafka's aliases with coarser units, finest first: the finest one set wins, whatever the order
# they were given in; a negative time means unlimited (-1).
_ALIASES = {
    "log.retention.minutes": ("log.retention.ms", 60 * 1000),
    "log.retention.hours": ("log.retention.ms", 3600 * 1000),
    "log.roll.hours": ("log.roll.ms", 3600 * 1000),
    "log.dir": ("log.dirs", 0),
    "offsets.retention.minutes": ("offsets.retention.ms", 60 * 1000),
}


@dataclass(frozen=True, slots=True)
class TopicConfigSpec:
    name: str
    broker_property: str | None
    default: str
    kind: str  # "long", "int", "string", "choice:a,b", "bool", "policy" (a list), "ratio"


TOPIC_CONFIGS: dict[str, TopicConfigSpec] = {
    spec.name: spec
    for spec in (
        TopicConfigSpec("cleanup.policy", "log.cleanup.policy", "delete", "policy"),
        TopicConfigSpec(
            "delete.retention.ms", "log.cleaner.delete.retention.ms", str(DAY_MS), "long"
        ),
        TopicConfigSpec(
            "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", "0.5", "ratio"
        ),
        TopicConfigSpec("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", "0", "long"),
        TopicConfigSpec("retention.ms", "log.retention.ms", str(7 * DAY_MS), "long"),
        TopicConfigSpec("retention.bytes", "log.retention.bytes", "-1", "long"),
        TopicConfigSpec("segment.bytes", "log.segment.bytes", str(1 << 30), "int"),
        TopicConfigSpec("segment.ms", "log.roll.ms", str(7 * DAY_MS), "long"),
        TopicConfigSpec("index.interval.bytes", "log.index.interval.bytes", "4096", "int"),
        TopicConfigSpec(
            "message.timestamp.type",
            "log.message.timestamp.type",
            "CreateTime",
            "choice:CreateTime,LogAppendTime",
        ),
        TopicConfigSpec("max.message.bytes", "message.max.bytes", "1048588", "int"),
        TopicConfigSpec("min.insync.replicas", "min.insync.replicas", "1", "int"),
        TopicConfigSpec(
            "unclean.leader.election.enable", "unclean.leader.election.enable", "false", "bool"
        ),
        TopicConfigSpec(
            "compression.type",
            "compression.type",
            "producer",
            "choice:" + ",".join(COMPRESSION_TYPES),
        ),
    )
}


class ConfigError(ValueError):
    pass


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset: key=value or key: value lines, # and ! comments."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            raise ConfigError(f"not a property line: {raw!r}")
        result[line[:cut].strip()] = line[cut + 1 :].strip()
    return result


# Kafka's validators' lower bounds (-1 means "unlimited" for the retention settings).
_MINIMUMS = {
    "segment.bytes": 14,
    "segment.ms": 1,
    "retention.ms": -1,
    "retention.bytes": -1,
    "max.message.bytes": 0,
    "index.interval.bytes": 0,
    "min.insync.replicas": 1,
    "delete.retention.ms": 0,
    "min.compaction.lag.ms": 0,
}

CLEANUP_POLICIES = ("delete", "compact")


def check_value(spec: TopicConfigSpec, value: str) -> str:
    """Normalises a topic config value or raises ConfigError with the reason."""
    kind = spec.kind
    if kind in ("long", "int"):
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{spec.name}={value!r} is not a number") from None
        if kind == "int" and not -(2**31) <= number < 2**31:
            raise ConfigError(f"{spec.name}={value} is out of range")
        minimum = _MINIMUMS.get(spec.name)
        if minimum is not None and number < minimum:
            raise ConfigError(f"{spec.name}={value} is below the minimum of {minimum}")
        return str(number)
    if kind == "policy":  # a list: "compact,delete" as Kafka, in any order, no repeats
        policies = [p.strip() for p in value.split(",")]
        if (
            not policies
            or len(set(policies)) != len(policies)
            or not all(p in CLEANUP_POLICIES for p in policies)
        ):
            raise ConfigError(f"{spec.name}={value!r}: use delete, compact or compact,delete")
        return ",".join(sorted(policies))
    if kind == "ratio":
        try:
            ratio = float(value)
        except ValueError:
            raise ConfigError(f"{spec.name}={value!r} is not a number") from None
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"{spec.name}={value} is not in [0, 1]")
        return value
    if kind.startswith("choice:"):
        choices = kind[len("choice:") :].split(",")
        if value not in choices:
            supported = ", ".join(choices)
            raise ConfigError(f"{spec.name}={value!r} is not supported (supported: {supported})")
        return value
    if kind == "bool":
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{spec.name}={value!r}: use true or false")
        return value.lower()
    return value


def _scaled(alias: str, value: str, unit: int) -> str:
    if unit == 0:
        return value
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{alias}={value!r} is not a number") from None
    return "-1" if number < 0 else str(number * unit)


class BrokerConfig:
    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        self.values = dict(BROKER_DEFAULTS)
        given = dict(overrides or {})
        for key, value in given.items():
            if key not in _ALIASES:
                self.values[key] = value
        for alias, (target, unit) in _ALIASES.items():  # finest first
            if alias not in given or target in given:
                continue
            given[target] = self.values[target] = _scaled(alias, given[alias], unit)

    def get(self, name: str) -> str:
        return self.values[name]

    def integer(self, name: str) -> int:
        try:
            return int(self.values[name])
        except ValueError:
            raise ConfigError(f"{name}={self.values[name]!r} is not a number") from None

    def flag(self, name: str) -> bool:
        return self.values[name].lower() == "true"

    @property
    def durable(self) -> bool:
        mode = self.values["lockgate.durability"]
        if mode not in ("fsync", "page-cache"):
            raise ConfigError(f"lockgate.durability={mode!r}: use fsync or page-cache")
        return mode == "fsync"

    def topic_default(self, name: str) -> str:
        spec = TOPIC_CONFIGS[name]
        if spec.broker_property and spec.broker_property in self.values:
            return self.values[spec.broker_property]
        return spec.default

    def resolve_topic(self, overrides: Mapping[str, str]) -> dict[str, str]:
        return {name: overrides.get(name, self.topic_default(name)) for name in TOPIC_CONFIGS}

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        resolved = self.resolve_topic(overrides)
        return LogConfig(
            segment_bytes=int(resolved["segment.bytes"]),
            segment_ms=int(resolved["segment.ms"]),
            retention_ms=int(resolved["retention.ms"]),
            retention_bytes=int(resolved["retention.bytes"]),
            index_interval_bytes=int(resolved["index.interval.bytes"]),
            log_append_time=resolved["message.timestamp.type"] == "LogAppendTime",
            max_message_bytes=int(resolved["max.message.bytes"]),
            delete_policy="delete" in resolved["cleanup.policy"].split(","),
            compact="compact" in resolved["cleanup.policy"].split(","),
            delete_retention_ms=int(resolved["delete.retention.ms"]),
            min_cleanable_dirty_ratio=float(resolved["min.cleanable.dirty.ratio"]),
            min_compaction_lag_ms=int(resolved["min.compaction.lag.ms"]),
            min_insync_replicas=int(resolved["min.insync.replicas"]),
            unclean_leader_election=resolved["unclean.leader.election.enable"] == "true",
            compression_codec=target_codec(resolved["compression.type"]),
        )


def parse_listener(value: str) -> tuple[str, int]:
    """'HOST:PORT' or 'PLAINTEXT://HOST:PORT' → (host, port)."""
    address = value.split(",")[0].strip()
    if "://" in address:
        address = address.split("://", 1)[1]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"listener {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)
