"""Cluster's retry backoff (exponential, capped, jittered), its periodic metadata refresh,
which notices partitions added behind the client's back, and FindCoordinator's waits (each
attempt to a broker not asked yet)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from lockgate.client.admin import Admin
from lockgate.client.cluster import BrokerAddress, Cluster, ClusterMetadata
from lockgate.client.errors import CoordinatorNotAvailableError, ErrorCode, KafkaError, error_for
from lockgate.server.broker import Broker


def test_backoff_grows_exponentially_up_to_the_cap_with_jitter() -> None:
    cluster = Cluster("127.0.0.1:1", retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    for attempt, base in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.8), (4, 1.0), (60, 1.0)]:
        waits = [cluster.backoff_s(attempt) for _ in range(200)]
        assert base * 0.8 <= min(waits) and max(waits) <= base * 1.2
        assert len(set(waits)) > 1  # jittered


async def test_metadata_is_refreshed_periodically(memory_broker: Broker) -> None:
    bootstrap = f"127.0.0.1:{memory_broker.port}"
    memory_broker.topics.create("grows", 1, 1, {})
    async with Cluster(bootstrap, metadata_max_age_ms=100) as cluster:
        assert len((await cluster.topic("grows")).partitions) == 1
        async with Admin(bootstrap) as admin:
            await admin.create_partitions({"grows": 3})
        deadline = time.monotonic() + 10
        while len(cluster.metadata.topics["grows"].partitions) != 3:
            assert time.monotonic() < deadline, "metadata never refreshed"
            await asyncio.sleep(0.05)


async def test_find_coordinator_asks_again_while_the_coordinator_is_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """COORDINATOR_NOT_AVAILABLE and LOAD_IN_PROGRESS (an internal topic being created, a
    partition loading after a failover) are waited out, up to request_timeout_ms."""
    answers = [ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress]

    async def once(_cluster: Cluster, _key_type: int, key: str, *_asked: object) -> int:
        if answers:
            raise error_for(answers.pop(0), None, f"coordinator for {key!r}")
        return 2

    monkeypatch.setattr(Cluster, "_find_coordinator_once", once)
    cluster = Cluster("127.0.0.1:1", retry_backoff_ms=1, request_timeout_ms=5_000)
    assert await cluster.find_coordinator(0, "g") == 2

    answers[:] = [ErrorCode.coordinator_not_available] * 1_000
    cluster = Cluster("127.0.0.1:1", retry_backoff_ms=20, request_timeout_ms=200)
    with pytest.raises(CoordinatorNotAvailableError):
        await cluster.find_coordinator(0, "g")
    answers[:] = [ErrorCode.group_authorization_failed]
    with pytest.raises(KafkaError, match="GROUP_AUTHORIZATION_FAILED"):  # not retried
        await cluster.find_coordinator(0, "g")
    assert not answers


class AnsweringConnection:
    """A connected broker that answers FindCoordinator (v4) with `answer`: a node id or an
    error code."""

    def __init__(self, node_id: int, answer: int | ErrorCode) -> None:
        self.node_id = node_id
        self.answer = answer
        self.connected = True
        self.asked = 0

    async def request(self, _api_key: object, body: dict[str, Any], **_: Any) -> SimpleNamespace:
        self.asked += 1
        error = self.answer if isinstance(self.answer, ErrorCode) else ErrorCode.none
        node = -1 if isinstance(self.answer, ErrorCode) else self.answer
        coordinator = SimpleNamespace(key=body["key"], error_code=error, error_message=None,
                                      node_id=node)  # fmt: skip
        return SimpleNamespace(coordinators=[coordinator])


async def test_find_coordinator_asks_another_broker_after_not_available() -> None:
    """Pain 7 (issue 22): the broker the client already talks to (the old coordinator, cut off
    from the cluster) answers COORDINATOR_NOT_AVAILABLE for as long as it is cut; the next
    attempt goes to another broker, which knows the new coordinator. When every broker was
    asked, the round starts again."""
    cluster = Cluster("127.0.0.1:1", retry_backoff_ms=1, request_timeout_ms=5_000)
    brokers = {n: BrokerAddress(n, "127.0.0.1", 1) for n in (0, 1, 2)}
    cluster.metadata = ClusterMetadata(brokers=brokers)
    cut = AnsweringConnection(0, ErrorCode.coordinator_not_available)
    others = [AnsweringConnection(1, ErrorCode.coordinator_load_in_progress),
              AnsweringConnection(2, 1)]  # fmt: skip
    cluster._connections = {0: cut, 1: others[0], 2: others[1]}  # type: ignore[dict-item]
    assert await cluster.find_coordinator(1, "t") == 1
    assert (cut.asked, others[0].asked, others[1].asked) == (1, 1, 1)

    for connection in (cut, *others):
        connection.answer = ErrorCode.coordinator_not_available
    cluster.request_timeout_ms = 300
    with pytest.raises(CoordinatorNotAvailableError):
        await cluster.find_coordinator(1, "t")
    assert cut.asked > 2 and others[0].asked > 2 and others[1].asked > 2  # round after round


class MetadataConnection(AnsweringConnection):
    def version_for(self, _api_key: object) -> int:
        return 12

    async def request(self, _api_key: object, body: dict[str, Any], **_: Any) -> SimpleNamespace:
        self.asked += 1
        return SimpleNamespace(brokers=[], topics=[], error_code=ErrorCode.none)


async def test_metadata_is_asked_of_another_broker_than_last_time() -> None:
    """Pain 7 (issue 22): a broker cut off from the cluster answers its last view (leaders it
    no longer is) for as long as it stays cut; refreshes after NOT_LEADER_OR_FOLLOWER must not
    all go to it."""
    cluster = Cluster("127.0.0.1:1")
    brokers = {n: BrokerAddress(n, "127.0.0.1", 1) for n in (0, 1)}
    cut, other = MetadataConnection(0, 0), MetadataConnection(1, 1)
    for _ in range(4):
        cluster.metadata = ClusterMetadata(brokers=brokers)
        cluster._connections = {0: cut, 1: other}  # type: ignore[dict-item]
        await cluster.refresh_metadata(())
    assert (cut.asked, other.asked) == (2, 2)
