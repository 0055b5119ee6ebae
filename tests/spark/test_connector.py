"""The lockgate data source on a local[2] Spark session: batch and streaming reads (read limits,
read_committed), and the exactly-once sinks (commit, task failure, replay after a restart)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

pytestmark = pytest.mark.timeout(280)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def fill(bootstrap: str, topic: str, committed: int, aborted: int = 0) -> None:
    async with Producer(bootstrap, transactional_id=unique("feeder")) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for i in range(committed):
            await producer.send(topic, f"v{i}".encode(), f"k{i}".encode(), headers=[("n", b"1")])
        await producer.commit_transaction()
        if aborted:
            producer.begin_transaction()
            for i in range(aborted):
                await producer.send(topic, f"aborted{i}".encode())
            await producer.flush()  # on the log, so that read_committed has to hide them
            await producer.abort_transaction()


async def committed_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(wanted)
        ends = await consumer.end_offsets(wanted)
        seen: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            positions = [await consumer.position(tp) for tp in wanted]
            if all(p >= ends[tp] for p, tp in zip(positions, wanted, strict=True)):
                break
            seen.extend(m.value or b"" for m in await consumer.poll(200))
        return seen


def read_options(broker: BrokerProcess, topic: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic}


def test_batch_read_has_kafkas_schema_and_hides_aborted_records(
    spark: Any, spark_broker: BrokerProcess
) -> None:
    topic = unique("read")
    create_topic(spark_broker.bootstrap, topic, 2)
    asyncio.run(fill(spark_broker.bootstrap, topic, 10, aborted=5))
    df = spark.read.format("lockgate").options(**read_options(spark_broker, topic)).load()
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]  # fmt: skip
    rows = df.collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(f"v{i}".encode() for i in range(10))
    assert {r.topic for r in rows} == {topic}
    assert all(r.headers[0].key == "n" and bytes(r.headers[0].value) == b"1" for r in rows)
    uncommitted = (
        spark.read.format("lockgate")
        .options(
            **read_options(spark_broker, topic), **{"kafka.isolation.level": "read_uncommitted"}
        )
        .load()
    )
    assert uncommitted.count() == 15
    partial = (
        spark.read.format("lockgate")
        .options(**read_options(spark_broker, topic))
        .option("startingOffsets", json.dumps({topic: {"0": 2, "1": 0}}))
        .option("endingOffsets", json.dumps({topic: {"0": 4, "1": 0}}))
        .load()
    )
    assert [(r.partition, r.offset) for r in partial.collect()] == [(0, 2), (0, 3)]


def test_batch_write_commits_all_and_a_failed_job_leaves_nothing(
    spark: Any, spark_broker: BrokerProcess
) -> None:
    source = spark.createDataFrame(
        [(f"k{i}", f"out{i}") for i in range(20)], "key string, value string"
    ).repartition(3)
    target = unique("write")
    create_topic(spark_broker.bootstrap, target, 3)
    (
        source.selectExpr("cast(key as binary) key", "cast(value as binary) value")
        .write.format("lockgate")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("topic", target)
        .mode("append")
        .save()
    )
    written = asyncio.run(committed_values(spark_broker.bootstrap, target, 3))
    assert sorted(written) == sorted(f"out{i}".encode() for i in range(20))

    failing = unique("failing")
    create_topic(spark_broker.bootstrap, failing, 3)
    broken = source.selectExpr(
        "cast(key as binary) key",
        "cast(case when value = 'out7' then raise_error('boom') else value end as binary) value",
    )
    with pytest.raises(Exception, match="boom"):
        (
            broken.write.format("lockgate")
            .option("kafka.bootstrap.servers", spark_broker.bootstrap)
            .option("topic", failing)
            .mode("append")
            .save()
        )
    assert asyncio.run(committed_values(spark_broker.bootstrap, failing, 3)) == []


def test_a_batch_write_needs_the_append_mode(spark: Any, spark_broker: BrokerProcess) -> None:
    """format("kafka") writes in Spark's default mode (ErrorIfExists); Spark refuses it, and
    every mode but append and overwrite, for Python data sources before lockgate is asked; the
    sink refuses overwrite itself, naming the mode to use."""
    rows = spark.createDataFrame([("k", "v")], "key string, value string")
    writer = (
        rows.write.format("lockgate")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("topic", unique("modes"))
    )
    with pytest.raises(Exception, match=r"UNSUPPORTED_DATA_SOURCE_SAVE_MODE.*ErrorIfExists"):
        writer.save()
    with pytest.raises(Exception, match=r'cannot overwrite them: write with \.mode\("append"\)'):
        writer.mode("overwrite").save()


def test_streaming_read_with_read_limits_and_available_now(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = unique("stream-in")
    create_topic(spark_broker.bootstrap, topic, 2)
    asyncio.run(fill(spark_broker.bootstrap, topic, 30, aborted=4))
    stream = (
        spark.readStream.format("lockgate")
        .options(**read_options(spark_broker, topic))
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .load()
    )
    query = (
        stream.selectExpr("cast(value as string) value")
        .writeStream.format("memory")
        .queryName("stream_in")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    values = sorted(r.value for r in spark.sql("select value from stream_in").collect())
    assert values == sorted(f"v{i}" for i in range(30))
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3  # 30 records at most 10 per trigger (plus markers)
    assert all(p["numInputRows"] <= 10 for p in batches)


def run_pipeline(
    spark: Any, broker: BrokerProcess, source: str, target: str, checkpoint: Path
) -> Any:
    stream = (
        spark.readStream.format("lockgate")
        .options(**read_options(broker, source))
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "8")
        .load()
    )
    return (
        stream.selectExpr("key", "cast(concat('out:', cast(value as string)) as binary) value")
        .writeStream.format("lockgate")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_streaming_write_is_exactly_once_across_a_restart(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    source, target = unique("eos-in"), unique("eos-out")
    create_topic(spark_broker.bootstrap, source, 2)
    create_topic(spark_broker.bootstrap, target, 2)
    asyncio.run(fill(spark_broker.bootstrap, source, 20))
    checkpoint = tmp_path / "checkpoint"
    run_pipeline(spark, spark_broker, source, target, checkpoint).awaitTermination(120)
    # A restart that replays the last batch: drop Spark's record of having committed it.
    commits = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    assert len(commits) >= 3  # 20 records at most 8 per batch
    commits[-1].unlink()
    (checkpoint / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    asyncio.run(fill(spark_broker.bootstrap, source, 0))
    run_pipeline(spark, spark_broker, source, target, checkpoint).awaitTermination(120)
    written = asyncio.run(committed_values(spark_broker.bootstrap, target, 2))
    assert sorted(written) == sorted(f"out:v{i}".encode() for i in range(20))
    # The replay wrote nothing, not even into a transaction left open: its tasks knew the batch
    # id and that it was decided.
    assert asyncio.run(open_transaction_records(spark_broker.bootstrap, target, 2)) == 0


async def open_transaction_records(bootstrap: str, topic: str, partitions: int) -> int:
    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    async with (
        Consumer(bootstrap, isolation_level="read_uncommitted") as dirty,
        Consumer(bootstrap, isolation_level="read_committed") as clean,
    ):
        high, stable = await dirty.end_offsets(wanted), await clean.end_offsets(wanted)
    return sum(high[tp] - stable[tp] for tp in wanted)
