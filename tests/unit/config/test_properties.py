"""Broker properties (files, aliases, typed access) and topic config validation."""

from __future__ import annotations

import re

import pytest

from lockgate.config.log import LogConfig
from lockgate.config.properties import (
    BROKER_DEFAULTS,
    INTERNAL_TOPIC_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    check_remote_change,
    check_topic,
    check_value,
    parse_listener,
    parse_properties,
)

HOUR_MS = 3600 * 1000


# -- .properties files -------------------------------------------------------------------------


def test_parse_properties() -> None:
    text = """
# a comment
! another comment
   node.id = 3
listeners=PLAINTEXT://127.0.0.1:19092
log.dirs: /var/lib/lockgate
empty.value=
with.equals=a=b
node.id=4

"""
    assert parse_properties(text) == {
        "node.id": "4",  # the last occurrence wins
        "listeners": "PLAINTEXT://127.0.0.1:19092",
        "log.dirs": "/var/lib/lockgate",
        "empty.value": "",
        "with.equals": "a=b",
    }


def test_parse_properties_handles_crlf_and_indented_comments() -> None:
    assert parse_properties("a=1\r\n  # b=2\r\nc = 3\r\n") == {"a": "1", "c": "3"}


@pytest.mark.parametrize("line", ["just-a-word", "two words"])
def test_parse_properties_rejects_lines_without_separator(line: str) -> None:
    with pytest.raises(ConfigError, match="not a property line"):
        parse_properties(f"a=1\n{line}\n")


def test_parse_properties_key_ends_at_the_first_separator() -> None:
    assert parse_properties("sasl.mechanism: value=with=equals") == {
        "sasl.mechanism": "value=with=equals"
    }


# -- broker config -----------------------------------------------------------------------------


def test_defaults_and_overrides() -> None:
    config = BrokerConfig()
    assert config.get("listeners") == "127.0.0.1:9092"
    assert config.integer("num.partitions") == 1
    assert config.flag("auto.create.topics.enable") is True
    assert config.durable is True
    assert config.values == BROKER_DEFAULTS
    assert config.values is not BROKER_DEFAULTS  # overrides never leak into the defaults
    changed = BrokerConfig({"num.partitions": "6", "auto.create.topics.enable": "FALSE"})
    assert changed.integer("num.partitions") == 6
    assert changed.flag("auto.create.topics.enable") is False
    assert BROKER_DEFAULTS["num.partitions"] == "1"


def test_unknown_properties_are_kept() -> None:
    assert BrokerConfig({"some.plugin.setting": "x"}).get("some.plugin.setting") == "x"


def test_integer_of_a_non_number_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"num\.partitions"):
        BrokerConfig({"num.partitions": "many"}).integer("num.partitions")


@pytest.mark.parametrize(("mode", "durable"), [("fsync", True), ("page-cache", False)])
def test_durability(mode: str, durable: bool) -> None:
    assert BrokerConfig({"lockgate.durability": mode}).durable is durable


def test_unknown_durability_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"lockgate\.durability"):
        _ = BrokerConfig({"lockgate.durability": "sometimes"}).durable


@pytest.mark.parametrize(
    ("alias", "value", "target", "expected"),
    [
        ("log.retention.hours", "5", "log.retention.ms", str(5 * HOUR_MS)),
        ("log.retention.minutes", "30", "log.retention.ms", str(30 * 60 * 1000)),
        ("log.roll.hours", "2", "log.roll.ms", str(2 * HOUR_MS)),
        ("log.dir", "/data/one", "log.dirs", "/data/one"),
    ],
)
def test_aliases(alias: str, value: str, target: str, expected: str) -> None:
    assert BrokerConfig({alias: value}).get(target) == expected


@pytest.mark.parametrize(
    "overrides",
    [
        {"log.retention.ms": "1234", "log.retention.hours": "5"},
        {"log.retention.hours": "5", "log.retention.ms": "1234"},
        {"log.retention.minutes": "7", "log.retention.ms": "1234"},
        {"log.retention.ms": "1234", "log.retention.minutes": "7"},
    ],
)
def test_the_finer_property_wins_whatever_the_order(overrides: dict[str, str]) -> None:
    assert BrokerConfig(overrides).get("log.retention.ms") == "1234"


def test_log_dirs_wins_over_log_dir() -> None:
    for overrides in (
        {"log.dir": "/one", "log.dirs": "/two"},
        {"log.dirs": "/two", "log.dir": "/one"},
    ):
        assert BrokerConfig(overrides).get("log.dirs") == "/two"


