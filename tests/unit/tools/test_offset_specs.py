"""The text formats of the offset tools: topic scopes, --to-datetime, --by-duration, the
reset-offsets CSV and the delete-records JSON file, read as Kafka's scripts read them."""

from __future__ import annotations

import datetime
import re

import pytest

from lockgate.client.cluster import TopicPartition
from lockgate.tools.common import ToolError
from lockgate.tools.get_offsets import parse_partition_filter, parse_time, parse_topic_partitions
from lockgate.tools.offset_specs import (
    TopicScope,
    clamp,
    export_csv,
    parse_datetime_ms,
    parse_delete_records_json,
    parse_duration_ms,
    parse_reset_csv,
    parse_topic_scope,
)


def test_topic_scope_with_and_without_partitions() -> None:
    assert parse_topic_scope("orders") == TopicScope("orders", ())
    assert parse_topic_scope("orders:0,2,5,2") == TopicScope("orders", (0, 2, 5))
    for bad in (":1", "orders:", "orders:x", "orders:-1"):
        with pytest.raises(ToolError):
            parse_topic_scope(bad)


def test_datetime_with_zone_offset_or_local_time() -> None:
    assert parse_datetime_ms("2024-01-02T03:04:05.678Z") == 1704164645678
    assert parse_datetime_ms("2024-01-02T05:04:05.678+02:00") == 1704164645678
    assert parse_datetime_ms("2024-01-02T03:04:05") == 1704164645000 + (
        -int(datetime.datetime(2024, 1, 2, 3, 4, 5).astimezone().utcoffset().total_seconds())  # type: ignore[union-attr]
        * 1000
    )
    plus_one = datetime.timezone(datetime.timedelta(hours=1))
    assert parse_datetime_ms("2024-01-02T04:04:05.678", plus_one) == 1704164645678
    with pytest.raises(ToolError, match="YYYY-MM-DD"):
        parse_datetime_ms("yesterday")


def test_iso_8601_durations() -> None:
    assert parse_duration_ms("PT0S") == 0
    assert parse_duration_ms("P1DT2H3M4.5S") == ((26 * 60 + 3) * 60 + 4) * 1000 + 500
    assert parse_duration_ms("pt15m") == 900_000
    assert parse_duration_ms("P2D") == 172_800_000
    assert parse_duration_ms("-PT1H") == -3_600_000
    for bad in ("P", "PT", "1H", "P1H", "PT1D", "P1DT"):
        with pytest.raises(ToolError, match="ISO-8601"):
            parse_duration_ms(bad)


def test_export_and_from_file_round_trip() -> None:
    plan = {TopicPartition("b", 1): 7, TopicPartition("a", 0): 3}
    one = export_csv({"g": plan})
    assert one == "a,0,3\nb,1,7"  # Kafka's single-group layout: no group column
    assert parse_reset_csv(one, ["g"]) == {"g": plan}
    several = export_csv({"g1": plan, "g2": {TopicPartition("a", 0): 1}})
    assert several.splitlines() == ["g1,a,0,3", "g1,b,1,7", "g2,a,0,1"]
    assert parse_reset_csv(several + "\n\n", ["g1", "g2"]) == {
        "g1": plan,
        "g2": {TopicPartition("a", 0): 1},
    }
    with pytest.raises(ToolError, match="several groups"):
        parse_reset_csv(one, ["g1", "g2"])
    with pytest.raises(ToolError, match="line 1"):
        parse_reset_csv("a,0", ["g"])
    with pytest.raises(ToolError, match="integers"):
        parse_reset_csv("a,x,1", ["g"])
    with pytest.raises(ToolError, match="line 2: Invalid negative offset"):
        parse_reset_csv("a,0,1\na,1,-3", ["g"])


def test_delete_records_json_as_kafka_writes_it() -> None:
    text = (
        '{"partitions": [{"topic": "t", "partition": 0, "offset": 5},'
        ' {"topic": "t", "partition": 1, "offset": -1}], "version": 1}'
    )
    assert parse_delete_records_json(text) == {
        TopicPartition("t", 0): 5,
        TopicPartition("t", 1): -1,
    }
    duplicate = '{"partitions": [{"topic": "t", "partition": 0, "offset": 1},' * 1 + (
        ' {"topic": "t", "partition": 0, "offset": 2}]}'
    )
    with pytest.raises(ToolError, match="duplicate topic partitions: t-0"):
        parse_delete_records_json(duplicate)
    for bad in (
        "{",
        '{"partitions": {}}',
        '{"partitions": [{"topic": "t"}]}',
        '{"partitions": []}',
    ):
        with pytest.raises(ToolError):
            parse_delete_records_json(bad)


def test_clamp_to_the_log() -> None:
    assert [clamp(offset, 3, 9) for offset in (0, 3, 5, 9, 12)] == [3, 3, 5, 9, 9]


def test_get_offsets_time_and_partition_filters() -> None:
    assert [parse_time(t) for t in ("latest", "earliest", "max-timestamp")] == [-1, -2, -3]
    # Kafka 4.4's kafka-get-offsets.sh names for -4, -5 and -6 (GetOffsetShell.parseOffsetSpec)
    tiered = ("earliest-local", "latest-tiered", "earliest-pending-upload")
    assert [parse_time(t) for t in tiered] == [-4, -5, -6]
    assert [parse_time(t) for t in ("-4", "-5", "-6", "0", "17")] == [-4, -5, -6, 0, 17]
    for bad in ("-7", "soon"):
        with pytest.raises(Exception, match="expected"):
            parse_time(bad)
    accepts = parse_partition_filter("0,2-4,7-")  # a range's upper bound is exclusive
    assert [p for p in range(10) if accepts(p)] == [0, 2, 3, 7, 8, 9]
    below = parse_partition_filter("-2")
    assert [p for p in range(5) if below(p)] == [0, 1]
    with pytest.raises(ToolError):
        parse_partition_filter("a")
    filters = parse_topic_partitions("t1:1,t1:3,t2:0-2,t3,:9")
    matched = {
        (topic, p)
        for topic in ("t1", "t2", "t3", "t4")
        for p in range(4)
        if any(pattern.fullmatch(topic) and accepts(p) for pattern, accepts in filters)
    }
    assert matched == {("t1", 1), ("t1", 3), ("t2", 0), ("t2", 1)} | {("t3", p) for p in range(4)}
    assert all(isinstance(pattern, re.Pattern) for pattern, _ in filters)
