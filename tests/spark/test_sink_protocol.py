"""The sink's two-phase commit protocol, driven step by step without a Spark job (the task and
driver halves are called directly, as Spark would after a crash at each point): abort after the
commit point rolls forward, a replayed decided batch writes nothing, an undecided prepared
transaction is aborted by the next attempt, a foreign checkpoint is refused, recover() finishes
a decided batch write."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.spark.options import SinkOptions
from lockgate.spark.sink import (
    BatchWriter,
    CheckpointMismatchError,
    Decision,
    PreparedMessage,
    StreamWriter,
    _prepared,
    _record_decision,
    _write_task,
    last_decision,
    recover,
)
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic


def rows(tag: str, count: int) -> Iterator[pa.RecordBatch]:
    """What Spark hands an Arrow writer: record batches of the sink's columns."""
    keys = [f"k{i}".encode() for i in range(count)]
    values = [f"{tag}-{i}".encode() for i in range(count)]
    return iter([pa.RecordBatch.from_pydict({"key": keys, "value": values})])


async def visible(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    tp = TopicPartition(topic, 0)
    found: list[bytes] = []
    async with Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as c:
        c.assign([tp])
        end = (await c.end_offsets([tp]))[tp]
        for _ in range(100):
            if await c.position(tp) >= end:
                break
            found.extend(m.value or b"" for m in await c.poll(200))
    return sorted(found)


@pytest.fixture
def sink(spark_broker: BrokerProcess) -> SinkOptions:
    topic = f"protocol-{uuid.uuid4().hex[:8]}"
    create_topic(spark_broker.bootstrap, topic, 1)
    return SinkOptions(spark_broker.bootstrap, topic, f"lockgate-spark-test-{uuid.uuid4().hex}")


def write(sink: SinkOptions, tag: str, batch: int | None) -> PreparedMessage:
    async def run() -> PreparedMessage:
        decision = await last_decision(sink.bootstrap, sink.transactional_id_prefix)
        return await _write_task(sink, rows(tag, 5), batch, decision)

    return asyncio.run(run())


def expected(*tags: str) -> list[bytes]:
    return sorted(f"{tag}-{i}".encode() for tag in tags for i in range(5))


def test_abort_after_the_commit_point_rolls_forward_and_the_replay_writes_nothing(
    sink: SinkOptions,
) -> None:
    assert sink.topic is not None
    first = write(sink, "b0", 0)
    StreamWriter(sink).commit([first], 0)
    prepared = write(sink, "b1", 1)
    # commit() of batch 1 got past its commit point, then failed: Spark calls abort().
    asyncio.run(
        _record_decision(
            sink.bootstrap, sink.transactional_id_prefix, Decision(1, _prepared([prepared]))
        )
    )
    assert asyncio.run(visible(sink.bootstrap, sink.topic)) == expected("b0")
    StreamWriter(sink).abort([prepared], 1)
    assert asyncio.run(visible(sink.bootstrap, sink.topic)) == expected("b0", "b1")
    # The restarted query replays batch 1: the task recognises it, the driver re-commits it.
    replay = write(sink, "b1-again", 1)
    assert replay.state is None
    StreamWriter(sink).commit([replay], 1)
    assert asyncio.run(visible(sink.bootstrap, sink.topic)) == expected("b0", "b1")


def test_an_undecided_prepared_transaction_is_aborted_by_the_next_attempt(
    sink: SinkOptions,
) -> None:
    assert sink.topic is not None
    write(sink, "lost", 0)  # prepared; the driver died before deciding
    retried = write(sink, "b0", 0)
    StreamWriter(sink).commit([retried], 0)
    assert asyncio.run(visible(sink.bootstrap, sink.topic)) == expected("b0")
    assert len(asyncio.run(visible(sink.bootstrap, sink.topic, "read_uncommitted"))) == 10


def test_a_checkpoint_older_than_the_last_decision_is_refused(sink: SinkOptions) -> None:
    StreamWriter(sink).commit([write(sink, "b3", 3)], 3)
    with pytest.raises(CheckpointMismatchError):
        write(sink, "b2", 2)
    with pytest.raises(CheckpointMismatchError):
        StreamWriter(sink).commit([], 2)


def test_recover_completes_a_batch_write_whose_driver_died_after_deciding(
    sink: SinkOptions,
) -> None:
    assert sink.topic is not None
    prepared = write(sink, "job", None)
    asyncio.run(
        _record_decision(
            sink.bootstrap, sink.transactional_id_prefix, Decision(-1, _prepared([prepared]))
        )
    )
    assert asyncio.run(visible(sink.bootstrap, sink.topic)) == []
    decision = recover(sink.bootstrap, sink.transactional_id_prefix)
    assert decision is not None and decision.batch == -1
    assert asyncio.run(visible(sink.bootstrap, sink.topic)) == expected("job")
    recover(sink.bootstrap, sink.transactional_id_prefix)  # idempotent
    BatchWriter(sink).abort([prepared])  # the decision stands: nothing is undone
    assert asyncio.run(visible(sink.bootstrap, sink.topic)) == expected("job")


def test_prepared_transactions_of_tasks_the_replay_no_longer_has_are_aborted(
    sink: SinkOptions,
) -> None:
    assert sink.topic is not None

    async def orphan(partition_id: int) -> None:
        # What task `partition_id` of a crashed run with more tasks left behind.
        transactional_id = f"{sink.transactional_id_prefix}-{partition_id}"
        async with Producer(sink.bootstrap, transactional_id=transactional_id) as producer:
            await producer.init_transactions(enable_2pc=True)
            producer.begin_transaction()
            await producer.send(sink.topic or "", b"orphan")
            await producer.prepare_transaction()

    asyncio.run(orphan(1))
    asyncio.run(orphan(2))
    StreamWriter(sink).commit([write(sink, "b0", 0)], 0)  # the replay has one task
    assert asyncio.run(visible(sink.bootstrap, sink.topic)) == expected("b0")
    assert asyncio.run(open_records(sink.bootstrap, sink.topic)) == 0


async def open_records(bootstrap: str, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    async with (
        Consumer(bootstrap, isolation_level="read_uncommitted") as dirty,
        Consumer(bootstrap, isolation_level="read_committed") as clean,
    ):
        return (await dirty.end_offsets([tp]))[tp] - (await clean.end_offsets([tp]))[tp]
