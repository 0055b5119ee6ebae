# spark/kafka.py — what the connector asks of the cluster, as blocking calls for Spark's driver
# and tasks (each runs lockgate's asyncio client in its own short event loop): partitions of the
# subscription, offset ranges, and reading one partition's range as rows.
from __future__ import annotations

import asyncio
import datetime
import re
import time
from collections.abc import Iterator
from typing import Any

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, Message
from lockgate.spark.options import EARLIEST, LATEST, SourceOptions

READ_TIMEOUT_S = 120.0
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def _consumer(options: SourceOptions) -> Consumer:
    return Consumer(
        options.bootstrap,
        client_id="lockgate-spark",
        isolation_level="read_committed" if options.read_committed else "read_uncommitted",
        auto_offset_reset="earliest",
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


def row(message: Message) -> tuple[Any, ...]:
    return (
        message.key,
        message.value,
        message.topic,
        message.partition,
        message.offset,
        _EPOCH + datetime.timedelta(milliseconds=message.timestamp),
        int(message.timestamp_type),
        [(name, value) for name, value in message.headers],
    )


def read_range(
    options: SourceOptions, tp: TopicPartition, start: int, end: int
) -> Iterator[tuple[Any, ...]]:
    """Rows of [start, end) of one partition (control records and, under read_committed,
    aborted ones are skipped, so fewer than end - start rows may come)."""
    if start >= end:
        return iter(())

    async def fetch() -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        async with _consumer(options) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, start)
            deadline = time.monotonic() + READ_TIMEOUT_S
            while await consumer.position(tp) < end:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {tp} [{start}, {end}) took too long")
                for message in await consumer.poll(500):
                    if message.offset < end:
                        rows.append(row(message))
        return rows

    return iter(asyncio.run(fetch()))
