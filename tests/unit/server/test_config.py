"""Broker properties (files, aliases, typed access) and topic config validation."""

from __future__ import annotations

import pytest

from lockgate.log.config import LogConfig
from lockgate.server.config import (
    BROKER_DEFAULTS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
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
    assert set(resolved) == set(TOPIC_CONFIGS)
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
    )
    assert BrokerConfig().log_config({}) == LogConfig()


@pytest.mark.parametrize(
    ("name", "value", "normalised"),
    [
        ("retention.ms", "-1", "-1"),
        ("retention.ms", "604800000", "604800000"),
        ("retention.ms", " 42 ", "42"),
        ("retention.ms", "+42", "42"),
        ("retention.bytes", "9223372036854775807", "9223372036854775807"),
        ("segment.bytes", "14", "14"),
        ("segment.bytes", "2147483647", "2147483647"),
        ("index.interval.bytes", "0", "0"),
        ("max.message.bytes", "0", "0"),
        ("min.insync.replicas", "1", "1"),
        ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
        ("message.timestamp.type", "CreateTime", "CreateTime"),
        ("cleanup.policy", "delete", "delete"),
        ("compression.type", "producer", "producer"),
    ],
)
def test_valid_topic_config_values(name: str, value: str, normalised: str) -> None:
    assert check_value(TOPIC_CONFIGS[name], value) == normalised


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("retention.ms", "forever", "not a number"),
        ("retention.ms", "1.5", "not a number"),
        ("retention.ms", "", "not a number"),
        ("segment.bytes", "2147483648", "out of range"),
        ("segment.bytes", "-2147483649", "out of range"),
        ("segment.bytes", "13", "minimum of 14"),
        ("max.message.bytes", "-1", "below the minimum"),
        ("index.interval.bytes", "-5", "below the minimum"),
        ("segment.ms", "-1", "below the minimum"),
        ("min.insync.replicas", "0", "below the minimum of 1"),
        ("message.timestamp.type", "logappendtime", "not supported"),
        ("cleanup.policy", "compaction", "use delete, compact"),
        ("cleanup.policy", "compact,compact", "use delete, compact"),
        ("cleanup.policy", "", "use delete, compact"),
        ("min.cleanable.dirty.ratio", "1.5", "not in"),
        ("min.cleanable.dirty.ratio", "half", "not a number"),
        ("delete.retention.ms", "-1", "below the minimum"),
        ("compression.type", "brotli", "not supported"),
    ],
)
def test_invalid_topic_config_values(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        check_value(TOPIC_CONFIGS[name], value)
    assert name in str(raised.value)


@pytest.mark.parametrize(
    ("value", "normal"),
    [
        ("compact", "compact"),
        ("delete,compact", "compact,delete"),
        ("compact, delete", "compact,delete"),
    ],
)
def test_cleanup_policy_lists(value: str, normal: str) -> None:
    assert check_value(TOPIC_CONFIGS["cleanup.policy"], value) == normal


@pytest.mark.parametrize(("name", "value"), [("segment.ms", "0"), ("retention.ms", "-2")])
def test_values_kafka_rejects_are_rejected(name: str, value: str) -> None:
    with pytest.raises(ConfigError):
        check_value(TOPIC_CONFIGS[name], value)


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
