# spark/kafka.py — what the connector asks of the cluster, as blocking calls for Spark's driver
# and tasks (each runs lockgate's asyncio client in its own short event loop): partitions of the
# subscription, offset ranges, and reading one partition's range as Arrow record batches (PySpark
# hands those to the JVM as they are, without converting row by row).
from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, Message
from lockgate.spark.options import EARLIEST, LATEST, SourceOptions

READ_TIMEOUT_S = 120.0  # without a single record fetched
ROWS_PER_BATCH = 10_000


def _consumer(options: SourceOptions) -> Consumer:
    return Consumer(
        options.bootstrap,
        client_id="lockgate-spark",
        isolation_level="read_committed" if options.read_committed else "read_uncommitted",
        auto_offset_reset="earliest",
        security=options.security,
    )


async def _partitions(consumer: Consumer, options: SourceOptions) -> list[TopicPartition]:
    if options.assign:
        return sorted(options.assign)
    if options.pattern is not None:
        metadata = await consumer.cluster.refresh_metadata(None)
        pattern = re.compile(options.pattern)
        topics = sorted(
            n for n, info in metadata.topics.items() if not info.internal and pattern.fullmatch(n)
        )
    else:
        topics = list(options.topics)
    result: list[TopicPartition] = []
    for topic in topics:
        result.extend(TopicPartition(topic, p) for p in await consumer.partitions_for(topic))
    return result


def offsets(options: SourceOptions, spec: str) -> dict[TopicPartition, int]:
    """The offsets `spec` ("earliest", "latest" or JSON) names for every partition of the
    subscription; "latest" is the last stable offset under read_committed."""

    async def resolve() -> dict[TopicPartition, int]:
        async with _consumer(options) as consumer:
            partitions = await _partitions(consumer, options)
            wanted = options.offsets_spec(spec, LATEST)
            earliest = await consumer.beginning_offsets(partitions)
            latest = await consumer.end_offsets(partitions)
            result = {}
            for tp in partitions:
                chosen = wanted if isinstance(wanted, int) else wanted.get(tp, LATEST)
                result[tp] = (
                    earliest[tp]
                    if chosen == EARLIEST
                    else latest[tp]
                    if chosen == LATEST
                    else min(max(chosen, earliest[tp]), latest[tp])
                )
            return result

    return asyncio.run(resolve())


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


def _batch(schema: Any, messages: list[Message]) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [
            [m.key for m in messages],
            [m.value for m in messages],
            [m.topic for m in messages],
            [m.partition for m in messages],
            [m.offset for m in messages],
            [m.timestamp * 1000 for m in messages],  # microseconds, as Spark's timestamps
            [int(m.timestamp_type) for m in messages],
            [[{"key": k, "value": v} for k, v in m.headers] for m in messages],
        ],
        schema=schema,
    )


def read_range(options: SourceOptions, tp: TopicPartition, start: int, end: int) -> Iterator[Any]:
    """[start, end) of one partition as Arrow record batches of at most ROWS_PER_BATCH rows,
    fetched as Spark consumes them (control records and, under read_committed, aborted ones
    are skipped, so fewer than end - start rows may come)."""
    if start >= end:
        return
    schema = arrow_schema()
    loop = asyncio.new_event_loop()
    consumer = _consumer(options)
    try:
        loop.run_until_complete(consumer.start())
        consumer.assign([tp])
        consumer.seek(tp, start)
        pending: list[Message] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while loop.run_until_complete(consumer.position(tp)) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {tp} [{start}, {end}) took too long")
            fetched = loop.run_until_complete(consumer.poll(500))
            if fetched:
                deadline = time.monotonic() + READ_TIMEOUT_S  # progress: the limit is per stall
            pending.extend(m for m in fetched if m.offset < end)
            while len(pending) >= ROWS_PER_BATCH:
                yield _batch(schema, pending[:ROWS_PER_BATCH])
                del pending[:ROWS_PER_BATCH]
        if pending:
            yield _batch(schema, pending)
    finally:
        loop.run_until_complete(consumer.close())
        loop.close()
