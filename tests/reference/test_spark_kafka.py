"""Spark's own Kafka connector (spark-sql-kafka-0-10, `format("kafka")`) against lockgate, and
the same scenarios against Apache Kafka to show they give the same results: batch writes and
reads with headers and explicit partitions, read_committed over aborted transactions (Spark
steps over the offsets of markers and aborted batches), a streaming query cut into
micro-batches and resumed from its checkpoint, and the two connectors feeding each other
through lockgate's exactly-once sink."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from lockgate.spark.pipeline import build_query
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.reference_kafka import ReferenceKafka, spark_kafka_jars

pytestmark = [pytest.mark.compat, pytest.mark.timeout(280)]


@pytest.fixture(params=["lockgate", "kafka"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """The broker under test: lockgate, or Apache Kafka for the same scenario."""
    broker: BrokerProcess | ReferenceKafka = request.getfixturevalue(
        "spark_broker" if request.param == "lockgate" else "reference_kafka"
    )
    return broker.bootstrap


@pytest.fixture
def connector(spark: Any) -> Any:
    if not spark_kafka_jars():
        reason = "Spark's Kafka connector is not resolved: run `make reference-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return spark


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def kafka_read(
    spark: Any, bootstrap: str, topic: str, isolation: str = "read_committed", **options: str
) -> list[Any]:
    """A batch read of the whole topic with Spark's connector, ordered by (partition, offset)."""
    rows: list[Any] = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", isolation)
        .options(**options)
        .load()
        .orderBy("partition", "offset")
        .collect()
    )
    return rows


def transactions(bootstrap: str, topic: str, batches: list[tuple[list[str], bool]]) -> None:
    """Each batch of values in one transaction, committed (True) or aborted after it reached
    the log."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("feed")})
    producer.init_transactions(30)
    for values, commit in batches:
        producer.begin_transaction()
        for n, value in enumerate(values):
            producer.produce(topic, value.encode(), f"k{n % 7}".encode())
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def test_batch_write_and_read(connector: Any, bootstrap: str) -> None:
    topic = unique("spark-batch")
    create_topic(bootstrap, topic, partitions=3)
    rows = connector.range(300).selectExpr(
        "CAST(id % 5 AS STRING) AS key",
        "CAST(id AS STRING) AS value",
        "CAST(id % 3 AS INT) AS partition",
        "array(named_struct('key', 'n', 'value', CAST(CAST(id AS STRING) AS BINARY))) AS headers",
    )
    rows.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).save()

    read = kafka_read(connector, bootstrap, topic, includeHeaders="true")
    assert len(read) == 300
    for row in read:
        number = int(row.value.decode())
        assert row.key == str(number % 5).encode()
        assert row.partition == number % 3
        assert [(h.key, bytes(h.value)) for h in row.headers] == [("n", row.value)]
    for partition in range(3):  # each partition's offsets are 0..n-1, in write order per task
        offsets = [row.offset for row in read if row.partition == partition]
        assert offsets == list(range(100))


def test_read_committed_batch_and_stream(connector: Any, bootstrap: str, tmp_path: Path) -> None:
    source, target = unique("spark-txn-in"), unique("spark-txn-out")
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, target, partitions=2)
    first = [f"a{i}" for i in range(60)]
    transactions(bootstrap, source, [(first, True), ([f"x{i}" for i in range(40)], False)])
    second = [f"b{i}" for i in range(60)]
    transactions(bootstrap, source, [(second, True)])

    committed = kafka_read(connector, bootstrap, source)
    assert sorted(row.value.decode() for row in committed) == sorted(first + second)
    uncommitted = kafka_read(connector, bootstrap, source, "read_uncommitted")  # Spark's default
    assert len(uncommitted) == 160

    def stream() -> None:
        query = (
            connector.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .option("maxOffsetsPerTrigger", "25")  # several micro-batches, cut across markers
            .load()
            .selectExpr("key", "value")
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", target)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(240)
        assert query.exception() is None

    stream()
    out = kafka_read(connector, bootstrap, target)
    assert sorted(row.value.decode() for row in out) == sorted(first + second)

    third = [f"c{i}" for i in range(30)]
    transactions(bootstrap, source, [([f"y{i}" for i in range(10)], False), (third, True)])
    stream()  # resumes from the checkpoint's offsets: nothing again, nothing skipped
    out = kafka_read(connector, bootstrap, target)
    assert sorted(row.value.decode() for row in out) == sorted(first + second + third)


def test_connectors_feed_each_other(
    connector: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    """orders → Spark's source → lockgate's exactly-once sink → lockgate's source → Spark's
    sink: every order once at the end, read by Spark's connector under read_committed."""
    orders, middle, target = unique("orders"), unique("enriched"), unique("again")
    for topic in (orders, middle, target):
        create_topic(spark_broker.bootstrap, topic, partitions=2)
    values = [
        json.dumps({"id": i, "customer": f"c{i % 13}", "amount_cents": i * 37 % 20000})
        for i in range(200)
    ]
    transactions(spark_broker.bootstrap, orders, [(values[:120], True), (values[120:], True)])

    for source, sink, source_format, sink_format in (
        (orders, middle, "kafka", "lockgate"),
        (middle, target, "lockgate", "kafka"),
    ):
        query = build_query(
            connector,
            spark_broker.bootstrap,
            source,
            sink,
            str(tmp_path / f"checkpoint-{sink}"),
            max_offsets_per_trigger=70,
            source_format=source_format,
            sink_format=sink_format,
        )
        query.awaitTermination(240)
        assert query.exception() is None

    out = kafka_read(connector, spark_broker.bootstrap, target)
    ids = sorted(json.loads(row.value)["id"] for row in out)
    assert ids == list(range(200))
