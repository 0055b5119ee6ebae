"""A coordinator's writes to its internal partition (coordinator/writes.py): the error a
failed write is answered with (a passing replication problem: COORDINATOR_NOT_AVAILABLE;
anything else from the log: NOT_COORDINATOR; a local disk error: the caller's choice), and
the append itself: durable on a single node, acks=all on a cluster leader (answered once the
ISR has it), refused where this broker does not lead."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockgate.cluster.metadata import PartitionState
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator import writes
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import build_batch
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.support.memory_cluster import MemoryClusterBroker, MemoryStore, memory_cluster

FOLLOWER = 1
BATCH = build_batch([(b"key", b"value")], timestamp_ms=1_000)


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.unknown_topic_or_partition,
    ],
)
def test_a_replication_problem_is_coordinator_not_available(code: ErrorCode) -> None:
    assert writes.write_error(KafkaProtocolError(code)) == ErrorCode.coordinator_not_available


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.unknown_server_error,
    ],
)
def test_any_other_refusal_is_not_coordinator(code: ErrorCode) -> None:
    assert writes.write_error(KafkaProtocolError(code)) == ErrorCode.not_coordinator


def test_a_disk_error_is_not_coordinator_by_default() -> None:
    assert writes.write_error(OSError("disk gone")) == ErrorCode.not_coordinator


def test_a_disk_error_is_the_storage_error_the_caller_names() -> None:
    error = writes.write_error(OSError("disk gone"), ErrorCode.kafka_storage_error)
    assert error == ErrorCode.kafka_storage_error


def test_the_failures_caught_are_disk_errors_and_refusals() -> None:
    assert isinstance(OSError(), writes.WriteFailure)
    assert isinstance(KafkaProtocolError(ErrorCode.not_coordinator), writes.WriteFailure)


async def test_a_single_node_write_is_committed_once_appended() -> None:
    config = BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.durability": "page-cache"})
    broker = Broker(config, MemoryEngine())
    broker.topics.create("internal", 1, 1, {}, internal=True)
    partition = broker.topics.get("internal", 0)
    assert partition is not None
    try:
        await asyncio.wait_for(broker.writer.write(partition, BATCH, internal=True), 5)
        assert partition.log_end_offset == 1
    finally:
        broker.topics.close()


Leader = tuple[MemoryStore, MemoryClusterBroker, Partition]


@pytest.fixture
async def leader() -> AsyncIterator[Leader]:
    """Broker 0 leads t-0 with broker 1 (which exists only in the metadata) in the ISR."""
    async with memory_cluster(1) as (store, (member,)):
        store.put_topic("t", 1)
        store.put("t", 0, PartitionState((0, FOLLOWER), 0, 1, (0, FOLLOWER)))
        for _ in range(500):
            partition = member.broker.topics.get("t", 0)
            if partition is not None and partition.is_leader:
                break
            await asyncio.sleep(0.01)
        assert partition is not None and partition.is_leader
        yield store, member, partition


async def test_a_cluster_write_is_committed_once_the_isr_has_it(leader: Leader) -> None:
    _store, member, partition = leader
    committed = member.broker.writer.write(partition, BATCH)
    assert partition.log_end_offset == 1  # appended at once, before any await
    await asyncio.sleep(0.05)
    assert not committed.done()
    assert member.broker.replicas is not None
    member.broker.replicas.on_follower_fetch(partition, FOLLOWER, 1)
    await asyncio.wait_for(committed, 5)


async def test_a_cluster_write_where_this_broker_does_not_lead_is_refused(
    leader: Leader,
) -> None:
    store, member, partition = leader
    store.put("t", 0, PartitionState((0, FOLLOWER), FOLLOWER, 2, (0, FOLLOWER)))
    for _ in range(500):
        if not partition.is_leader:
            break
        await asyncio.sleep(0.01)
    with pytest.raises(KafkaProtocolError) as refused:
        member.broker.writer.write(partition, BATCH)
    assert refused.value.code == ErrorCode.not_leader_or_follower
    assert partition.log_end_offset == 0  # nothing appended
    assert writes.write_error(refused.value) == ErrorCode.not_coordinator


async def test_a_cluster_write_whose_leadership_ends_fails_not_coordinator(
    leader: Leader,
) -> None:
    store, member, partition = leader
    committed = member.broker.writer.write(partition, BATCH)
    store.put("t", 0, PartitionState((0, FOLLOWER), FOLLOWER, 2, (0, FOLLOWER)))
    with pytest.raises(KafkaProtocolError) as failed:
        await asyncio.wait_for(committed, 5)
    assert writes.write_error(failed.value) == ErrorCode.not_coordinator