def test_aliases_feed_topic_defaults() -> None:
    config = BrokerConfig({"log.retention.hours": "1", "log.roll.hours": "2"})
    assert config.topic_default("retention.ms") == str(HOUR_MS)
    assert config.log_config({}).segment_ms == 2 * HOUR_MS


def test_minutes_win_over_hours_whatever_the_order() -> None:
    config = BrokerConfig({"log.retention.minutes": "30", "log.retention.hours": "1"})
    assert config.get("log.retention.ms") == str(30 * 60 * 1000)


def test_non_numeric_alias_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        BrokerConfig({"log.retention.hours": "a day"})


def test_negative_retention_hours_means_unlimited() -> None:
    assert BrokerConfig({"log.retention.hours": "-1"}).get("log.retention.ms") == "-1"


# -- topic configs -----------------------------------------------------------------------------


def test_topic_config_resolution() -> None:
    config = BrokerConfig({"log.retention.ms": "1000", "log.message.timestamp.type": "CreateTime"})
    resolved = config.resolve_topic({"segment.bytes": "2048"})
    assert set(resolved) == set(TOPIC_CONFIGS) - INTERNAL_TOPIC_CONFIGS
    assert resolved["segment.bytes"] == "2048"  # topic override
    assert resolved["retention.ms"] == "1000"  # broker property
    assert resolved["cleanup.policy"] == "delete"  # default


def test_log_config() -> None:
    config = BrokerConfig({"log.segment.bytes": "4096", "log.retention.bytes": "100"})
    log_config = config.log_config(
        {"message.timestamp.type": "LogAppendTime", "retention.ms": "-1", "segment.ms": "60000"}
    )
    assert log_config == LogConfig(
        segment_bytes=4096,
        segment_ms=60_000,
        retention_ms=-1,
        retention_bytes=100,
        index_interval_bytes=4096,
        log_append_time=True,
        max_message_bytes=1048588,
        local_retention_ms=-1,  # local.retention.* -2: the total retention's values
        local_retention_bytes=100,
    )
    assert BrokerConfig().log_config({}) == LogConfig()


def test_turning_remote_storage_off_needs_delete_on_disable() -> None:
    config = BrokerConfig()
    on = config.resolve_topic({"remote.storage.enable": "true"})
    with pytest.raises(ConfigError, match="invalid to disable remote storage without deleting"):
        check_remote_change(on, config.resolve_topic({}))
    check_remote_change(on, config.resolve_topic({"remote.log.delete.on.disable": "true"}))
    check_remote_change(config.resolve_topic({}), on)  # (turning it on is the other rules')


def test_tiered_topic_rules() -> None:
    """Kafka 4.4's LogConfig checks of a tiered topic, with its messages."""
    config = BrokerConfig()

    def check(overrides: dict[str, str]) -> None:
        check_topic(config.resolve_topic({"remote.storage.enable": "true", **overrides}), True)

    check({"retention.ms": "1000", "local.retention.ms": "1000"})
    check({"retention.ms": "-1", "local.retention.ms": "-1"})
    with pytest.raises(ConfigError, match=r"only supports topics with cleanup\.policy=delete"):
        check({"cleanup.policy": "compact,delete"})
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "Invalid value 2000 for configuration local.retention.ms: Value must not be more "
            "than retention.ms property value: 1000"
        ),
    ):
        check({"retention.ms": "1000", "local.retention.ms": "2000"})
    with pytest.raises(
        ConfigError, match=re.escape("must not be -1 as retention.bytes value is set as 9.")
    ):
        check({"retention.bytes": "9", "local.retention.bytes": "-1"})
    # read only (no more copies): local and total retention must agree
    check({"remote.log.copy.disable": "true"})
    with pytest.raises(
        ConfigError, match=re.escape("the `local.retention.ms` and `retention.ms` must be")
    ):
        check({"remote.log.copy.disable": "true", "local.retention.ms": "5"})


