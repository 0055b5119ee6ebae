"""Before TV2, a delayed EndTxn (KIP-890's case) against a broker in this process, over real
connections: a client gives up on its EndTxn, sends it again on a new connection and starts
its next transaction with the same epoch; the first copy, arriving late on the old connection,
must not end that transaction (it would be torn: committed before its records are all
written). Clients that reconnect, and TV2's EndTxn, are unaffected."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.client.connection import BrokerConnection
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from tests.support.txn_requests import end_txn

TXN_ID, TOPIC = "delayed", "t"


@pytest.fixture
async def broker(memory_broker: Broker) -> AsyncIterator[Broker]:
    memory_broker.topics.create(TOPIC, 2, 1, {})
    yield memory_broker


async def connect(broker: Broker) -> BrokerConnection:
    connection = BrokerConnection("127.0.0.1", broker.port)
    await connection.connect()
    return connection


async def init(connection: BrokerConnection) -> tuple[int, int]:
    """InitProducerId, asked again while it aborts the previous producer's transaction."""
    for _attempt in range(100):
        answer = await connection.request(
            ApiKey.INIT_PRODUCER_ID,
            {"transactional_id": TXN_ID, "transaction_timeout": 60_000,
             "producer_id": -1, "producer_epoch": -1},
            version=3,
        )  # fmt: skip
        if answer.error_code != ErrorCode.concurrent_transactions:
            break
        await asyncio.sleep(0.02)
    assert answer.error_code == ErrorCode.none
    return int(answer.producer_id), int(answer.producer_epoch)


async def add(connection: BrokerConnection, pid: int, epoch: int, partition: int) -> ErrorCode:
    answer = await connection.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        {"v3_and_below_transactional_id": TXN_ID, "v3_and_below_producer_id": pid,
         "v3_and_below_producer_epoch": epoch,
         "v3_and_below_topics": [{"name": TOPIC, "partitions": [partition]}]},
        version=3,
    )  # fmt: skip
    return ErrorCode(answer.results_by_topic_v3_and_below[0].results_by_partition[0]
                     .partition_error_code)  # fmt: skip


async def end(connection: BrokerConnection, pid: int, epoch: int, version: int = 3) -> Any:
    return await end_txn(connection, TXN_ID, pid, epoch, version)


def state(broker: Broker) -> TxnState:
    return broker.transactions.txns[TXN_ID].state


async def test_a_delayed_end_txn_on_an_abandoned_connection_is_refused(broker: Broker) -> None:
    first = await connect(broker)
    second = await connect(broker)
    try:
        pid, epoch = await init(first)
        assert await add(first, pid, epoch, 0) == ErrorCode.none
        # transaction N's EndTxn times out on `first`; the client sends it again on `second`
        assert (await end(second, pid, epoch)).error_code == ErrorCode.none
        await broker.transactions.wait_for_completion(TXN_ID)
        assert await add(second, pid, epoch, 1) == ErrorCode.none  # N+1, same epoch
        # the first copy arrives at last, on the connection the client left
        late = await end(first, pid, epoch)
        assert late.error_code == ErrorCode.invalid_txn_state
        assert state(broker) == TxnState.ONGOING
        assert (await end(second, pid, epoch)).error_code == ErrorCode.none
        assert state(broker) in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
    finally:
        await first.close()
        await second.close()


async def test_a_client_that_reconnects_goes_on(broker: Broker) -> None:
    first = await connect(broker)
    pid, epoch = await init(first)
    assert await add(first, pid, epoch, 0) == ErrorCode.none
    await first.close()  # the connection broke; the client opens another
    second = await connect(broker)
    try:
        assert (await end(second, pid, epoch)).error_code == ErrorCode.none
        await broker.transactions.wait_for_completion(TXN_ID)
        assert await add(second, pid, epoch, 1) == ErrorCode.none
        assert (await end(second, pid, epoch)).error_code == ErrorCode.none
    finally:
        await second.close()


async def test_tv2_end_txn_is_fenced_by_its_epoch_not_its_connection(broker: Broker) -> None:
    first = await connect(broker)
    second = await connect(broker)
    try:
        pid, epoch = await init(first)
        assert await add(second, pid, epoch, 0) == ErrorCode.none
        answer = await end(first, pid, epoch, version=5)  # older connection, current epoch
        assert answer.error_code == ErrorCode.none and answer.producer_epoch == epoch + 1
    finally:
        await first.close()
        await second.close()


async def test_another_producer_of_the_id_is_told_apart_by_its_epoch(broker: Broker) -> None:
    """A successor whose connection happens to be older than its predecessor's is not taken
    for a delayed request; the predecessor, on the newer connection, is fenced as ever."""
    older = await connect(broker)
    newer = await connect(broker)
    try:
        pid, epoch = await init(newer)
        assert await add(newer, pid, epoch, 0) == ErrorCode.none
        successor = await init(older)  # bumps the epoch, aborting the open transaction
        assert await add(older, *successor, 1) == ErrorCode.none
        assert (await end(older, *successor)).error_code == ErrorCode.none
        assert (await end(newer, pid, epoch)).error_code == ErrorCode.producer_fenced
    finally:
        await older.close()
        await newer.close()
