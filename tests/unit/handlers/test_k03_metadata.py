"""Metadata's auto-creation when the topic was created meanwhile by someone else (in a cluster,
another broker, before this broker's view has it): LEADER_NOT_AVAILABLE, which clients retry,
as Kafka answers a topic being created — not TOPIC_ALREADY_EXISTS, which they take as final.
Shown with lockgate's client and with kafka-python's producer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka import KafkaProducer

from lockgate.client.cluster import Cluster
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.server.broker import Broker


def created_elsewhere_first(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The broker's next auto-creation finds the topic already created (by another broker);
    the ones after it create. Returns the names raced so far."""
    create = broker.admin.create
    raced: list[str] = []

    async def racing(name: str, *args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(name)
            raise KafkaProtocolError(ErrorCode.topic_already_exists, name)
        return await create(name, *args, **kwargs)

    monkeypatch.setattr(broker.admin, "create", racing)
    return raced


async def test_a_topic_created_meanwhile_is_being_created(
    memory_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    raced = created_elsewhere_first(memory_broker, monkeypatch)
    async with Cluster(f"127.0.0.1:{memory_broker.port}", retry_backoff_ms=10) as cluster:
        metadata = await cluster.refresh_metadata(["raced"], allow_auto_topic_creation=True)
        assert metadata.topics["raced"].error_code == ErrorCode.leader_not_available
        info = await cluster.topic("raced", allow_auto_topic_creation=True)  # asks again
        assert len(info.partitions) >= 1 and raced == ["raced"]


async def test_kafka_python_produces_to_a_topic_created_meanwhile(
    memory_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    raced = created_elsewhere_first(memory_broker, monkeypatch)

    def produce() -> int:
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{memory_broker.port}")
        try:
            return int(producer.send("raced-python", b"x").get(timeout=20).offset)
        finally:
            producer.close(timeout=5)

    assert await asyncio.to_thread(produce) == 0
    assert raced == ["raced-python"]
