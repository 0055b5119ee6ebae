"""CreateTopics and CreatePartitions that storage cannot honour, through confluent-kafka's
AdminClient against an in-process broker whose storage engine refuses to open files midway:
the request gets KAFKA_STORAGE_ERROR, nothing is recorded (Metadata does not list the topic,
the partition count is unchanged), and a broker started again on the same storage is fine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions, NewTopic

from lockgate.config.properties import BrokerConfig
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine, MemoryFaults

pytestmark = pytest.mark.compat

SETTINGS = {
    "listeners": "127.0.0.1:0",
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
}


async def started(engine: MemoryEngine) -> Broker:
    broker = Broker(BrokerConfig(SETTINGS), engine)
    await broker.start()
    return broker


@pytest.fixture
async def engine() -> AsyncIterator[MemoryEngine]:
    yield MemoryEngine(MemoryFaults())


def create(bootstrap: str, topic: str, partitions: int) -> int:
    """The error code of creating the topic (0 on success)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)[topic]
    try:
        future.result(timeout=20)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def grow(bootstrap: str, topic: str, count: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_partitions([NewPartitions(topic, count)])[topic]
    try:
        future.result(timeout=20)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def listed(bootstrap: str) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=20).topics
    return {name: len(meta.partitions) for name, meta in topics.items()}


async def test_create_topics_failing_midway_records_nothing(engine: MemoryEngine) -> None:
    broker = await started(engine)
    bootstrap = f"127.0.0.1:{broker.port}"
    try:
        engine.faults.opens_left = 3 * 40 + 1  # forty partitions' files, then EMFILE
        code = await asyncio.to_thread(create, bootstrap, "huge", 100)
        assert code == KafkaError.KAFKA_STORAGE_ERROR
        engine.faults.opens_left = None
        assert "huge" not in await asyncio.to_thread(listed, bootstrap)
        assert not [name for name in engine.list_dir("") if name.startswith("huge-")]

        assert await asyncio.to_thread(create, bootstrap, "growing", 2) == 0
        engine.faults.opens_left = 3 * 2 + 1
        code = await asyncio.to_thread(grow, bootstrap, "growing", 8)
        assert code == KafkaError.KAFKA_STORAGE_ERROR
        engine.faults.opens_left = None
        assert (await asyncio.to_thread(listed, bootstrap))["growing"] == 2
    finally:
        await broker.stop()

    again = await started(engine)  # the same storage: a restart
    try:
        bootstrap = f"127.0.0.1:{again.port}"
        topics = await asyncio.to_thread(listed, bootstrap)
        assert "huge" not in topics and topics["growing"] == 2
        assert await asyncio.to_thread(create, bootstrap, "huge", 100) == 0
        assert await asyncio.to_thread(grow, bootstrap, "growing", 8) == 0
        topics = await asyncio.to_thread(listed, bootstrap)
        assert topics["huge"] == 100 and topics["growing"] == 8
    finally:
        await again.stop()


def partition_errors(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=20).topics[topic]
    return {
        index: (p.error.code() if p.error is not None else 0, p.leader)
        for index, p in meta.partitions.items()
    }


async def test_metadata_of_a_partition_without_an_open_log_is_an_error_not_a_crash(
    engine: MemoryEngine,
) -> None:
    broker = await started(engine)
    bootstrap = f"127.0.0.1:{broker.port}"
    try:
        assert await asyncio.to_thread(create, bootstrap, "gap", 2) == 0
        # as if its log could not be opened: not open here, so never led by this node
        broker.topics.partitions.pop(("gap", 1))
        broker.store.view.partitions.pop(("gap", 1))
        errors = await asyncio.to_thread(partition_errors, bootstrap, "gap")
        assert errors[0] == (0, broker.node_id)
        assert errors[1] == (KafkaError.LEADER_NOT_AVAILABLE, -1)
    finally:
        await broker.stop()
