"""Internal topics are never deleted by retention: with a 2 s `log.retention.ms`, a group's
committed offsets and a prepared KIP-939 transaction outlive it across a restart, while an
ordinary topic's old segments are deleted as configured."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from lockgate.client.cluster import TopicPartition as LockgatePartition
from lockgate.client.consumer import Consumer as LockgateConsumer
from lockgate.client.producer import Producer
from tests.support.broker import BrokerProcess, running_broker
from tests.support.clients import committed_offset, create_topic

SETTINGS = {
    "transaction.two.phase.commit.enable": "true",
    "log.retention.ms": "2000",
    "log.retention.check.interval.ms": "300",
    "log.segment.bytes": "1024",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data", SETTINGS) as process:
        yield process


async def test_offsets_and_a_prepared_transaction_outlive_retention(
    broker: BrokerProcess,
) -> None:
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "orders", 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing"})
    consumer.commit(offsets=[TopicPartition("orders", 0, 3)], asynchronous=False)
    consumer.close()
    async with Producer(bootstrap, transactional_id="tm-1") as producer:
        await producer.init_transactions(enable_2pc=True)
        producer.begin_transaction()
        for number in range(40):  # enough to roll the ordinary topic's 1 KiB segments
            await producer.send("orders", f"order-{number}".encode(), partition=0)
        state = await producer.prepare_transaction()

    await asyncio.sleep(2.0 + 4 * 0.3 + 1.0)  # past the retention and a few checks
    broker.stop()
    broker.start()

    assert committed_offset(bootstrap, "billing", "orders") == 3
    async with Producer(bootstrap, transactional_id="tm-1") as recovered:
        await recovered.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        await recovered.complete_transaction(state)
    orders = LockgatePartition("orders", 0)
    async with LockgateConsumer(bootstrap, isolation_level="read_committed") as reader:
        reader.assign([orders])
        deadline = time.monotonic() + 20
        end = (await reader.end_offsets([orders]))[orders]
        while end < 40 and time.monotonic() < deadline:  # the commit markers are written
            await asyncio.sleep(0.1)
            end = (await reader.end_offsets([orders]))[orders]
        assert end >= 40  # the prepared records were committed after the restart
        assert (await reader.beginning_offsets([orders]))[orders] > 0  # retention did run
