"""The connector's Arrow side without a Spark session: record batches made from the decoded
Fetch columns (both twins) equal the ones built from decode_fetched's Messages value for value,
with Spark's exact schema; and Spark's Arrow batches become one send_batch() call when they can
(one topic and partition, no headers), row by row otherwise."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lockgate.client import _purecolumns
from lockgate.client.cluster import TopicPartition
from lockgate.client.columns import ColumnDecoder, new_builder
from lockgate.client.consumer import Message, decode_fetched
from lockgate.spark.arrow import Uniform, arrow_schema, record_batch, slices, uniform
from tests.unit.client.test_columns import ABORTED, LOG, NO_END, implementations

TP = TopicPartition("orders", 3)


def from_messages(schema: Any, messages: list[Message]) -> Any:
    """What the source built before the bulk decoder: one Python object per field and row."""
    return pa.RecordBatch.from_arrays(
        [
            [m.key for m in messages],
            [m.value for m in messages],
            [m.topic for m in messages],
            [m.partition for m in messages],
            [m.offset for m in messages],
            [m.timestamp * 1000 for m in messages],
            [int(m.timestamp_type) for m in messages],
            [[{"key": k, "value": v} for k, v in m.headers] for m in messages],
        ],
        schema=schema,
    )


@pytest.fixture(params=implementations())
def impl(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.parametrize("aborted", [None, ABORTED], ids=["uncommitted", "committed"])
def test_record_batches_equal_the_ones_built_from_messages(impl: Any, aborted: Any) -> None:
    schema = arrow_schema()
    decoder = ColumnDecoder(NO_END, new_builder(impl is _purecolumns))
    decoder(TP, LOG, 1, aborted)
    batch = record_batch(decoder.take(), TP, schema)
    batch.validate(full=True)
    assert batch.schema.equals(schema)  # PySpark refuses any other
    expected = from_messages(schema, decode_fetched(TP, LOG, 1, aborted).messages)
    assert batch.num_rows == expected.num_rows > 0
    assert batch.equals(expected)
    assert batch.column("topic").to_pylist() == ["orders"] * batch.num_rows
    assert batch.column("partition").to_pylist() == [3] * batch.num_rows


def test_an_empty_take_is_an_empty_batch_and_slices_cover_every_row() -> None:
    schema = arrow_schema()
    empty = record_batch(ColumnDecoder(NO_END).take(), TP, schema)
    assert empty.num_rows == 0 and empty.schema.equals(schema)
    decoder = ColumnDecoder(NO_END)
    decoder(TP, LOG, 0, None)
    batch = record_batch(decoder.take(), TP, schema)
    parts = list(slices(batch, 4))
    assert [p.num_rows for p in parts] == [4, 2]
    assert pa.Table.from_batches(parts).to_batches()[0].num_rows == 4
    assert pa.Table.from_batches(parts).equals(pa.Table.from_batches([batch]))


# -- the sinks ------------------------------------------------------------------------------------


def sink_batch(**columns: Any) -> Any:
    return pa.RecordBatch.from_pydict(columns)


def test_a_batch_of_one_topic_without_headers_is_one_send_batch() -> None:
    batch = sink_batch(key=["a", None, "c"], value=[b"1", b"2", None])
    assert uniform(batch, "out") == Uniform("out", None, [(b"a", b"1"), (None, b"2"), (b"c", None)])
    strings = sink_batch(value=["é", "x"])  # strings are written as UTF-8
    assert uniform(strings, "out") == Uniform("out", None, [(None, "é".encode()), (None, b"x")])


def test_topic_and_partition_columns_of_one_value_are_taken() -> None:
    batch = sink_batch(
        value=[b"1", b"2"],
        topic=["t2", "t2"],
        partition=pa.array([4, 4], pa.int32()),
        headers=pa.array(
            [[], None], pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        ),
    )
    assert uniform(batch, None) == Uniform("t2", 4, [(None, b"1"), (None, b"2")])
    defaulted = sink_batch(
        value=[b"1", b"2"], topic=[None, "out"], partition=pa.array([None, None], pa.int32())
    )
    assert uniform(defaulted, "out") == Uniform("out", None, [(None, b"1"), (None, b"2")])


@pytest.mark.parametrize(
    "columns",
    [
        {"topic": ["a", "b"]},
        {"topic": [None, "other"]},  # the option's topic and another
        {"topic": ["", ""]},
        {"partition": pa.array([0, 1], pa.int32())},
        {"partition": pa.array([0, None], pa.int32())},
        {
            "headers": pa.array(
                [[{"key": "h", "value": b"v"}], []],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            )
        },
        {"key": pa.array([1, 2])},
    ],
    ids=[
        "topics",
        "topic-and-option",
        "empty-topic",
        "partitions",
        "some-partitions",
        "headers",
        "int-key",
    ],
)
def test_anything_else_goes_row_by_row(columns: dict[str, Any]) -> None:
    assert uniform(sink_batch(value=[b"1", b"2"], **columns), "out") is None


def test_a_value_column_and_a_topic_are_required() -> None:
    with pytest.raises(ValueError, match="value column"):
        uniform(sink_batch(key=[b"k"]), "out")
    with pytest.raises(ValueError, match="no topic"):
        uniform(sink_batch(value=[b"v"]), None)
