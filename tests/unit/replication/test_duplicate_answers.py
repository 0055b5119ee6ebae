"""A resent batch of an idempotent producer on a replicated leader (two cluster brokers in
this process, real sockets): an earlier batch found in the log is answered with its original
offset, and a resend the log cannot match with DUPLICATE_SEQUENCE_NUMBER, but with acks=all
either answer waits until the ISR has the original (the high watermark passed it), as the
original's own answer does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockgate.client.connection import BrokerConnection
from lockgate.cluster.metadata import PartitionState
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import build_batch
from tests.support.broker import free_port
from tests.support.memory_cluster import MemoryClusterBroker, MemoryStore, connected, memory_cluster
from tests.unit.coordinator.group.support import wait_until

TOPIC = "t"
PID = 4242
Cluster = tuple[MemoryStore, list[MemoryClusterBroker]]
SETTINGS = {"replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "50"}


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """Broker 0 leads t-0 (epoch 1), broker 1 follows it, both in the ISR."""
    async with memory_cluster(2, SETTINGS) as (store, brokers):
        store.put_topic(TOPIC, 1)
        store.put(TOPIC, 0, PartitionState((0, 1), 0, 1, (0, 1)))
        await wait_until(lambda: brokers[0].broker.topics.get(TOPIC, 0) is not None)
        yield store, brokers


def log_of(member: MemoryClusterBroker) -> Partition:
    partition = member.broker.topics.get(TOPIC, 0)
    assert partition is not None
    return partition


async def produce(
    connection: BrokerConnection, sequence: int, acks: int, count: int = 3
) -> tuple[ErrorCode, int]:
    batch = build_batch(
        [(None, b"%d" % (sequence + i)) for i in range(count)],
        producer_id=PID,
        producer_epoch=0,
        base_sequence=sequence,
    )
    response = await connection.request(
        ApiKey.PRODUCE,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": 30_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
        },
        version=9,
    )
    [answer] = response.responses[0].partition_responses
    return ErrorCode(answer.error_code), int(answer.base_offset)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("first", "count", "answer"),
    [
        (3, 3, (ErrorCode.none, 3)),  # the batch at offset 3, found in the log
        (4, 2, (ErrorCode.duplicate_sequence_number, -1)),  # no batch starts at sequence 4
    ],
)
async def test_a_resend_is_answered_once_the_isr_has_the_original(
    cluster: Cluster, first: int, count: int, answer: tuple[ErrorCode, int]
) -> None:
    _store, brokers = cluster
    leader = log_of(brokers[0])
    async with connected(brokers[0]) as connection:
        assert await produce(connection, 0, acks=-1) == (ErrorCode.none, 0)
    # broker 1 cannot reach its leader any more: it stays in the ISR but fetches nothing
    brokers[0].register(free_port())
    brokers[0].drop_connections()
    await wait_until(lambda: brokers[0].connection_count == 0)
    async with connected(brokers[0]) as connection:
        assert await produce(connection, 3, acks=1) == (ErrorCode.none, 3)
        assert await produce(connection, 6, acks=1) == (ErrorCode.none, 6)
        assert leader.high_watermark == 3
        resend = asyncio.ensure_future(produce(connection, first, acks=-1, count=count))
        await asyncio.sleep(0.5)  # ten of the follower's fetch backoffs
        assert not resend.done(), "answered before the ISR had the original"
        brokers[0].register(brokers[0].broker.port)
        assert await asyncio.wait_for(resend, 30) == answer
    assert leader.high_watermark == leader.log_end_offset == 9
