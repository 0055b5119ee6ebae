"""A transactional id's coordinator moving to another broker, on two cluster brokers in this
process that both replicate __transaction_state and orders-0 (real sockets, acks=all, a shared
in-memory metadata store): what the first coordinator logged decides what the next one
answers. A retried InitProducerId gets the epoch its first attempt bumped to, not a second
bump (KIP-360); a prepared two-phase transaction is completed through the next coordinator
(KIP-939); a delayed TV2 EndTxn of the previous epoch reaching the next coordinator cannot end
the producer's current transaction (KIP-890)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.client.transactions import PreparedTxnState
from lockgate.cluster.metadata import PartitionState
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.topics.internal import TRANSACTION_STATE_TOPIC
from tests.support.memory_cluster import (
    MemoryClusterBroker,
    MemoryStore,
    connected,
    memory_cluster,
)
from tests.unit.coordinator.group.support import wait_until

TOPIC = "orders"
TXN_ID = "orders-writer"
SETTINGS = {
    "transaction.state.log.num.partitions": "1",
    "transaction.two.phase.commit.enable": "true",
}

Cluster = tuple[MemoryStore, list[MemoryClusterBroker]]


def on_both(leader: int, epoch: int) -> PartitionState:
    return PartitionState((0, 1), leader, epoch, (0, 1))


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """Broker 0 leads both partitions (epoch 1) and coordinates the id."""
    async with memory_cluster(2, SETTINGS) as (store, brokers):
        for member in brokers:
            member.run_coordinators()
        store.put_topic(TRANSACTION_STATE_TOPIC, 1)
        store.put(TRANSACTION_STATE_TOPIC, 0, on_both(0, 1))
        store.put_topic(TOPIC, 1)
        store.put(TOPIC, 0, on_both(0, 1))
        await wait_until(lambda: coordinates(brokers[0]))
        yield store, brokers


def coordinates(member: MemoryClusterBroker) -> bool:
    return member.broker.transactions.unavailable(TXN_ID) == ErrorCode.none


async def move_coordinator(store: MemoryStore, brokers: list[MemoryClusterBroker]) -> None:
    """Broker 1 leads __transaction_state (epoch 2) and has loaded it; broker 0 lets go."""
    store.put(TRANSACTION_STATE_TOPIC, 0, on_both(1, 2))
    await wait_until(lambda: coordinates(brokers[1]) and not coordinates(brokers[0]))


def state(member: MemoryClusterBroker) -> TxnState:
    return member.broker.transactions.txns[TXN_ID].state


def bootstrap(brokers: list[MemoryClusterBroker]) -> str:
    return ",".join(f"127.0.0.1:{member.broker.port}" for member in brokers)


async def init_producer_id(
    member: MemoryClusterBroker, producer_id: int = -1, epoch: int = -1
) -> tuple[ErrorCode, int, int]:
    async with connected(member) as connection:
        response = await connection.request(
            ApiKey.INIT_PRODUCER_ID,
            {"transactional_id": TXN_ID, "transaction_timeout": 60_000,
             "producer_id": producer_id, "producer_epoch": epoch},
            version=4,
        )  # fmt: skip
    return ErrorCode(response.error_code), int(response.producer_id), int(response.producer_epoch)


async def test_a_retried_init_producer_id_gets_the_bump_of_its_first_attempt(
    cluster: Cluster,
) -> None:
    store, brokers = cluster
    error, pid, epoch = await init_producer_id(brokers[0])
    assert error == ErrorCode.none
    # the bump's answer is lost with its coordinator; the client asks the next one again
    assert await init_producer_id(brokers[0], pid, epoch) == (ErrorCode.none, pid, epoch + 1)
    await move_coordinator(store, brokers)
    assert await init_producer_id(brokers[1], pid, epoch) == (ErrorCode.none, pid, epoch + 1)
    # the bumped producer goes on bumping; an older instance stays fenced
    assert await init_producer_id(brokers[1], pid, epoch + 1) == (ErrorCode.none, pid, epoch + 2)
    assert (await init_producer_id(brokers[1], pid, epoch))[0] == ErrorCode.producer_fenced


async def prepare(brokers: list[MemoryClusterBroker]) -> PreparedTxnState:
    """A 2PC transaction holding b"prepared", prepared by a producer that is then gone."""
    async with Producer(bootstrap(brokers), transactional_id=TXN_ID) as first:
        await first.init_transactions(enable_2pc=True)
        first.begin_transaction()
        await first.send(TOPIC, b"prepared", partition=0)
        return await first.prepare_transaction()


async def test_a_prepared_transaction_is_completed_through_the_next_coordinator(
    cluster: Cluster,
) -> None:
    store, brokers = cluster
    prepared = await prepare(brokers)
    await move_coordinator(store, brokers)
    meta = brokers[1].broker.transactions.txns[TXN_ID]
    assert meta.state == TxnState.ONGOING and (TOPIC, 0) in meta.partitions
    async with Producer(bootstrap(brokers), transactional_id=TXN_ID) as second:
        await second.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        await second.complete_transaction(prepared)
    assert await read_committed(brokers) == [b"prepared"]


@pytest.mark.parametrize("ending", ["complete", "force-terminate"])
async def test_a_prepared_transaction_outlives_its_coordinator_and_leader(
    cluster: Cluster, ending: str
) -> None:
    """Broker 0, the id's coordinator and the partition's leader, is lost while the
    transaction is prepared; broker 1 takes both over alone. The decision, stored elsewhere
    (here: kept by the test), commits it, or an operator's force-terminate aborts it."""
    store, brokers = cluster
    prepared = await prepare(brokers)
    await brokers[0].stop()
    for topic in (TRANSACTION_STATE_TOPIC, TOPIC):
        store.put(topic, 0, PartitionState((0, 1), 1, 2, (1,)))
    await wait_until(lambda: coordinates(brokers[1]))
    assert state(brokers[1]) == TxnState.ONGOING
    if ending == "complete":
        async with Producer(bootstrap(brokers[1:]), transactional_id=TXN_ID) as second:
            await second.init_transactions(keep_prepared_txn=True, enable_2pc=True)
            await second.complete_transaction(prepared)
        assert await read_committed(brokers[1:]) == [b"prepared"]
    else:
        async with Admin(bootstrap(brokers[1:])) as admin:
            await admin.force_terminate_transaction(TXN_ID)
        assert await read_committed(brokers[1:]) == []
    # (force-terminate is an InitProducerId: after the abort, the id is Empty at a new epoch)
    settled = TxnState.COMPLETE_COMMIT if ending == "complete" else TxnState.EMPTY
    await wait_until(lambda: state(brokers[1]) == settled)


