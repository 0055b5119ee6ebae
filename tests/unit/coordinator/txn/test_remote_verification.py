"""Transactions whose coordinator is another broker, on two cluster brokers in this process (real
sockets, a shared in-memory metadata store): broker 1 coordinates the transactional id, broker
0 leads orders-0 and broker 1 orders-1. Broker 0 asks broker 1 before the first batch of a
transaction on orders-0 (AddPartitionsToTxn v4+: VerifyOnly, or a TV2 add), appends a
producer's pipelined batches in their order, answers retriably while the coordinator cannot
answer, and refuses batches of a partition never added; the coordinator's markers reach
broker 0. Driven by lockgate's client and by raw requests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockgate.client.cluster import TopicPartition
from lockgate.client.connection import BrokerConnection
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.cluster.metadata import PartitionState
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.topics.internal import TRANSACTION_STATE_TOPIC
from tests.support.memory_cluster import (
    MemoryClusterBroker,
    MemoryStore,
    connected,
    memory_cluster,
)
from tests.support.txn_requests import init_producer_id, produce_transactional
from tests.unit.coordinator.group.support import wait_until

TOPIC = "orders"
TXN_ID = "orders-writer"
SETTINGS = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}

Cluster = tuple[MemoryStore, list[MemoryClusterBroker]]


def alone(leader: int) -> PartitionState:
    return PartitionState((leader,), leader, 1, (leader,))


def leads(broker: Broker, topic: str, index: int) -> bool:
    partition = broker.topics.get(topic, index)
    return partition is not None and partition.is_leader


def log_of(member: MemoryClusterBroker, index: int) -> Partition:
    partition = member.broker.topics.get(TOPIC, index)
    assert partition is not None
    return partition


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with memory_cluster(2, SETTINGS) as (store, brokers):
        for member in brokers:
            member.run_coordinators()
        store.put_topic(TRANSACTION_STATE_TOPIC, 1)
        store.put(TRANSACTION_STATE_TOPIC, 0, alone(1))
        store.put_topic(TOPIC, 2)
        store.put(TOPIC, 0, alone(0))
        store.put(TOPIC, 1, alone(1))
        coordinator = brokers[1].broker.transactions
        await wait_until(
            lambda: (
                coordinator.unavailable(TXN_ID) == ErrorCode.none
                and leads(brokers[0].broker, TOPIC, 0)
                and leads(brokers[1].broker, TOPIC, 1)
            )
        )
        yield store, brokers


def bootstrap(member: MemoryClusterBroker) -> str:
    return f"127.0.0.1:{member.broker.port}"


async def read_committed(member: MemoryClusterBroker, index: int) -> list[bytes]:
    partition = TopicPartition(TOPIC, index)
    values: list[bytes] = []
    async with Consumer(bootstrap(member), isolation_level="read_committed") as consumer:
        consumer.assign([partition])
        await consumer.seek_to_beginning([partition])
        end = (await consumer.end_offsets([partition]))[partition]
        async with asyncio.timeout(10):
            while await consumer.position(partition) < end:
                values += [m.value or b"" for m in await consumer.poll(200)]
    return values


@pytest.mark.parametrize("version", [1, 2])
async def test_a_transaction_spanning_both_brokers_commits_and_aborts(
    cluster: Cluster, version: int
) -> None:
    _store, brokers = cluster
    async with Producer(
        bootstrap(brokers[0]), transactional_id=TXN_ID, transaction_version=version
    ) as producer:
        await producer.init_transactions()
        assert producer.uses_transaction_version_2 == (version == 2)
        for commit in (True, False, True):
            producer.begin_transaction()
            for index in (0, 1):
                for n in range(3):  # pipelined: the later batches wait behind the first
                    await producer.send(TOPIC, f"{commit}-{index}-{n}".encode(), partition=index)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    coordinator = brokers[1].broker.transactions
    await wait_until(lambda: not coordinator._completions)
    for index in (0, 1):
        assert log_of(brokers[index], index).open_txns == {}
        values = await read_committed(brokers[0], index)
        assert values == [f"True-{index}-{n}".encode() for n in range(3)] * 2


async def test_pipelined_first_batches_keep_their_order(cluster: Cluster) -> None:
    """Five batches of a new transaction sent without waiting: the first waits for broker 1's
    answer, the others behind it; all are appended in sequence order."""
    _store, brokers = cluster
    pid, epoch = await init_producer(brokers[1])
    await add_partitions(brokers[1], pid, epoch, [(TOPIC, 0)])
    async with connected(brokers[0]) as leader:
        answers = await asyncio.gather(
            *(produce(leader, pid, epoch, sequence, version=9) for sequence in range(5))
        )
    assert [error for error, _offset in answers] == [ErrorCode.none] * 5
    assert [offset for _error, offset in answers] == [0, 1, 2, 3, 4]
    assert log_of(brokers[0], 0).open_txns == {pid: 0}


async def test_a_partition_never_added_is_refused(cluster: Cluster) -> None:
    _store, brokers = cluster
    pid, epoch = await init_producer(brokers[1])
    async with connected(brokers[0]) as leader:
        assert (await produce(leader, pid, epoch, 0, version=9))[0] == ErrorCode.invalid_txn_state
        assert (await produce(leader, pid, epoch, 0, version=11))[0] == (
            ErrorCode.transaction_abortable
        )
        # a stale epoch is the coordinator's INVALID_PRODUCER_EPOCH
        await add_partitions(brokers[1], pid, epoch, [(TOPIC, 0)])
        assert (await produce(leader, pid, epoch - 1, 0, version=9))[0] == (
            ErrorCode.invalid_producer_epoch
        )
    assert log_of(brokers[0], 0).log_end_offset == 0


async def test_transaction_version_2_adds_the_partition_at_the_coordinator(
    cluster: Cluster,
) -> None:
    _store, brokers = cluster
    pid, epoch = await init_producer(brokers[1])
    async with connected(brokers[0]) as leader:
        assert await produce(leader, pid, epoch, 0, version=12) == (ErrorCode.none, 0)
    meta = brokers[1].broker.transactions.txns[TXN_ID]
    assert (TOPIC, 0) in meta.partitions
    assert meta.client_transaction_version == 2


async def test_an_unreachable_coordinator_is_retriable(cluster: Cluster) -> None:
    _store, brokers = cluster
    pid, epoch = await init_producer(brokers[1])
    await add_partitions(brokers[1], pid, epoch, [(TOPIC, 0)])
    brokers[1].register(1)  # its registered address now refuses connections
    async with connected(brokers[0]) as leader:
        assert (await produce(leader, pid, epoch, 0, version=9))[0] == (
            ErrorCode.not_enough_replicas
        )
        brokers[1].register(brokers[1].broker.port)
        assert await produce(leader, pid, epoch, 0, version=9) == (ErrorCode.none, 0)


async def test_a_coordinator_led_by_the_asking_broker_but_not_loaded_is_retriable(
    cluster: Cluster,
) -> None:
    store, brokers = cluster
    pid, epoch = await init_producer(brokers[1])
    await add_partitions(brokers[1], pid, epoch, [(TOPIC, 0)])
    # broker 0 leads __transaction_state by the view before it has loaded it
    store.put(TRANSACTION_STATE_TOPIC, 0, PartitionState((1,), 0, 2, (1,)))
    async with connected(brokers[0]) as leader:
        error, _offset = await produce(leader, pid, epoch, 0, version=9)
    assert error == ErrorCode.not_enough_replicas


async def test_txn_offset_commit_asks_the_remote_coordinator(cluster: Cluster) -> None:
    store, brokers = cluster
    store.put_topic("__consumer_offsets", 1)
    store.put("__consumer_offsets", 0, alone(0))
    await wait_until(lambda: brokers[0].broker.groups.unavailable("g") == ErrorCode.none)
    pid, epoch = await init_producer(brokers[1])
    async with connected(brokers[0]) as groups:
        assert await txn_offset_commit(groups, pid, epoch, version=3) == ErrorCode.invalid_txn_state
        assert await txn_offset_commit(groups, pid, epoch, version=4) == (
            ErrorCode.transaction_abortable
        )
        assert await txn_offset_commit(groups, pid, epoch, version=5) == ErrorCode.none
    assert ("__consumer_offsets", 0) in brokers[1].broker.transactions.txns[TXN_ID].partitions


# -- raw requests ---------------------------------------------------------------------------


async def init_producer(coordinator: MemoryClusterBroker) -> tuple[int, int]:
    async with connected(coordinator) as connection:
        return await init_producer_id(connection, TXN_ID)


async def add_partitions(
    coordinator: MemoryClusterBroker, pid: int, epoch: int, partitions: list[tuple[str, int]]
) -> None:
    async with connected(coordinator) as connection:
        response = await connection.request(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            {
                "v3_and_below_transactional_id": TXN_ID,
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [
                    {"name": topic, "partitions": [index]} for topic, index in partitions
                ],
            },
            version=3,
        )
    errors = [
        p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]
    assert errors == [0] * len(partitions)


async def produce(
    connection: BrokerConnection, pid: int, epoch: int, sequence: int, version: int
) -> tuple[ErrorCode, int]:
    return await produce_transactional(connection, TXN_ID, TOPIC, pid, epoch, sequence, version)


async def txn_offset_commit(
    connection: BrokerConnection, pid: int, epoch: int, version: int
) -> ErrorCode:
    offset = {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
              "committed_metadata": ""}  # fmt: skip
    response = await connection.request(
        ApiKey.TXN_OFFSET_COMMIT,
        {
            "transactional_id": TXN_ID,
            "group_id": "g",
            "producer_id": pid,
            "producer_epoch": epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [offset]}],
        },
        version=version,
    )
    return ErrorCode(response.topics[0].partitions[0].error_code)
