"""Coordinators load their internal partitions in the background, one partition at a time and
yielding to the event loop: while a partition loads, its ids and groups are answered
COORDINATOR_LOAD_IN_PROGRESS and the rest of the broker keeps running; a partition's ids are
served as soon as it is loaded."""

from __future__ import annotations

import asyncio
import time

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.txn.log import encode_key, encode_value, partition_for
from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.internal import TRANSACTION_STATE_TOPIC

SETTINGS = {
    "listeners": "127.0.0.1:0",
    "lockgate.durability": "page-cache",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "lockgate.coordinator.snapshot.interval.ms": "-1",  # a long load: the whole history
}
HISTORY = 20_000


def ids_in(partition: int, count: int) -> list[str]:
    found: list[str] = []
    number = 0
    while len(found) < count:
        candidate = f"txn-{number}"
        if partition_for(candidate, 3) == partition:
            found.append(candidate)
        number += 1
    return found


async def broker_with_history(engine: MemoryEngine) -> None:
    """One id in __transaction_state partitions 0 and 1, a long history in partition 2."""
    broker = Broker(BrokerConfig(SETTINGS), engine)
    await broker.start()
    log_partition = broker.topics.get(TRANSACTION_STATE_TOPIC, 2)
    assert log_partition is not None
    busy = ids_in(2, 1)[0]
    for epoch in range(HISTORY):
        meta = TxnMetadata(busy, 7, epoch % 30_000, 60_000, TxnState.COMPLETE_COMMIT)
        batch = build_batch([(encode_key(busy), encode_value(meta))], timestamp_ms=1)
        log_partition.append(bytearray(batch), validate_produced_batch(batch), 1)
    for index in (0, 1):
        other = ids_in(index, 1)[0]
        meta = TxnMetadata(other, 8 + index, 0, 60_000, TxnState.EMPTY)
        batch = build_batch([(encode_key(other), encode_value(meta))], timestamp_ms=1)
        target = broker.topics.get(TRANSACTION_STATE_TOPIC, index)
        assert target is not None
        target.append(bytearray(batch), validate_produced_batch(batch), 1)
    await broker.stop()


async def test_a_long_partition_loads_without_holding_the_loop() -> None:
    engine = MemoryEngine()
    await broker_with_history(engine)
    broker = Broker(BrokerConfig(SETTINGS), engine)
    ticks = 0
    gates: list[tuple[ErrorCode, ErrorCode]] = []  # (an id of partition 0, the busy id)
    busy = ids_in(2, 1)[0]
    early = ids_in(0, 1)[0]

    async def ticker() -> None:
        nonlocal ticks
        while not broker.transactions.loaded:
            ticks += 1
            transactions = broker.transactions
            gates.append((transactions.unavailable(early), transactions.unavailable(busy)))
            await asyncio.sleep(0)

    await broker.start()
    try:
        watcher = asyncio.create_task(ticker())
        deadline = time.monotonic() + 30
        while not broker.transactions.loaded and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await watcher
        assert broker.transactions.loaded
        assert ticks > 5  # the loop ran other work while the partition was replayed
        # partition 0 was served while partition 2 was still loading
        assert (ErrorCode.none, ErrorCode.coordinator_load_in_progress) in gates
        assert broker.transactions.unavailable(busy) == ErrorCode.none
        meta = broker.transactions.txns[busy]
        assert meta.producer_epoch == (HISTORY - 1) % 30_000  # the latest record won
        assert len(broker.transactions.txns) == 3
    finally:
        await broker.stop()
