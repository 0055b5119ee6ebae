"""An in-process lockgate broker (memory storage) for the console's data-gathering tests, with
two-phase commit allowed, no rebalance delay, and a timeout task that runs every 100 ms so that
an ordinary transaction past its timeout is aborted quickly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.config.properties import BrokerConfig
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine

SETTINGS = {
    "listeners": "127.0.0.1:0",
    "lockgate.durability": "page-cache",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.two.phase.commit.enable": "true",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
}


@asynccontextmanager
async def running_broker(extra: Mapping[str, str] | None = None) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig({**SETTINGS, **(extra or {})}), MemoryEngine())
    await broker.start()
    try:
        for _ in range(500):
            if broker.transactions.loaded:
                break
            await asyncio.sleep(0.01)
        yield broker
    finally:
        await broker.stop()


def bootstrap(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


async def produce(broker: Broker, topic: str, count: int, partitions: int) -> None:
    async with Producer(bootstrap(broker), linger_ms=0) as producer:
        for i in range(count):
            await producer.send(topic, f"{i}".encode(), partition=i % partitions)
        await producer.flush()


async def consume_all(consumer: Consumer, count: int, timeout_s: float = 20) -> None:
    """Polls until `count` records arrived (bounded by `timeout_s`), then commits them."""
    seen = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while seen < count and loop.time() < deadline:
        seen += len(await consumer.poll(100))
    assert seen == count, f"read {seen} of {count} records"
    await consumer.commit()
