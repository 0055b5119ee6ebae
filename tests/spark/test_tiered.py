"""Spark reads a tiered topic (KIP-405) whose history is mostly in the object store (S3Proxy):
a batch read from earliest with lockgate's data source returns every record, key, value and
headers as produced, read_committed without the aborted transactions' records and
read_uncommitted with them; Spark's own Kafka connector (format "kafka") returns the same
values. The history is tests/support/tiered.py's, on a broker of this module's (the Spark
session is the shared one of tests/conftest.py, on the worker of tests/support/scheduling.py's
shared unit)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.object_store import S3ProxyServer
from tests.support.reference_kafka import spark_kafka_jars
from tests.support.tiered import (
    TOPIC_CONFIG,
    History,
    tiered_broker,
    wait_until_remote,
    write_history,
)

pytestmark = [pytest.mark.compat, pytest.mark.timeout(280)]

TOPIC = "spark-history"
PARTITIONS = 2

# (partition, offset, key, value, headers) of one record
Read = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]


@pytest.fixture(scope="module")
def tiered(
    s3proxy: S3ProxyServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, History]]:
    data = tmp_path_factory.mktemp("tiered-spark") / "data"
    with tiered_broker(s3proxy, data, f"spark-{uuid.uuid4().hex[:8]}") as broker:
        create_topic(broker.bootstrap, TOPIC, PARTITIONS, TOPIC_CONFIG)
        history = write_history(broker.bootstrap, TOPIC, PARTITIONS, rounds=4)
        wait_until_remote(broker.data_dir, history)
        yield broker, history


def expected(history: History, committed: bool) -> list[Read]:
    out: list[Read] = []
    for partition in range(history.partitions):
        records = (history.read_committed if committed else history.read_uncommitted)(partition)
        out += [(r.partition, r.offset, r.key, r.value, r.headers) for r in records]
    return out


def rows(spark: Any, source: str, bootstrap: str, isolation: str) -> list[Any]:
    """A batch read of the whole topic from earliest, ordered by (partition, offset)."""
    found: list[Any] = (
        spark.read.format(source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", isolation)
        .option("includeHeaders", "true")
        .load()
        .orderBy("partition", "offset")
        .collect()
    )
    return found


def as_read(row: Any) -> Read:
    def raw(value: Any) -> bytes | None:
        return None if value is None else bytes(value)

    headers = tuple((h.key, b"<null>" if h.value is None else bytes(h.value))
                    for h in row.headers or ())  # fmt: skip
    return (row.partition, row.offset, raw(row.key), raw(row.value), headers)


@pytest.mark.parametrize("committed", [True, False], ids=["read_committed", "read_uncommitted"])
def test_lockgates_source_reads_every_record_from_earliest(
    spark: Any, tiered: tuple[BrokerProcess, History], committed: bool
) -> None:
    broker, history = tiered
    isolation = "read_committed" if committed else "read_uncommitted"
    found = [as_read(r) for r in rows(spark, "lockgate", broker.bootstrap, isolation)]
    assert found == expected(history, committed)


def test_sparks_kafka_connector_reads_every_value_from_earliest(
    spark: Any, tiered: tuple[BrokerProcess, History]
) -> None:
    if not spark_kafka_jars():
        reason = "Spark's Kafka connector is not resolved: run `make reference-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    broker, history = tiered
    for committed, isolation in ((True, "read_committed"), (False, "read_uncommitted")):
        found = [as_read(r) for r in rows(spark, "kafka", broker.bootstrap, isolation)]
        assert found == expected(history, committed), isolation
