"""The blocking facade's produce_batch(), confluent-kafka's shape: messages queued in order
with a delivery report each (the message's own callback or the call's), per-message partition,
timestamp and headers; a message that cannot be queued gets '_error' and no report while the
others go on; confluent-kafka's consumer reads back exactly what the reports say."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockgate.client.errors import (
    InvalidTxnStateError,
    KafkaError,
    MessageTooLargeError,
    UnknownTopicOrPartitionError,
)
from lockgate.client.sync import DeliveredMessage, DeliveryCallback
from lockgate.client.sync import Producer as SyncProducer
from lockgate.server.broker import Broker
from tests.integration.test_client_producer import TIMEOUT, bootstrap, read, start_broker, unique

Report = tuple[str, int, int, int, bytes | None, bytes | None, KafkaError | None]


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    instance = await start_broker({"auto.create.topics.enable": "false"})
    try:
        yield instance
    finally:
        await instance.stop()


def recorder(into: list[Report], tag: str = "") -> DeliveryCallback:
    def report(error: KafkaError | None, message: DeliveredMessage) -> None:
        into.append(
            (tag, message.partition(), message.offset(), message.timestamp(), message.key(),
             message.value(), error)
        )  # fmt: skip

    return report


async def test_every_message_gets_its_own_report_and_lands_once_in_order(broker: Broker) -> None:
    topic = unique("batch")
    broker.topics.create(topic, 3, 1, {})
    messages: list[dict[str, object]] = [
        {"key": f"k{i % 7}", "value": f"v{i}".encode()} for i in range(300)
    ]
    own: list[Report] = []
    messages[10] = {"value": b"pinned", "partition": 2, "timestamp": 1_700_000_000_000}
    messages[11] = {"value": b"headers", "key": b"h", "headers": {"trace": b"t1"}}
    messages[12] = {"value": b"own", "partition": 0, "callback": recorder(own, "own")}
    messages[13] = {"value": b"x" * 2_000_000}  # larger than max_request_size
    messages[14] = {"value": b"nowhere", "partition": 9}  # the topic has 3

    def run() -> tuple[int, list[Report]]:
        reports: list[Report] = []
        with SyncProducer({"bootstrap.servers": bootstrap(broker)}) as producer:
            queued = producer.produce_batch(topic, messages, on_delivery=recorder(reports))
            assert producer.flush(TIMEOUT) == 0
            assert len(producer) == 0
        return queued, reports

    queued, reports = await asyncio.to_thread(run)
    assert queued == 298
    assert isinstance(messages[13]["_error"], MessageTooLargeError)
    assert isinstance(messages[14]["_error"], UnknownTopicOrPartitionError)
    assert all("_error" not in m for i, m in enumerate(messages) if i not in (13, 14))
    assert [r[6] for r in reports + own] == [None] * 298
    assert len(own) == 1 and own[0][1:3] == (0, own[0][2])
    pinned = [r for r in reports if r[5] == b"pinned"]
    assert pinned[0][1] == 2 and pinned[0][3] == 1_700_000_000_000
    # Offsets are unique per partition and follow the call's order within each partition.
    by_partition: dict[int, list[tuple[int, bytes | None]]] = {}
    for _tag, partition, offset, _ts, _key, value, _error in reports + own:
        by_partition.setdefault(partition, []).append((offset, value))
    order = {m.get("value"): i for i, m in enumerate(messages)}
    for delivered in by_partition.values():
        offsets = sorted(o for o, _v in delivered)
        assert offsets == list(range(len(offsets)))
        assert [v for _o, v in sorted(delivered, key=lambda d: d[0])] == sorted(
            (v for _o, v in delivered), key=order.__getitem__
        )
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 3, 298, settle=0.3)
    assert sorted((p, v) for p, _k, v in records) == sorted((r[1], r[5]) for r in reports + own)


async def test_an_unknown_topic_and_a_closed_transaction_refuse_every_message(
    broker: Broker,
) -> None:
    topic = unique("txn-batch")
    broker.topics.create(topic, 1, 1, {})
    messages = [{"value": f"v{i}"} for i in range(5)]

    def run() -> tuple[int, int, int, list[Report]]:
        reports: list[Report] = []
        with SyncProducer(
            {
                "bootstrap.servers": bootstrap(broker),
                "transactional.id": unique("batch-tx"),
                "allow.auto.create.topics": False,  # the missing topic is refused at once
            }
        ) as producer:
            producer.init_transactions(TIMEOUT)
            refused = [dict(m) for m in messages]
            outside = producer.produce_batch(topic, refused)
            assert all(isinstance(m["_error"], InvalidTxnStateError) for m in refused)
            producer.begin_transaction()
            missing = producer.produce_batch(unique("missing"), [dict(m) for m in messages])
            inside = producer.produce_batch(topic, messages, on_delivery=recorder(reports))
            producer.commit_transaction(TIMEOUT)
            assert producer.flush(TIMEOUT) == 0
        return outside, missing, inside, reports

    outside, missing, inside, reports = await asyncio.to_thread(run)
    assert (outside, missing, inside) == (0, 0, 5)
    assert [r[2] for r in reports] == [0, 1, 2, 3, 4]
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 1, 5, settle=0.3)
    assert [v for _p, _k, v in records] == [f"v{i}".encode() for i in range(5)]


def test_messages_must_be_a_list_of_dicts_with_bytes_or_str() -> None:
    producer = SyncProducer.__new__(SyncProducer)
    with pytest.raises(TypeError):
        producer.produce_batch("t", ({"value": b"v"},))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        producer.produce_batch("t", [b"v"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        producer.produce_batch("t", [{"value": 1}])