@pytest.mark.parametrize(
    ("name", "value", "normalised"),
    [
        ("retention.ms", "-1", "-1"),
        ("retention.ms", "604800000", "604800000"),
        ("retention.ms", " 42 ", "42"),
        ("retention.ms", "+42", "42"),
        ("retention.bytes", "9223372036854775807", "9223372036854775807"),
        ("retention.bytes", "-5", "-5"),  # no validator: any long
        ("segment.bytes", "1048576", "1048576"),
        ("segment.bytes", "2147483647", "2147483647"),
        ("internal.segment.bytes", "100", "100"),  # no minimum: Kafka's tests' setting
        ("index.interval.bytes", "0", "0"),
        ("max.message.bytes", "0", "0"),
        ("min.insync.replicas", "1", "1"),
        ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
        ("message.timestamp.type", "CreateTime", "CreateTime"),
        ("cleanup.policy", "delete", "delete"),
        ("cleanup.policy", "", ""),  # Kafka 4: neither deleted nor compacted
        ("cleanup.policy", "compact,compact", "compact,compact"),
        ("compression.type", "producer", "producer"),
        ("min.cleanable.dirty.ratio", "0.50", "0.50"),
        ("min.cleanable.dirty.ratio", "1e-1", "1e-1"),
        ("unclean.leader.election.enable", "TRUE", "true"),
        ("preallocate", " True ", "true"),
        ("compression.gzip.level", "-1", "-1"),
        ("compression.gzip.level", "9", "9"),
        ("compression.zstd.level", "-131072", "-131072"),
        ("leader.replication.throttled.replicas", "*", "*"),
        ("leader.replication.throttled.replicas", " 0:1 , 1:2 ", "0:1,1:2"),
        ("follower.replication.throttled.replicas", "0:1,", "0:1,"),
        ("follower.replication.throttled.replicas", "", ""),
        ("max.compaction.lag.ms", "1", "1"),
        ("local.retention.ms", "-2", "-2"),
        ("remote.storage.enable", "false", "false"),
        ("errors.deadletterqueue.group.enable", "true", "true"),
    ],
)
def test_valid_topic_config_values(name: str, value: str, normalised: str) -> None:
    assert check_value(TOPIC_CONFIGS[name], value) == normalised


