"""lockgate's producer end to end with each implementation of its per-record work: the compiled
fast path and its pure-Python twin (LOCKGATE_PURE_PYTHON=1, read when a producer is built).
One in-process broker per test (memory storage); records read back with lockgate's consumer.

What must not depend on the implementation: records land in order with consecutive offsets,
keys on murmur2's partitions, RecordMetadata as the broker assigned it, headers and null
keys/values through the general path, the buffer limit, a metadata refresh between records,
flush waiting for every record, acks=0, and an aborted transaction failing what was queued."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, Message
from lockgate.client.fastpath import PURE_PYTHON_VARIABLE, load
from lockgate.client.partitioner import partition_for_key
from lockgate.client.producer import Producer, RecordMetadata
from lockgate.client.transactions import TransactionAbortedError
from lockgate.server.broker import Broker
from tests.integration.test_client_producer import bootstrap, start_broker

TIMEOUT = 20.0
BUILT = load(pure=False).IMPLEMENTATION == "compiled"


@pytest.fixture(
    params=[
        pytest.param(
            "compiled",
            marks=pytest.mark.skipif(
                not BUILT and os.environ.get("CI") != "true", reason="the extension is not built"
            ),
        ),
        "pure",
    ]
)
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    chosen: str = request.param
    monkeypatch.setenv(PURE_PYTHON_VARIABLE, "1" if chosen == "pure" else "0")
    return chosen


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    instance = await start_broker()
    try:
        yield instance
    finally:
        await instance.stop()


async def read_back(broker: Broker, topic: str, partitions: int, expected: int) -> list[Message]:
    async with Consumer(bootstrap(broker), auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        messages: list[Message] = []
        async with asyncio.timeout(TIMEOUT):
            while len(messages) < expected:
                messages += await consumer.poll(200)
        return messages


async def test_records_arrive_in_order_with_their_metadata(
    broker: Broker, implementation: str
) -> None:
    topic = "fastpath-order"
    broker.topics.create(topic, 3, 1, {})
    keys = [f"key-{i % 37}".encode() for i in range(3_000)]
    async with Producer(bootstrap(broker), linger_ms=5, batch_size=16_384) as producer:
        assert producer.implementation == implementation
        sent = [await producer.send(topic, b"one-%d" % i, key) for i, key in enumerate(keys)]
        group = await producer.send_batch(
            topic, [(key, b"batch-%d" % i) for i, key in enumerate(keys[:1_500])]
        )
        odd = [
            await producer.send(topic, None, None, partition=1, timestamp_ms=1_700_000_000_000),
            await producer.send(topic, b"h", b"k", headers=[("trace", b"1"), ("none", None)]),
            # bytes-like data (outside the type, which some callers pass): copied when sent
            await producer.send(
                topic,
                bytearray(b"copied"),  # type: ignore[arg-type]
                memoryview(b"key"),  # type: ignore[arg-type]
            ),
        ]
        with pytest.raises(TypeError):  # refused when sent, not when the batch is framed
            await producer.send(topic, b"v", headers=[(b"name", b"x")])  # type: ignore[list-item]
        with pytest.raises(TypeError):
            await producer.send_batch(topic, [(b"k", "text")])  # type: ignore[list-item]
        await producer.flush()  # more records than one prune of its futures: waits for all
        assert all(future.done() for future in [*sent, *odd]) and group.done()
        metadata = [future.result() for future in sent] + group.result()
        extra: list[RecordMetadata] = [future.result() for future in odd]
    assert [m.partition for m in metadata] == [partition_for_key(k, 3) for k in keys + keys[:1500]]
    for partition in range(3):
        offsets = [m.offset for m in metadata + extra if m.partition == partition]
        assert sorted(offsets) == list(range(len(offsets)))  # consecutive from 0, each once
    assert extra[0].partition == 1 and extra[0].timestamp == 1_700_000_000_000
    messages = await read_back(broker, topic, 3, len(metadata) + 3)
    by_place = {(m.partition, m.offset): m for m in messages}
    for i, meta in enumerate(metadata[:3_000]):
        message = by_place[meta.partition, meta.offset]
        assert (message.key, message.value, message.timestamp) == (
            keys[i],
            b"one-%d" % i,
            meta.timestamp,
        )
    null = by_place[extra[0].partition, extra[0].offset]
    assert (null.key, null.value) == (None, None)
    headed = by_place[extra[1].partition, extra[1].offset]
    assert list(headed.headers) == [("trace", b"1"), ("none", None)]
    copied = by_place[extra[2].partition, extra[2].offset]
    assert (copied.key, copied.value) == (b"key", b"copied")


async def test_a_full_buffer_and_a_metadata_refresh_slow_sends_down_but_lose_nothing(
    broker: Broker, implementation: str
) -> None:
    topic = "fastpath-buffer"
    broker.topics.create(topic, 2, 1, {})
    async with Producer(bootstrap(broker), linger_ms=1, buffer_memory=4_000, acks=1) as producer:
        futures = [await producer.send(topic, b"x" * 100) for _ in range(200)]
        producer.cluster.invalidate(topic)  # the next send looks the topic up again
        futures += [await producer.send(topic, b"y" * 100) for _ in range(200)]
        batch = await producer.send_batch(topic, [(None, b"z" * 100)] * 100)  # > the buffer
        await producer.flush()
        assert len(await batch) == 100
        assert all(not future.exception() for future in futures)
    messages = await read_back(broker, topic, 2, 500)
    assert sorted(m.value or b"" for m in messages) == sorted(
        [b"x" * 100] * 200 + [b"y" * 100] * 200 + [b"z" * 100] * 100
    )


async def test_acks_zero_and_an_aborted_transaction(broker: Broker, implementation: str) -> None:
    topic = "fastpath-outcomes"
    broker.topics.create(topic, 1, 1, {})
    async with Producer(bootstrap(broker), acks=0) as producer:
        metadata = await producer.send_and_wait(topic, b"fire and forget")
        assert metadata.offset == -1
    async with Producer(
        bootstrap(broker), transactional_id=f"fastpath-{implementation}", linger_ms=60_000
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        queued = await producer.send(topic, b"aborted")
        group = await producer.send_batch(topic, [(None, b"aborted")] * 10)
        await producer.abort_transaction()
        for future in (queued, group):
            with pytest.raises(TransactionAbortedError):
                await future
        producer.begin_transaction()
        committed = await producer.send(topic, b"committed")
        await producer.commit_transaction()
        assert (await committed).offset > 0
    messages = await read_back(broker, topic, 1, 2)
    assert [m.value for m in messages] == [b"fire and forget", b"committed"]
