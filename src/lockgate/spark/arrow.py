# spark/arrow.py — the connector's Arrow side, in bulk: record batches of Spark's Kafka schema
# made from the client's Fetch columns (client/columns.py) by wrapping their buffers, and the
# rows of Spark's Arrow batches turned into producer records column by column. Neither does
# Python work per row on the common path; the sink falls back to row by row only for rows the
# producer's send_batch() cannot take (headers, several topics or partitions in one batch).
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lockgate.client.cluster import TopicPartition
from lockgate.client.columns import FetchColumns


def arrow_schema() -> Any:
    """The Arrow form of SCHEMA, exactly as PySpark derives it (it rejects any other)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(header)),
        ]
    )
    return to_arrow_schema(schema, timezone="UTC")


# ---------------------------------------------------------------------------------------------
# The source: Fetch columns -> record batches


def record_batch(columns: FetchColumns, tp: TopicPartition, schema: Any) -> Any:
    """The rows of `columns` (all of partition `tp`) as a pyarrow.RecordBatch of `schema`
    (arrow_schema()); the buffers are wrapped, not copied."""
    import pyarrow as pa

    rows, buf = columns.rows, pa.py_buffer

    def binary(
        kind: Any, length: int, nulls: int, validity: bytes, offsets: bytes, data: bytes
    ) -> Any:
        return pa.Array.from_buffers(
            kind, length, [buf(validity) if nulls else None, buf(offsets), buf(data)], nulls
        )

    headers_type = schema.field("headers").type
    entry_type = headers_type.value_type
    entries = pa.Array.from_buffers(
        entry_type,
        columns.headers,
        [None],
        0,
        children=[
            binary(
                entry_type.field("key").type,
                columns.headers,
                0,
                b"",
                columns.header_key_offsets,
                columns.header_key_data,
            ),
            binary(
                entry_type.field("value").type,
                columns.headers,
                columns.header_value_nulls,
                columns.header_value_validity,
                columns.header_value_offsets,
                columns.header_value_data,
            ),
        ],
    )
    arrays = [
        binary(
            schema.field("key").type,
            rows,
            columns.key_nulls,
            columns.key_validity,
            columns.key_offsets,
            columns.key_data,
        ),
        binary(
            schema.field("value").type,
            rows,
            columns.value_nulls,
            columns.value_validity,
            columns.value_offsets,
            columns.value_data,
        ),
        pa.repeat(pa.scalar(tp.topic, schema.field("topic").type), rows),
        pa.repeat(pa.scalar(tp.partition, schema.field("partition").type), rows),
        pa.Array.from_buffers(schema.field("offset").type, rows, [None, buf(columns.offsets)], 0),
        pa.Array.from_buffers(
            schema.field("timestamp").type, rows, [None, buf(columns.timestamps)], 0
        ),
        pa.Array.from_buffers(
            schema.field("timestampType").type, rows, [None, buf(columns.timestamp_types)], 0
        ),
        pa.Array.from_buffers(
            headers_type, rows, [None, buf(columns.header_offsets)], 0, children=[entries]
        ),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def slices(batch: Any, rows: int) -> Iterator[Any]:
    """`batch` in record batches of at most `rows` rows (zero-copy slices)."""
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)


# ---------------------------------------------------------------------------------------------
# The sinks: Spark's Arrow batches -> producer records


@dataclass(frozen=True)
class Uniform:
    """Every row of a batch as one send_batch() call: one topic, one partition (None: by key),
    no headers."""

    topic: str
    partition: int | None
    records: list[tuple[bytes | None, bytes | None]]


def uniform(batch: Any, default_topic: str | None) -> Uniform | None:
    """The rows of one of Spark's Arrow batches (the columns of Spark's Kafka sink: value, and
    optionally key, topic, partition, headers) as one Uniform, or None when they must be sent
    one by one: headers, more than one topic or partition, a key or value that is neither
    binary nor string. Raises ValueError when there is no value column or no topic."""
    import pyarrow.compute as pc

    names = batch.schema.names
    if "value" not in names:
        raise ValueError("the lockgate sink needs a value column")
    if "headers" in names and (pc.sum(pc.list_value_length(batch.column("headers"))).as_py() or 0):
        return None
    topic: Any = default_topic
    if "topic" in names:
        column = batch.column("topic")
        distinct = pc.unique(column.drop_null())
        if len(distinct) > 1:
            return None
        if len(distinct) == 1:
            named = distinct[0].as_py()
            if not named or (column.null_count and named != default_topic):
                return None  # rows of the column's topic and of the option's
            topic = named
    if not topic:
        raise ValueError("no topic: give a topic column or the topic option")
    partition = None
    if "partition" in names:
        column = batch.column("partition")
        if column.null_count < len(column):
            distinct = pc.unique(column)
            if column.null_count or len(distinct) != 1:
                return None  # chosen and hashed rows, or several partitions
            partition = int(distinct[0].as_py())
    values = _binary(batch, "value")
    keys = _binary(batch, "key") if "key" in names else [None] * batch.num_rows
    if values is None or keys is None:
        return None
    return Uniform(str(topic), partition, list(zip(keys, values, strict=True)))


def _binary(batch: Any, name: str) -> list[bytes | None] | None:
    """A binary or string column as bytes objects (strings as their UTF-8, which Arrow holds
    already: the cast keeps the buffers); None for any other type."""
    import pyarrow as pa

    column = batch.column(name)
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    elif not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        return None
    items: list[bytes | None] = column.to_pylist()
    return items