async def test_a_delayed_end_txn_cannot_end_the_next_transaction(cluster: Cluster) -> None:
    store, brokers = cluster
    async with Producer(
        bootstrap(brokers), transactional_id=TXN_ID, transaction_version=2
    ) as producer:
        await producer.init_transactions()
        identity = producer.identity
        assert identity is not None
        producer.begin_transaction()
        await producer.send(TOPIC, b"first", partition=0)
        await producer.commit_transaction()  # (its epoch is bumped for the next transaction)
        producer.begin_transaction()
        # its delivery means the coordinator's record of the second transaction (added by
        # this Produce) is on both replicas: the next coordinator must read it
        await (await producer.send(TOPIC, b"second", partition=0))
        assert state(brokers[0]) == TxnState.ONGOING
        await move_coordinator(store, brokers)
        # the first commit's request, held back in the network, reaches the next coordinator
        async with connected(brokers[1]) as connection:
            late = await connection.request(
                ApiKey.END_TXN,
                {"transactional_id": TXN_ID, "producer_id": identity.producer_id,
                 "producer_epoch": identity.producer_epoch, "committed": False},
                version=5,
            )  # fmt: skip
        assert late.error_code == ErrorCode.producer_fenced
        assert brokers[1].broker.transactions.txns[TXN_ID].state == TxnState.ONGOING
        await producer.commit_transaction()
    assert await read_committed(brokers) == [b"first", b"second"]


async def read_committed(brokers: list[MemoryClusterBroker]) -> list[bytes]:
    partition = TopicPartition(TOPIC, 0)
    values: list[bytes] = []
    async with Consumer(bootstrap(brokers), isolation_level="read_committed") as consumer:
        consumer.assign([partition])
        await consumer.seek_to_beginning([partition])
        end = (await consumer.end_offsets([partition]))[partition]
        async with asyncio.timeout(10):
            while await consumer.position(partition) < end:
                values += [m.value or b"" for m in await consumer.poll(200)]
    return values
