# spark/kafka.py — what the connector asks of the cluster, as blocking calls for Spark's driver
# and tasks (each runs lockgate's asyncio client in its own short event loop): partitions of the
# subscription, offset ranges, and reading one partition's range as Arrow record batches (PySpark
# hands those to the JVM as they are, without converting row by row; spark/arrow.py makes them
# from the Fetch records decoded in bulk, by a fetching thread that keeps a few batches ahead).
from __future__ import annotations

import asyncio
import contextlib
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from lockgate.client.cluster import TopicPartition
from lockgate.client.columns import ColumnDecoder, FetchColumns
from lockgate.client.consumer import Consumer
from lockgate.spark.arrow import arrow_schema, record_batch, slices
from lockgate.spark.options import EARLIEST, LATEST, SourceOptions

READ_TIMEOUT_S = 120.0  # without a single record fetched
ROWS_PER_BATCH = 10_000  # the most rows of one Arrow batch handed to Spark
BYTES_PER_BATCH = 64 << 20  # the decoded bytes past which a batch is handed over anyway
PARTITION_FETCH_BYTES = 8 << 20  # one task reads one partition: fewer, larger fetches
PREFETCHED = 4  # decoded column sets the fetching thread may hold ahead of Spark


def _consumer(options: SourceOptions, decoder: ColumnDecoder | None = None) -> Consumer:
    return Consumer(
        options.bootstrap,
        client_id="lockgate-spark",
        isolation_level="read_committed" if options.read_committed else "read_uncommitted",
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
        security=options.security,
        decoder=decoder,
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


def read_range(options: SourceOptions, tp: TopicPartition, start: int, end: int) -> Iterator[Any]:
    """[start, end) of one partition as Arrow record batches of at most ROWS_PER_BATCH rows
    (control records and, under read_committed, aborted ones are skipped, so fewer than
    end - start rows may come). The Fetch records are decoded straight into Arrow buffers
    (client/columns.py, compiled when built) by a thread of its own, which fetches the next
    records while Spark takes the batches already decoded (at most PREFETCHED ahead)."""
    if start >= end:
        return
    schema = arrow_schema()
    ready: queue.Queue[FetchColumns | BaseException | None] = queue.Queue(PREFETCHED)
    stop = threading.Event()
    fetcher = threading.Thread(
        target=_fetch_range,
        args=(options, tp, start, end, ready, stop),
        name=f"lockgate-spark-fetch-{tp}",
        daemon=True,
    )
    fetcher.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield from slices(record_batch(item, tp, schema), ROWS_PER_BATCH)
    finally:
        stop.set()
        with contextlib.suppress(queue.Empty):
            while True:  # a fetcher blocked on a full queue sees `stop` once it has room
                ready.get_nowait()
        fetcher.join()


def _fetch_range(
    options: SourceOptions,
    tp: TopicPartition,
    start: int,
    end: int,
    ready: queue.Queue[FetchColumns | BaseException | None],
    stop: threading.Event,
) -> None:
    """The fetching thread of read_range: its own event loop and consumer; hands over the
    decoded columns every ROWS_PER_BATCH rows (or BYTES_PER_BATCH bytes), then None, or the
    exception that ended it."""

    def hand_over(item: FetchColumns | BaseException | None) -> bool:
        while not stop.is_set():
            with contextlib.suppress(queue.Full):
                ready.put(item, timeout=0.1)
                return True
        return False

    decoder = ColumnDecoder(end)
    try:
        asyncio.run(_fetch(options, tp, start, end, decoder, hand_over, stop))
    except BaseException as exc:  # handed to the task's thread, which raises it
        hand_over(exc)
    else:
        hand_over(None)


async def _fetch(
    options: SourceOptions,
    tp: TopicPartition,
    start: int,
    end: int,
    decoder: ColumnDecoder,
    hand_over: Callable[[FetchColumns | BaseException | None], bool],
    stop: threading.Event,
) -> None:
    async with _consumer(options, decoder) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        position = start
        deadline = time.monotonic() + READ_TIMEOUT_S
        while position < end and not stop.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {tp} [{start}, {end}) took too long")
            await consumer.poll(500)
            moved = await consumer.position(tp)
            if moved > position:
                deadline = time.monotonic() + READ_TIMEOUT_S  # progress: the limit is per stall
                position = moved
            builder = decoder.builder
            if builder.rows >= ROWS_PER_BATCH or builder.size >= BYTES_PER_BATCH:
                hand_over(decoder.take())
        if decoder.builder.rows and not stop.is_set():
            hand_over(decoder.take())
