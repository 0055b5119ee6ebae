"""A topic deleted from the cluster metadata, on two cluster brokers in this process (real
sockets, a shared in-memory metadata store): each broker drops its replicas at once (no
longer served: UNKNOWN_TOPIC_OR_PARTITION), removes their files in a worker thread, and
follows a topic created again under the same name from an empty log."""

from __future__ import annotations

import pytest

from lockgate.cluster.metadata import PartitionState
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import build_batch, parse_header
from lockgate.storage.memory import MemoryEngine
from tests.support.memory_cluster import MemoryClusterBroker, connected, memory_cluster
from tests.unit.coordinator.group.support import wait_until

TOPIC = "doomed"
SETTINGS = {"replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "50"}


def log_of(member: MemoryClusterBroker, index: int) -> Partition | None:
    return member.broker.topics.get(TOPIC, index)


def directories(member: MemoryClusterBroker) -> list[str]:
    engine = member.broker.topics.storage
    assert isinstance(engine, MemoryEngine)
    return sorted(name for name in engine.list_dir("") if name.startswith(f"{TOPIC}-"))


@pytest.mark.timeout(60)
async def test_a_deleted_topic_leaves_every_broker_and_can_come_back() -> None:
    async with memory_cluster(2, SETTINGS) as (store, brokers):
        store.put_topic(TOPIC, 3)
        for index in range(3):
            store.put(TOPIC, index, PartitionState((0, 1), index % 2, 1, (0, 1)))
        await wait_until(lambda: all(log_of(m, i) for m in brokers for i in range(3)))
        for index in range(3):
            leader = log_of(brokers[index % 2], index)
            assert leader is not None
            batch = bytearray(build_batch([(None, b"v")]))
            leader.append(batch, parse_header(batch), 0)
            leader.flushed_to(leader.log_end_offset)
        await wait_until(lambda: all(log_of(m, 2).log_end_offset == 1 for m in brokers))  # type: ignore[union-attr]
        assert all(len(directories(m)) == 3 for m in brokers)

        store.delete_topic(TOPIC)
        await wait_until(lambda: all(TOPIC not in m.broker.topics.topics for m in brokers))
        assert all(log_of(m, i) is None for m in brokers for i in range(3))
        await wait_until(lambda: all(directories(m) == [] for m in brokers))
        async with connected(brokers[0]) as connection:
            answer = await connection.request(
                ApiKey.LIST_OFFSETS,
                {"replica_id": -1, "isolation_level": 0,
                 "topics": [{"name": TOPIC, "partitions": [
                     {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
                version=7,
            )  # fmt: skip
        (partition,) = answer.topics[0].partitions
        assert partition.error_code == ErrorCode.unknown_topic_or_partition

        store.put_topic(TOPIC, 1)  # the same name again: a new topic, an empty log
        store.put(TOPIC, 0, PartitionState((0, 1), 0, 1, (0, 1)))
        await wait_until(lambda: all(log_of(m, 0) is not None for m in brokers))
        assert all(log_of(m, 0).log_end_offset == 0 for m in brokers)  # type: ignore[union-attr]
