"""Offset planning and option parsing of the lockgate source, without a broker or a Spark job:
maxOffsetsPerTrigger's share-out, checkpoint offsets JSON, Spark-Kafka option rules."""

from __future__ import annotations

import pytest

from lockgate.client.cluster import TopicPartition
from lockgate.spark.options import EARLIEST, OptionError, sink_options, source_options
from lockgate.spark.source import _from_json, _limited, _ranges, _to_json

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_the_read_limit_is_shared_over_partitions_with_a_backlog() -> None:
    end = _limited({A0: 0, A1: 0, B0: 5}, {A0: 100, A1: 3, B0: 5}, 10)
    assert end == {A0: 7, A1: 3, B0: 5}  # A1 takes what it has, A0 the rest; B0 has nothing
    assert sum(end[tp] - start for tp, start in {A0: 0, A1: 0, B0: 5}.items()) == 10


def test_a_new_partition_is_read_from_its_start_within_the_budget() -> None:
    end = _limited({A0: 50}, {A0: 60, A1: 40}, 20)
    assert end == {A0: 60, A1: 10}
    ranges = _ranges({A0: 50}, end)
    assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [
        ("a", 0, 50, 60),
        ("a", 1, 0, 10),
    ]


def test_checkpoint_offsets_round_trip_as_spark_kafka_json() -> None:
    offsets = {A0: 3, A1: 7, B0: 0}
    assert _to_json(offsets) == {"a": {"0": 3, "1": 7}, "b": {"0": 0}}
    assert _from_json(_to_json(offsets)) == offsets


def test_options_follow_spark_kafka() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
    batch = source_options({**base, "subscribe": "a, b"}, streaming=False)
    assert batch.topics == ("a", "b") and batch.starting == "earliest" and batch.read_committed
    stream = source_options({**base, "assign": '{"a": [0, 1]}'}, streaming=True)
    assert stream.assign == (A0, A1) and stream.starting == "latest"
    assert stream.offsets_spec('{"a": {"0": -2, "1": 5}}', 0) == {A0: EARLIEST, A1: 5}
    dirty = source_options(
        {**base, "subscribePattern": "a.*", "kafka.isolation.level": "read_uncommitted"},
        streaming=True,
    )
    assert not dirty.read_committed
    with pytest.raises(OptionError):
        source_options({**base, "subscribe": "a", "assign": '{"a": [0]}'}, streaming=False)
    with pytest.raises(OptionError):
        source_options({"subscribe": "a"}, streaming=False)
    with pytest.raises(OptionError):
        sink_options({**base, "delivery.guarantee": "maybe"}, "prefix")
    assert not sink_options({**base, "delivery.guarantee": "at_least_once"}, "p").exactly_once
