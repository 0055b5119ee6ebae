"""Metadata's auto-creation when the topic was created meanwhile by someone else (in a cluster,
another broker, before this broker's view has it): LEADER_NOT_AVAILABLE, which clients retry,
as Kafka answers a topic being created — not TOPIC_ALREADY_EXISTS, which they take as final."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.client.cluster import Cluster
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.server.broker import Broker


async def test_a_topic_created_meanwhile_is_being_created(
    memory_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    create = memory_broker.admin.create
    raced: list[str] = []

    async def created_elsewhere_first(name: str, *args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(name)
            raise KafkaProtocolError(ErrorCode.topic_already_exists, name)
        return await create(name, *args, **kwargs)

    monkeypatch.setattr(memory_broker.admin, "create", created_elsewhere_first)
    async with Cluster(f"127.0.0.1:{memory_broker.port}", retry_backoff_ms=10) as cluster:
        metadata = await cluster.refresh_metadata(["raced"], allow_auto_topic_creation=True)
        assert metadata.topics["raced"].error_code == ErrorCode.leader_not_available
        info = await cluster.topic("raced", allow_auto_topic_creation=True)  # asks again
        assert len(info.partitions) >= 1 and raced == ["raced"]
