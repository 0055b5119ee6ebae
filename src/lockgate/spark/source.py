# spark/source.py — the "lockgate" data source: batch and streaming reads with the options and
# row schema of Spark's Kafka source, and the exactly-once sinks of sink.py.
#
# Offsets in Spark's checkpoint are {"topic": {"partition": next offset}}. Under read_committed
# "latest" is the last stable offset, so a micro-batch never ends inside an open transaction.
from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from lockgate.client.cluster import TopicPartition
from lockgate.spark import kafka
from lockgate.spark.options import (
    SCHEMA,
    OptionError,
    SourceOptions,
    sink_options,
    source_options,
)

# A batch write's save mode. Spark's Kafka sink takes Append and the default, ErrorIfExists;
# PySpark's Python data sources are only offered Append and Overwrite (Spark refuses the others
# itself, before any lockgate code runs, with UNSUPPORTED_DATA_SOURCE_SAVE_MODE). Overwrite
# cannot mean anything for a topic, so it is refused here, saying what to write instead.
SAVE_MODE_HELP = (
    'the lockgate sink appends to topics and cannot overwrite them: write with .mode("append") '
    '(df.write.format("kafka").save() used Spark\'s default mode, ErrorIfExists, which '
    "PySpark's Python data sources do not take)"
)


@dataclass
class RangePartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int


def _ranges(
    start: dict[TopicPartition, int], end: dict[TopicPartition, int]
) -> list[RangePartition]:
    return [
        RangePartition(tp.topic, tp.partition, start.get(tp, 0), end[tp])
        for tp in sorted(end)
        if end[tp] > start.get(tp, 0)
    ]


def _to_json(offsets: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return result


def _from_json(data: dict[str, dict[str, int]]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(p)): int(offset)
        for topic, partitions in data.items()
        for p, offset in partitions.items()
    }


class LockgateDataSource(DataSource):
    """format("lockgate"): Spark's Kafka connector's options and schema, exactly-once sinks.
    Register it once per session (spark.dataSource.register). Batch writes need
    .mode("append"): Spark's default mode, which format("kafka") writes with, is refused by
    Spark for every Python data source."""

    @classmethod
    def name(cls) -> str:
        return "lockgate"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError(SAVE_MODE_HELP)
        from lockgate.spark.sink import BatchWriter

        return BatchWriter(sink_options(self.options, f"lockgate-spark-{uuid.uuid4().hex[:12]}"))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from lockgate.spark.sink import StreamWriter

        return StreamWriter(sink_options(self.options, stream_prefix(self.options)))


def stream_prefix(options: Mapping[str, str]) -> str:
    """The default transactional id prefix of a streaming query: stable across restarts from
    one checkpoint (the sink finds its decisions and kept transactions again), different for a
    new checkpoint, even at the same path (Spark's query id, kept in the checkpoint's metadata
    file, is part of it when the checkpoint is on a local file system)."""
    if options.get("transactional.id.prefix"):
        return options["transactional.id.prefix"]
    checkpoint = options.get("checkpointLocation")
    if not checkpoint:
        raise OptionError(
            "the exactly-once stream sink needs the checkpointLocation option of writeStream "
            "(or transactional.id.prefix): its transactional ids must survive restarts"
        )
    query_id = ""
    metadata = Path(checkpoint.removeprefix("file:")) / "metadata"
    if "://" not in checkpoint.removeprefix("file://") and metadata.is_file():
        with contextlib.suppress(ValueError, OSError):
            query_id = str(json.loads(metadata.read_text()).get("id", ""))
    return f"lockgate-spark-{uuid.uuid5(uuid.NAMESPACE_URL, checkpoint + '#' + query_id).hex}"


class BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        start = kafka.offsets(self.options, self.options.starting)
        end = kafka.offsets(self.options, self.options.ending)
        return _ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:  # pyarrow.RecordBatch
        assert isinstance(partition, RangePartition)
        return kafka.read_range(
            self.options,
            TopicPartition(partition.topic, partition.partition),
            partition.start,
            partition.end,
        )


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's end

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what is stable now, in batches of the read limit."""
        self.target = kafka.offsets(self.options, "latest")

    def initialOffset(self) -> dict[str, dict[str, int]]:
        return _to_json(kafka.offsets(self.options, self.options.starting))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, Any]:
        begin = _from_json(start)
        latest = self.target if self.target is not None else kafka.offsets(self.options, "latest")
        if isinstance(limit, ReadMaxRows):
            latest = _limited(begin, latest, int(limit.max_rows))
        return _to_json({tp: max(offset, begin.get(tp, 0)) for tp, offset in latest.items()})

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> Sequence[InputPartition]:
        return _ranges(_from_json(start), _from_json(end))

    def read(self, partition: InputPartition) -> Iterator[Any]:  # pyarrow.RecordBatch
        assert isinstance(partition, RangePartition)
        return kafka.read_range(
            self.options,
            TopicPartition(partition.topic, partition.partition),
            partition.start,
            partition.end,
        )

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Offsets live in Spark's checkpoint; nothing to tell the cluster."""


def _limited(
    begin: dict[TopicPartition, int], latest: dict[TopicPartition, int], budget: int
) -> dict[TopicPartition, int]:
    """maxOffsetsPerTrigger: the budget of offsets shared out over the partitions in turn, as
    evenly as their backlogs allow. A partition new since `begin` (partitions added, a new topic
    matching subscribePattern) is read from its start, as Spark's Kafka source does, within the
    same budget."""
    end = {tp: begin.get(tp, 0) for tp in latest}
    backlog = {tp: latest[tp] - end[tp] for tp in latest if latest[tp] > end[tp]}
    while budget > 0 and backlog:
        share = max(1, budget // len(backlog))
        for tp in sorted(backlog):
            step = min(share, backlog[tp], budget)
            end[tp] += step
            backlog[tp] -= step
            budget -= step
            if not backlog[tp]:
                del backlog[tp]
            if budget == 0:
                break
    return end
