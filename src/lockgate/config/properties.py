# Broker and topic configuration, using Kafka's property names wherever Kafka has one.
#
# Broker properties come from defaults < --config FILE (Java .properties) < --set name=value.
# Topic configs resolve as topic override < the broker property that backs it < default.
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from lockgate.config.log import LogConfig
from lockgate.protocol.recompress import target_codec

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
    "log.cleaner.max.compaction.lag.ms": str(2**63 - 1),
    # Kafka 4.4's broker defaults of the other topic configs (TOPIC_CONFIGS says which of
    # them change nothing in lockgate)
    "log.roll.jitter.ms": "0",
    "log.index.size.max.bytes": "10485760",
    "log.flush.interval.messages": str(2**63 - 1),
    "log.flush.interval.ms": str(2**63 - 1),
    "log.segment.delete.delay.ms": "60000",
    "log.preallocate": "false",
    "log.message.timestamp.before.max.ms": str(2**63 - 1),
    "log.message.timestamp.after.max.ms": "3600000",
    "max.decompressed.message.bytes": "2147483639",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "log.local.retention.ms": "-2",
    "log.local.retention.bytes": "-2",
    "log.remote.copy.lag.ms": "0",
    "log.remote.copy.lag.bytes": "-1",
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
    # the share coordinator (KIP-932) and __share_group_state; a cluster creates the topic with
    # the replication factor and min ISR (Kafka's defaults assume 3 brokers)
    "share.coordinator.state.topic.num.partitions": "50",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "share.coordinator.state.topic.segment.bytes": str(100 * 1024 * 1024),
    "share.coordinator.snapshot.update.records.per.snapshot": "500",
    "share.coordinator.state.topic.prune.interval.ms": "300000",
    "share.coordinator.cold.partition.snapshot.interval.ms": "300000",
    "share.coordinator.write.timeout.ms": "5000",
    "share.coordinator.threads": "1",
    # the share-partition leader: share sessions per broker (SHARE_SESSION_LIMIT_REACHED past it)
    "group.share.max.share.sessions": "2000",
    "share.coordinator.load.buffer.size": str(5 * 1024 * 1024),
    "share.coordinator.state.topic.compression.codec": "0",
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
    # Share groups (KIP-932): the members' session timeout and heartbeat interval (each within
    # its min/max; a group's share.* configs win), max members, the one assignor (simple), how
    # long a new target assignment waits after the last one, and (Kafka's internal setting)
    # after how long share partitions still initializing are asked for again
    "group.share.session.timeout.ms": "45000",
    "group.share.min.session.timeout.ms": "45000",
    "group.share.max.session.timeout.ms": "60000",
    "group.share.heartbeat.interval.ms": "5000",
    "group.share.min.heartbeat.interval.ms": "5000",
    "group.share.max.heartbeat.interval.ms": "15000",
    "group.share.max.size": "200",
    "group.share.assignors": "simple",
    "group.share.assignment.interval.ms": "1000",
    "group.share.initialize.retry.interval.ms": "30000",
    # Tiered storage (KIP-405): off unless remote.log.storage.system.enable; a pass over the
    # tiered partitions led here every task interval; the object store's settings are the
    # properties under the manager's prefix (rsm.config.s3.endpoint, .bucket, ...; see
    # storage/object_store.py), credentials there or from the AWS environment variables
    "remote.log.storage.system.enable": "false",
    "remote.log.manager.task.interval.ms": "30000",
    "remote.fetch.max.wait.ms": "500",  # a Fetch's remote read at most (then no records)
    "remote.log.storage.manager.impl.prefix": "rsm.config.",
    # lockgate's: the memory holding chunks of tiered segments read for fetches (and read ahead)
    "lockgate.remote.fetch.cache.bytes": str(64 << 20),
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
    # Kafka's broker.rack (empty: none): new partitions keep their replicas on distinct racks
    # while there are racks enough, Metadata and DescribeCluster show it, and a consumer
    # naming the same rack (client.rack) may be sent to read from this broker (KIP-392).
    "broker.rack": "",
    # KIP-392: which replica a consumer should read from. Empty (Kafka's default): always the
    # leader; org.apache.kafka.common.replica.RackAwareReplicaSelector: an in-sync replica in
    # the consumer's rack (replication/selector.py). Any other class is refused at startup.
    "replica.selector.class": "",
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
    "log.roll.jitter.hours": ("log.roll.jitter.ms", 3600 * 1000),
    "log.dir": ("log.dirs", 0),
    "offsets.retention.minutes": ("offsets.retention.ms", 60 * 1000),
}


LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class TopicConfigSpec:
    """One of Kafka 4.4's topic configs (LogConfig), as Kafka defines it: its type
    (ConfigDef's: boolean, string, int, long, double, list), default, validator and the broker
    property that supplies the default (Kafka's first server synonym; None: the default is
    fixed). `effect` is empty where lockgate applies the config; otherwise it says why the
    config is accepted and shown but changes nothing (docs/operator-guide.md lists them)."""

    name: str
    broker_property: str | None
    default: str
    kind: str
    minimum: int | float | None = None
    maximum: int | float | None = None
    choices: tuple[str, ...] = ()
    validator: str = ""  # "gzip-level", "throttled-replicas": Kafka's special validators
    effect: str = ""


_NO_COPY_LAG = "every rolled segment below the last stable offset is copied at the next pass"
_NO_THROTTLE = "lockgate has no replication throttle (no leader/follower throttled rate)"
_NO_SHARE_GROUPS = "lockgate serves no share groups"

TOPIC_CONFIGS: dict[str, TopicConfigSpec] = {
    spec.name: spec
    for spec in (
        TopicConfigSpec(
            "cleanup.policy", "log.cleanup.policy", "delete", "list", choices=("compact", "delete")
        ),
        TopicConfigSpec(
            "compression.gzip.level",
            "compression.gzip.level",
            "-1",
            "int",
            1,
            9,
            validator="gzip-level",
        ),
        TopicConfigSpec("compression.lz4.level", "compression.lz4.level", "9", "int", 1, 17),
        TopicConfigSpec(
            "compression.type",
            "compression.type",
            "producer",
            "string",
            choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        ),
        TopicConfigSpec(
            "compression.zstd.level", "compression.zstd.level", "3", "int", -131072, 22
        ),
        TopicConfigSpec(
            "delete.retention.ms", "log.cleaner.delete.retention.ms", str(DAY_MS), "long", 0
        ),
        TopicConfigSpec(
            "errors.deadletterqueue.group.enable",
            None,
            "false",
            "boolean",
            effect=_NO_SHARE_GROUPS,
        ),
        TopicConfigSpec(
            "file.delete.delay.ms",
            "log.segment.delete.delay.ms",
            "60000",
            "long",
            0,
            effect="a deleted segment's files are removed at once; reads in progress keep "
            "their open descriptors",
        ),
        TopicConfigSpec(
            "flush.messages",
            "log.flush.interval.messages",
            str(LONG_MAX),
            "long",
            1,
            effect="lockgate.durability decides: fsync (the default) flushes every append "
            "before the high watermark passes it; page-cache leaves writing back to the OS",
        ),
        TopicConfigSpec(
            "flush.ms",
            "log.flush.interval.ms",
            str(LONG_MAX),
            "long",
            0,
            effect="lockgate.durability decides, as for flush.messages",
        ),
        TopicConfigSpec(
            "follower.replication.throttled.replicas",
            None,
            "",
            "list",
            validator="throttled-replicas",
            effect=_NO_THROTTLE,
        ),
        TopicConfigSpec("index.interval.bytes", "log.index.interval.bytes", "4096", "int", 0),
        # an internal config (ConfigDef.defineInternal): segment.bytes without its minimum,
        # for tests, as in Kafka
        TopicConfigSpec("internal.segment.bytes", None, "", "int"),
        TopicConfigSpec(
            "leader.replication.throttled.replicas",
            None,
            "",
            "list",
            validator="throttled-replicas",
            effect=_NO_THROTTLE,
        ),
        TopicConfigSpec(
            "local.retention.bytes",
            "log.local.retention.bytes",
            "-2",
            "long",
            -2,
        ),
        TopicConfigSpec("local.retention.ms", "log.local.retention.ms", "-2", "long", -2),
        TopicConfigSpec(
            "max.compaction.lag.ms",
            "log.cleaner.max.compaction.lag.ms",
            str(LONG_MAX),
            "long",
            1,
        ),
        TopicConfigSpec(
            "max.decompressed.message.bytes",
            "max.decompressed.message.bytes",
            "2147483639",
            "int",
            1,
            2147483639,
        ),
        TopicConfigSpec("max.message.bytes", "message.max.bytes", "1048588", "int", 0),
        TopicConfigSpec(
            "message.timestamp.after.max.ms",
            "log.message.timestamp.after.max.ms",
            "3600000",
            "long",
            0,
        ),
        TopicConfigSpec(
            "message.timestamp.before.max.ms",
            "log.message.timestamp.before.max.ms",
            str(LONG_MAX),
            "long",
            0,
        ),
        TopicConfigSpec(
            "message.timestamp.type",
            "log.message.timestamp.type",
            "CreateTime",
            "string",
            choices=("CreateTime", "LogAppendTime"),
        ),
        TopicConfigSpec(
            "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", "0.5", "double", 0, 1
        ),
        TopicConfigSpec(
            "min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", "0", "long", 0
        ),
        TopicConfigSpec("min.insync.replicas", "min.insync.replicas", "1", "int", 1),
        TopicConfigSpec(
            "preallocate",
            "log.preallocate",
            "false",
            "boolean",
            effect="segment files grow as they are written; preallocating them changes no answer",
        ),
        TopicConfigSpec(
            "remote.copy.lag.bytes",
            "log.remote.copy.lag.bytes",
            "-1",
            "long",
            -1,
            effect=_NO_COPY_LAG,
        ),
        TopicConfigSpec(
            "remote.copy.lag.ms", "log.remote.copy.lag.ms", "0", "long", -1, effect=_NO_COPY_LAG
        ),
        TopicConfigSpec("remote.log.copy.disable", None, "false", "boolean"),
        TopicConfigSpec("remote.log.delete.on.disable", None, "false", "boolean"),
        TopicConfigSpec("remote.storage.enable", None, "false", "boolean"),
        TopicConfigSpec("retention.bytes", "log.retention.bytes", "-1", "long"),
        TopicConfigSpec("retention.ms", "log.retention.ms", str(7 * DAY_MS), "long", -1),
        TopicConfigSpec("segment.bytes", "log.segment.bytes", str(1 << 30), "int", 1 << 20),
        TopicConfigSpec("segment.index.bytes", "log.index.size.max.bytes", "10485760", "int", 4),
        TopicConfigSpec("segment.jitter.ms", "log.roll.jitter.ms", "0", "long", 0),
        TopicConfigSpec("segment.ms", "log.roll.ms", str(7 * DAY_MS), "long", 1),
        TopicConfigSpec(
            "unclean.leader.election.enable", "unclean.leader.election.enable", "false", "boolean"
        ),
    )
}

