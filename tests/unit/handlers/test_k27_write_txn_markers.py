"""WriteTxnMarkers on a cluster broker (in this process, over a real socket): markers are
written with acks=all, so each answer waits for the ISR (NOT_ENOUGH_REPLICAS before the write,
NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT after it), and a
marker from an older coordinator epoch is TRANSACTION_COORDINATOR_FENCED. Broker 1 is a
follower that exists only in the metadata: the test fetches for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.client.connection import BrokerConnection
from lockgate.cluster.metadata import PartitionState
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.replication import writer
from tests.support.memory_cluster import MemoryClusterBroker, MemoryStore, memory_cluster

PID = 4242
FOLLOWER = 1
WITH_FOLLOWER = PartitionState((0, FOLLOWER), 0, 1, (0, FOLLOWER))

Setup = tuple[MemoryStore, MemoryClusterBroker, Partition, BrokerConnection]


@pytest.fixture
async def leader() -> AsyncIterator[Setup]:
    """Broker 0 leads t-0 with broker 1 in the ISR; min.insync.replicas is 2."""
    async with memory_cluster(1) as (store, (member,)):
        store.put_topic("t", 1, {"min.insync.replicas": "2"})
        store.put("t", 0, WITH_FOLLOWER)
        for _ in range(100):
            partition = member.broker.topics.get("t", 0)
            if partition is not None and partition.is_leader:
                break
            await asyncio.sleep(0.01)
        assert partition is not None and partition.is_leader
        connection = BrokerConnection("127.0.0.1", member.broker.port, client_id="test")
        await connection.connect()
        try:
            yield store, member, partition, connection
        finally:
            await connection.close()


def write(connection: BrokerConnection, coordinator_epoch: int = 3) -> asyncio.Task[ErrorCode]:
    async def answer() -> ErrorCode:
        body: dict[str, Any] = {
            "markers": [
                {"producer_id": PID, "producer_epoch": 0, "transaction_result": True,
                 "topics": [{"name": "t", "partition_indexes": [0]}],
                 "coordinator_epoch": coordinator_epoch}
            ]
        }  # fmt: skip
        response = await connection.request(ApiKey.WRITE_TXN_MARKERS, body, version=1)
        return ErrorCode(response.markers[0].topics[0].partitions[0].error_code)

    return asyncio.create_task(answer())


async def written(partition: Partition, end: int) -> None:
    for _ in range(200):
        if partition.log_end_offset >= end:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the log did not reach {end}")


async def test_a_marker_is_answered_once_the_isr_has_it(leader: Setup) -> None:
    _store, member, partition, connection = leader
    answer = write(connection)
    await written(partition, 1)
    await asyncio.sleep(0.1)
    assert not answer.done() and partition.high_watermark == 0
    assert member.broker.replicas is not None
    member.broker.replicas.on_follower_fetch(partition, FOLLOWER, 1)
    assert await answer == ErrorCode.none
    assert partition.high_watermark == 1


async def test_a_marker_the_isr_does_not_take_in_time_is_request_timed_out(
    leader: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store, _member, partition, connection = leader
    monkeypatch.setattr(writer, "REPLICATION_TIMEOUT_MS", 200)
    assert await write(connection) == ErrorCode.request_timed_out
    assert partition.log_end_offset == 1  # the marker stays on the leader's log


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (PartitionState((0, FOLLOWER), 0, 1, (0,), 1),
         ErrorCode.not_enough_replicas_after_append),
        (PartitionState((0, FOLLOWER), FOLLOWER, 2, (FOLLOWER,), 1),
         ErrorCode.not_leader_or_follower),
    ],
    ids=["isr-shrank", "leader-moved"],
)  # fmt: skip
async def test_a_change_while_the_marker_waits_is_its_answer(
    leader: Setup, change: PartitionState, code: ErrorCode
) -> None:
    store, _member, partition, connection = leader
    answer = write(connection)
    await written(partition, 1)
    store.put("t", 0, change)
    assert await answer == code


async def test_an_isr_below_the_minimum_refuses_the_marker_before_writing_it(
    leader: Setup,
) -> None:
    store, _member, partition, connection = leader
    store.put("t", 0, PartitionState((0, FOLLOWER), 0, 1, (0,), 1))
    await asyncio.sleep(0.05)
    assert await write(connection) == ErrorCode.not_enough_replicas
    assert partition.log_end_offset == 0


async def test_a_marker_from_an_older_coordinator_epoch_is_fenced(leader: Setup) -> None:
    _store, _member, partition, connection = leader
    partition.write_marker(PID, 0, True, 5, 1_000, strict_epoch=False)
    assert await write(connection, coordinator_epoch=4) == ErrorCode.transaction_coordinator_fenced
    assert partition.log_end_offset == 1
