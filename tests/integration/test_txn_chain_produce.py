"""A chain of transactions (transaction version 2): the first Produce of transaction N+1 arrives
while transaction N's markers are still being written. Kafka 4.0+ answers it
CONCURRENT_TRANSACTIONS (v12+, KAFKA-18662; NOT_ENOUGH_REPLICAS below); lockgate holds it until
the markers are written, bounded by the request's timeout, and only then answers. The markers'
completion is held back here by a test seam, so the window is as long as the test wants."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from lockgate.client.connection import BrokerConnection
from lockgate.handlers.k00_produce import _transaction_error
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from tests.support.txn_requests import end_txn, init_producer_id, produce_transactional
from tests.unit.coordinator.group.support import wait_until

TOPIC = "chain"
TXN_ID = "chain-writer"


class MarkerGate:
    """Holds every transaction's markers until opened (wraps the coordinator's marker writer)."""

    def __init__(self, broker: Broker) -> None:
        self.opened = asyncio.Event()
        self.waiting = 0
        coordinator = broker.transactions
        write: Callable[..., Awaitable[None]] = coordinator._write_markers

        async def held(*args: Any) -> None:
            self.waiting += 1
            await self.opened.wait()
            await write(*args)

        coordinator._write_markers = held  # type: ignore[method-assign,assignment]


@pytest.fixture
async def connection(memory_broker: Broker) -> AsyncIterator[BrokerConnection]:
    memory_broker.topics.create(TOPIC, 1, 1, {})
    connection = BrokerConnection("127.0.0.1", memory_broker.port)
    await connection.connect()
    try:
        yield connection
    finally:
        await connection.close()


async def produce(
    connection: BrokerConnection, pid: int, epoch: int, sequence: int
) -> tuple[ErrorCode, int]:
    """Produce v12 (transaction version 2), the request's timeout (the longest hold) 1 s."""
    return await produce_transactional(
        connection, TXN_ID, TOPIC, pid, epoch, sequence, version=12, timeout_ms=1_000
    )


async def commit(connection: BrokerConnection, pid: int, epoch: int) -> int:
    """EndTxn v5 (transaction version 2): the epoch of the next transaction."""
    response = await end_txn(connection, TXN_ID, pid, epoch, version=5)
    assert response.error_code == 0
    assert int(response.producer_id) == pid
    return int(response.producer_epoch)


async def test_the_next_transaction_waits_for_the_markers_instead_of_bouncing(
    memory_broker: Broker, connection: BrokerConnection
) -> None:
    gate = MarkerGate(memory_broker)
    pid, epoch = await init_producer_id(connection, TXN_ID, version=5)
    assert await produce(connection, pid, epoch, 0) == (ErrorCode.none, 0)
    epoch = await commit(connection, pid, epoch)
    await wait_until(lambda: gate.waiting == 1)
    # transaction N+1, pipelined: its first batch is held, the second waits behind it
    first = asyncio.ensure_future(produce(connection, pid, epoch, 0))
    second = asyncio.ensure_future(produce(connection, pid, epoch, 1))
    await asyncio.sleep(0.3)
    assert not first.done() and not second.done()
    gate.opened.set()
    # the commit marker took offset 1
    assert await first == (ErrorCode.none, 2)
    assert await second == (ErrorCode.none, 3)
    meta = memory_broker.transactions.txns[TXN_ID]
    assert meta.state.display_name == "Ongoing" and meta.producer_epoch == epoch


async def test_markers_not_written_within_the_timeout_answer_concurrent_transactions(
    memory_broker: Broker, connection: BrokerConnection
) -> None:
    gate = MarkerGate(memory_broker)
    pid, epoch = await init_producer_id(connection, TXN_ID, version=5)
    assert (await produce(connection, pid, epoch, 0))[0] == ErrorCode.none
    epoch = await commit(connection, pid, epoch)
    await wait_until(lambda: gate.waiting == 1)
    assert await produce(connection, pid, epoch, 0) == (
        ErrorCode.concurrent_transactions,
        -1,
    )
    gate.opened.set()
    await wait_until(lambda: not memory_broker.transactions.completing(TXN_ID))
    # the client's retry goes through
    assert await produce(connection, pid, epoch, 0) == (ErrorCode.none, 2)


@pytest.mark.parametrize(
    ("check", "version", "answer"),
    [
        (ErrorCode.concurrent_transactions, 12, ErrorCode.concurrent_transactions),
        (ErrorCode.concurrent_transactions, 11, ErrorCode.not_enough_replicas),
        (ErrorCode.coordinator_load_in_progress, 12, ErrorCode.not_enough_replicas),
        (ErrorCode.not_coordinator, 13, ErrorCode.not_enough_replicas),
        (ErrorCode.producer_fenced, 12, ErrorCode.invalid_producer_epoch),
        (ErrorCode.transaction_abortable, 10, ErrorCode.invalid_txn_state),
        (ErrorCode.transaction_abortable, 11, ErrorCode.transaction_abortable),
    ],
)
def test_the_answer_to_a_failed_transaction_check_depends_on_the_version(
    check: ErrorCode, version: int, answer: ErrorCode
) -> None:
    assert _transaction_error(check, version) == answer
