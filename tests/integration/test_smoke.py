from __future__ import annotations

from lockgate.server.broker import Broker


async def test_memory_broker_starts_and_creates_topics(memory_broker: Broker) -> None:
    record = memory_broker.topics.create("smoke", 3, 1, {})
    assert record.partitions == 3
    assert memory_broker.topics.get("smoke", 2) is not None
