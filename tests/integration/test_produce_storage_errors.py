"""Produce over storage that refuses a write, in process with raw frames: the refused
partition gets KAFKA_STORAGE_ERROR (56) with nothing appended, the other partition of the same
request is appended, the connection stays open, and the same request succeeds once space
returns. One log line for a burst of refusals."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from lockgate.config.properties import BrokerConfig
from lockgate.handlers import k00_produce
from lockgate.protocol.records import build_batch
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine, MemoryFaults
from tests.support.kafka_wire import KafkaWire, ProduceResult, produce

TOPIC = "mixed"
KAFKA_STORAGE_ERROR = 56


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    config = BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "lockgate.durability": "page-cache",
            "transaction.state.log.num.partitions": "1",
            "offsets.topic.num.partitions": "1",
        }
    )
    instance = Broker(config, MemoryEngine(MemoryFaults()))
    await instance.start()
    instance.topics.create(TOPIC, 2, 1, {})
    try:
        yield instance
    finally:
        await instance.stop()


def send(bootstrap: str, batches: dict[int, bytes | None], repeat: int = 1) -> list[ProduceResult]:
    with KafkaWire(bootstrap) as wire:  # one connection for every request
        return [produce(wire, 9, TOPIC, batches) for _ in range(repeat)]


async def test_a_refused_partition_does_not_affect_the_others(
    broker: Broker, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k00_produce, "_storage_errors", k00_produce._StorageErrorLog())
    assert isinstance(broker.storage, MemoryEngine)
    faults = broker.storage.faults
    big = build_batch([(None, b"x" * 5000)], timestamp_ms=1)
    small = build_batch([(None, b"y")], timestamp_ms=1)
    faults.capacity = broker.storage.used_bytes() + 1000  # room for the small batch only
    bootstrap = f"127.0.0.1:{broker.port}"
    with caplog.at_level(logging.ERROR, logger="lockgate.handlers.k00_produce"):
        results = await asyncio.to_thread(send, bootstrap, {0: big, 1: small}, 3)
    for number, result in enumerate(results):
        by_partition = {p.index: p for p in result.topics[TOPIC]}
        assert by_partition[0].error_code == KAFKA_STORAGE_ERROR
        assert by_partition[1].error_code == 0 and by_partition[1].base_offset == number
    refused = broker.topics.get(TOPIC, 0)
    assert refused is not None and refused.log_end_offset == 0
    storage_lines = [r for r in caplog.records if "KAFKA_STORAGE_ERROR" in r.getMessage()]
    assert len(storage_lines) == 1  # rate-limited: one line for the burst

    faults.capacity = None  # space returns: the same request simply succeeds
    (result,) = await asyncio.to_thread(send, bootstrap, {0: big, 1: small})
    assert [p.error_code for p in result.topics[TOPIC]] == [0, 0]
    assert refused.log_end_offset == 1
