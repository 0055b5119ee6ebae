"""Cluster's retry backoff (exponential, capped, jittered) and its periodic metadata refresh,
which notices partitions added behind the client's back."""

from __future__ import annotations

import asyncio
import time

from lockgate.client.admin import Admin
from lockgate.client.cluster import Cluster
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