# Kafka's ConfigDef.Type values, as DescribeConfigs (v3+) reports them
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}
# Configs Kafka's LogConfig defines as internal: accepted, but DescribeConfigs lists them only
# when set
INTERNAL_TOPIC_CONFIGS = frozenset({"internal.segment.bytes"})


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


_INTEGER = re.compile(r"[+-]?[0-9]+")  # Java's Integer/Long.parseLong
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_LIST_SEPARATOR = re.compile(r"\s*,\s*")
_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")
_BITS = {"int": 32, "long": 64}


def _invalid(name: str, value: object, reason: str) -> ConfigError:
    """Kafka's ConfigException message."""
    return ConfigError(f"Invalid value {value} for configuration {name}: {reason}")


def _list_items(value: str) -> list[str]:
    """ConfigDef's LIST parsing: trimmed, split on commas (empty items kept), none if empty."""
    trimmed = value.strip()
    return _LIST_SEPARATOR.split(trimmed) if trimmed else []


def _check_range(spec: TopicConfigSpec, name: str, number: float) -> None:
    if spec.validator == "gzip-level":
        if number != -1 and not 1 <= number <= 9:
            raise _invalid(name, _shown(number), "Value must be between 1 and 9 or equal to -1")
        return
    if spec.minimum is not None and number < spec.minimum:
        raise _invalid(name, _shown(number), f"Value must be at least {spec.minimum}")
    if spec.maximum is not None and number > spec.maximum:
        raise _invalid(name, _shown(number), f"Value must be no more than {spec.maximum}")


def _shown(number: float) -> str:
    return str(number) if isinstance(number, int) else repr(float(number))