# Each message is Apache Kafka 4.4's (LogConfig.validate on the reference jars)
@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("retention.ms", "x", "Invalid value x for configuration retention.ms: Not a number of "
         "type LONG"),
        ("retention.ms", "5.0", "Not a number of type LONG"),
        ("retention.ms", "0x10", "Not a number of type LONG"),
        ("retention.ms", "9223372036854775808", "Not a number of type LONG"),
        ("retention.ms", "", "Not a number of type LONG"),
        ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at "
         "least -1"),
        ("segment.bytes", "13", "Invalid value 13 for configuration segment.bytes: Value must be "
         "at least 1048576"),
        ("segment.bytes", "2147483648", "Invalid value 2147483648 for configuration "
         "segment.bytes: Not a number of type INT"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("segment.index.bytes", "3", "Value must be at least 4"),
        ("max.message.bytes", "-1", "Value must be at least 0"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("max.compaction.lag.ms", "0", "Invalid value 0 for configuration max.compaction.lag.ms: "
         "Value must be at least 1"),
        ("max.decompressed.message.bytes", "0", "Value must be at least 1"),
        ("local.retention.ms", "-3", "Value must be at least -2"),
        ("message.timestamp.type", "createtime", "Invalid value createtime for configuration "
         "message.timestamp.type: String must be one of: CreateTime, LogAppendTime"),
        ("compression.type", "GZIP", "Invalid value GZIP for configuration compression.type: "
         "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("cleanup.policy", "foo", "Invalid value foo for configuration cleanup.policy: String "
         "must be one of: compact, delete"),
        ("cleanup.policy", "Compact", "String must be one of: compact, delete"),
        ("cleanup.policy", "compact,", "Configuration 'cleanup.policy' values must not be "
         "empty."),
        ("unclean.leader.election.enable", "yes", "Invalid value yes for configuration "
         "unclean.leader.election.enable: Expected value to be either true or false"),
        ("min.cleanable.dirty.ratio", "1.5", "Invalid value 1.5 for configuration "
         "min.cleanable.dirty.ratio: Value must be no more than 1"),
        ("min.cleanable.dirty.ratio", "x", "Not a number of type DOUBLE"),
        ("compression.gzip.level", "0", "Invalid value 0 for configuration "
         "compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
        ("compression.zstd.level", "23", "Value must be no more than 22"),
        ("compression.zstd.level", "-131073", "Value must be at least -131072"),
        ("compression.lz4.level", "18", "Value must be no more than 17"),
        ("leader.replication.throttled.replicas", "x", "Invalid value [x] for configuration "
         "leader.replication.throttled.replicas: leader.replication.throttled.replicas must be "
         "the literal '*' or a list of replicas in the following format: "
         "[partitionId]:[brokerId],[partitionId]:[brokerId],..."),
        ("leader.replication.throttled.replicas", "*,0:1", "Invalid value [*, 0:1]"),
    ],
)  # fmt: skip
def test_invalid_topic_config_values(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        check_value(TOPIC_CONFIGS[name], value)
    assert message in str(raised.value)


def test_a_broker_property_is_named_in_its_own_messages() -> None:
    with pytest.raises(ConfigError, match=r"configuration log\.retention\.ms: Not a number"):
        check_value(TOPIC_CONFIGS["retention.ms"], "x", "log.retention.ms")


def test_rules_across_a_topics_configs() -> None:
    config = BrokerConfig()
    check_topic(config.resolve_topic({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"}))
    with pytest.raises(ConfigError) as raised:
        check_topic(
            config.resolve_topic({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
        )
    assert str(raised.value) == (
        "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"
    )
    # the broker default counts as Kafka's combined configs do
    broker = BrokerConfig({"log.cleaner.max.compaction.lag.ms": "100"})
    with pytest.raises(ConfigError, match="conflict topic config setting"):
        check_topic(broker.resolve_topic({"min.compaction.lag.ms": "200"}))
    with pytest.raises(ConfigError, match="Tiered Storage functionality is disabled"):
        check_topic(config.resolve_topic({"remote.storage.enable": "true"}))


def test_every_topic_config_has_a_broker_default_or_a_fixed_one() -> None:
    config = BrokerConfig()
    for spec in TOPIC_CONFIGS.values():
        if spec.name in INTERNAL_TOPIC_CONFIGS:
            assert spec.name not in config.resolve_topic({})
            continue
        assert config.resolve_topic({})[spec.name] == spec.default, spec.name
        assert check_value(spec, spec.default) == spec.default, spec.name
        if spec.broker_property is not None:
            assert BROKER_DEFAULTS[spec.broker_property] == spec.default, spec.name


def test_the_log_settings_of_the_newer_configs() -> None:
    config = BrokerConfig()
    assert config.log_config({"internal.segment.bytes": "500"}).segment_bytes == 500
    compacted = config.log_config({"cleanup.policy": "compact", "max.compaction.lag.ms": "60000"})
    assert compacted.segment_ms == 60_000  # rolls in time for the max lag, as Kafka's
    assert compacted.max_compaction_lag_ms == 60_000
    assert config.log_config({"max.compaction.lag.ms": "60000"}).segment_ms == 7 * 24 * 3600_000
    neither = config.log_config({"cleanup.policy": ""})
    assert not neither.compact and not neither.delete_policy
    assert config.log_config({"compression.type": "zstd"}).compression_level == 3
    assert config.log_config({"compression.type": "gzip"}).compression_level is None
    gzip = config.log_config({"compression.type": "gzip", "compression.gzip.level": "1"})
    assert gzip.compression_level == 1
    assert config.log_config({"compression.type": "snappy"}).compression_level is None
    jittered = LogConfig(segment_ms=1000, segment_jitter_ms=5000)
    assert all(0 <= jittered.roll_jitter_ms(offset) < 1000 for offset in range(50))
    assert LogConfig().roll_jitter_ms(7) == 0


@pytest.mark.parametrize(
    ("value", "normal"),
    [
        ("compact", "compact"),
        ("delete,compact", "delete,compact"),  # kept in the order given, as Kafka
        ("compact, delete", "compact,delete"),
    ],
)
def test_cleanup_policy_lists(value: str, normal: str) -> None:
    assert check_value(TOPIC_CONFIGS["cleanup.policy"], value) == normal


# -- listeners ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("PLAINTEXT://broker.example:19092", ("broker.example", 19092)),
        ("[::1]:9092", ("::1", 9092)),
        ("PLAINTEXT://[::1]:0", ("::1", 0)),
        ("a:1, b:2", ("a", 1)),
    ],
)
def test_parse_listener(value: str, expected: tuple[str, int]) -> None:
    assert parse_listener(value) == expected


@pytest.mark.parametrize("value", ["localhost", "localhost:", ":9092", "host:port", "host:-1"])
def test_bad_listener_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match="HOST:PORT"):
        parse_listener(value)