def check_value(spec: TopicConfigSpec, value: str, name: str | None = None) -> str:
    """The value normalised, or ConfigError with Kafka's message (ConfigDef's parsing of the
    config's type, then its validator) naming the config, or `name` (a broker property)."""
    name = name or spec.name
    kind = spec.kind
    trimmed = value.strip()
    if kind in ("int", "long"):
        bits = _BITS[kind]
        if not _INTEGER.fullmatch(trimmed) or not -(2 ** (bits - 1)) <= int(trimmed) < 2 ** (
            bits - 1
        ):
            raise _invalid(name, value, f"Not a number of type {kind.upper()}")
        number = int(trimmed)
        _check_range(spec, name, number)
        return str(number)
    if kind == "double":
        if not _DOUBLE.fullmatch(trimmed):
            raise _invalid(name, value, "Not a number of type DOUBLE")
        number_text = trimmed.rstrip("fFdD")
        _check_range(spec, name, float(number_text))
        return number_text
    if kind == "boolean":
        if trimmed.lower() not in ("true", "false"):
            raise _invalid(name, value, "Expected value to be either true or false")
        return trimmed.lower()
    if kind == "list":
        items = _list_items(value)
        if spec.validator == "throttled-replicas":
            stripped = [item.strip() for item in items]
            if stripped != ["*"] and not all(_THROTTLED_REPLICA.fullmatch(i) for i in stripped):
                raise _invalid(
                    name,
                    "[" + ", ".join(items) + "]",
                    f"{name} must be the literal '*' or a list of replicas in the "
                    "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
                )
        elif spec.choices:
            if any(not item for item in items):
                raise ConfigError(f"Configuration '{name}' values must not be empty.")
            for item in items:
                if item not in spec.choices:
                    choices = ", ".join(spec.choices)
                    raise _invalid(name, item, f"String must be one of: {choices}")
        return ",".join(items)
    if spec.choices and trimmed not in spec.choices:
        raise _invalid(name, trimmed, f"String must be one of: {', '.join(spec.choices)}")
    return trimmed


def check_topic(resolved: Mapping[str, str], remote_system: bool = False) -> None:
    """The rules Kafka checks across a topic's effective configs (LogConfig.validate), or
    ConfigError with Kafka's message; `remote_system`: the broker's
    remote.log.storage.system.enable."""
    least = int(resolved["min.compaction.lag.ms"])
    most = int(resolved["max.compaction.lag.ms"])
    if least > most:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({least}) > "
            f"max.compaction.lag.ms ({most})"
        )
    if resolved["remote.storage.enable"] == "true":
        _check_remote(resolved, remote_system)


def _check_remote(resolved: Mapping[str, str], remote_system: bool) -> None:
    """A tiered topic's rules (Kafka's LogConfig.validate for remote storage)."""
    if not remote_system:
        raise ConfigError(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
            "with remote log storage."
        )
    if "compact" in cleanup_policies(resolved["cleanup.policy"]):
        raise ConfigError(
            "Remote log storage only supports topics with cleanup.policy=delete or "
            "cleanup.policy being an empty list."
        )
    if resolved["remote.log.copy.disable"] == "true":
        for local, total in (
            ("local.retention.bytes", "retention.bytes"),
            ("local.retention.ms", "retention.ms"),
        ):
            if resolved[local] not in ("-2", resolved[total]):
                raise ConfigError(
                    f"When `remote.log.copy.disable` is set to true, the `{local}` and `{total}` "
                    "must be set to the identical value because there will be no more logs "
                    "copied to the remote storage."
                )
    for local, total in (
        ("local.retention.ms", "retention.ms"),
        ("local.retention.bytes", "retention.bytes"),
    ):
        local_value, total_value = int(resolved[local]), int(resolved[total])
        if local_value == -2:
            continue
        if local_value == -1 and total_value != -1:
            raise _invalid(
                local,
                local_value,
                f"Value must not be -1 as {total} value is set as {total_value}.",
            )
        if total_value != -1 and local_value > total_value:
            raise _invalid(
                local, local_value, f"Value must not be more than {total} property value: "
                f"{total_value}",
            )  # fmt: skip


def check_remote_change(before: Mapping[str, str], after: Mapping[str, str]) -> None:
    """Turning remote.storage.enable off: only with remote.log.delete.on.disable=true (the
    remote data goes), as Kafka 4.4; ConfigError with its message otherwise."""
    if (
        before["remote.storage.enable"] == "true"
        and after["remote.storage.enable"] == "false"
        and after["remote.log.delete.on.disable"] != "true"
    ):
        raise ConfigError(
            "It is invalid to disable remote storage without deleting remote data. If you want "
            "to keep the remote data and turn to read only, please set "
            "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable "
            "remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
        )


def cleanup_policies(value: str) -> set[str]:
    return {item.lower() for item in _list_items(value)}


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
        """Every topic config's effective value (the internal ones only when set)."""
        return {
            name: overrides.get(name, self.topic_default(name))
            for name in TOPIC_CONFIGS
            if name not in INTERNAL_TOPIC_CONFIGS or name in overrides
        }

    def log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        resolved = self.resolve_topic(overrides)
        policies = cleanup_policies(resolved["cleanup.policy"])
        compact = "compact" in policies
        codec = target_codec(resolved["compression.type"])
        max_compaction_lag_ms = int(resolved["max.compaction.lag.ms"])
        segment_ms = int(resolved["segment.ms"])
        if compact:  # as Kafka: the active segment rolls in time to be cleaned by the max lag
            segment_ms = min(segment_ms, max_compaction_lag_ms)
        return LogConfig(
            segment_bytes=int(resolved.get("internal.segment.bytes", resolved["segment.bytes"])),
            segment_ms=segment_ms,
            segment_jitter_ms=int(resolved["segment.jitter.ms"]),
            segment_index_bytes=int(resolved["segment.index.bytes"]),
            retention_ms=int(resolved["retention.ms"]),
            retention_bytes=int(resolved["retention.bytes"]),
            index_interval_bytes=int(resolved["index.interval.bytes"]),
            log_append_time=resolved["message.timestamp.type"] == "LogAppendTime",
            timestamp_before_max_ms=int(resolved["message.timestamp.before.max.ms"]),
            timestamp_after_max_ms=int(resolved["message.timestamp.after.max.ms"]),
            max_message_bytes=int(resolved["max.message.bytes"]),
            max_decompressed_message_bytes=int(resolved["max.decompressed.message.bytes"]),
            delete_policy="delete" in policies,
            compact=compact,
            delete_retention_ms=int(resolved["delete.retention.ms"]),
            min_cleanable_dirty_ratio=float(resolved["min.cleanable.dirty.ratio"]),
            min_compaction_lag_ms=int(resolved["min.compaction.lag.ms"]),
            max_compaction_lag_ms=max_compaction_lag_ms,
            min_insync_replicas=int(resolved["min.insync.replicas"]),
            unclean_leader_election=resolved["unclean.leader.election.enable"] == "true",
            compression_codec=codec,
            compression_level=_compression_level(codec, resolved),
            remote_storage=resolved["remote.storage.enable"] == "true",
            local_retention_ms=_local(resolved, "local.retention.ms", "retention.ms"),
            local_retention_bytes=_local(resolved, "local.retention.bytes", "retention.bytes"),
            remote_copy_disabled=resolved["remote.log.copy.disable"] == "true",
            remote_delete_on_disable=resolved["remote.log.delete.on.disable"] == "true",
        )


def _local(resolved: Mapping[str, str], name: str, total: str) -> int:
    """local.retention.ms/bytes: -2 takes the total retention's value."""
    value = int(resolved[name])
    return int(resolved[total]) if value == -2 else value


def _compression_level(codec: int | None, resolved: Mapping[str, str]) -> int | None:
    """The level compression.{gzip,lz4,zstd}.level sets for the topic's codec; None: the
    codec's own default (gzip's -1; snappy has no levels)."""
    names = {1: "compression.gzip.level", 3: "compression.lz4.level", 4: "compression.zstd.level"}
    if codec not in names:
        return None
    level = int(resolved[names[codec]])
    return None if codec == 1 and level == -1 else level


def parse_listener(value: str) -> tuple[str, int]:
    """'HOST:PORT' or 'PLAINTEXT://HOST:PORT' → (host, port)."""
    address = value.split(",")[0].strip()
    if "://" in address:
        address = address.split("://", 1)[1]
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"listener {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)
