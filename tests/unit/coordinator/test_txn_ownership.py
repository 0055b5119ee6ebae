"""The transaction coordinator of a cluster broker coordinates the __transaction_state
partitions it leads: NOT_COORDINATOR for the ids of a partition it does not lead,
COORDINATOR_LOAD_IN_PROGRESS until the partition is replayed, the transactions the log left
preparing resumed once it is, and everything of the partition forgotten (its completions
cancelled) when the leadership ends. A transition whose log write was in flight while the
ownership moved is answered NOT_COORDINATOR and not installed. Driven here by calling
on_leadership directly, as the ReplicaManager does, on a broker that is not started; the
markers go to the broker's own partitions (a single node's path)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.coordinator import TransactionCoordinator
from lockgate.coordinator.txn.log import encode_key, encode_value, partition_for
from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    CONTROL_COMMIT,
    build_batch,
    control_record,
    validate_produced_batch,
)
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.internal import TRANSACTION_STATE_TOPIC
from tests.unit.coordinator.group.support import wait_until

PARTITIONS = 3
TOPIC = "orders"
PID = 4242
SETTINGS = {
    "listeners": "127.0.0.1:0",
    "lockgate.durability": "page-cache",
    "transaction.state.log.num.partitions": str(PARTITIONS),
    "lockgate.coordinator.snapshot.interval.ms": "-1",
}


def ids_in(index: int, count: int = 1) -> list[str]:
    """Transactional ids whose __transaction_state partition is `index`."""
    found: list[str] = []
    number = 0
    while len(found) < count:
        candidate = f"txn-{number}"
        if partition_for(candidate, PARTITIONS) == index:
            found.append(candidate)
        number += 1
    return found


TXN_ID = ids_in(0)[0]
OTHER_ID = ids_in(1)[0]  # another partition


class HeldWrites:
    """Keeps every append of the broker from becoming durable until released: the
    coordinator's log writes (and marker writes) stay in flight."""

    def __init__(self, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
        self.futures: list[asyncio.Future[None]] = []
        appended = broker.group_commit.appended

        def held(partition: Partition) -> asyncio.Future[None]:
            appended(partition)
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.futures.append(future)
            return future

        monkeypatch.setattr(broker.group_commit, "appended", held)

    def release(self) -> None:
        for future in self.futures:
            if not future.done():
                future.set_result(None)


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    """A broker with __transaction_state (3 partitions, none led yet) and a topic `orders`."""
    broker = Broker(BrokerConfig(SETTINGS), MemoryEngine())
    broker.topics.create(TRANSACTION_STATE_TOPIC, PARTITIONS, 1, {}, internal=True)
    broker.topics.create(TOPIC, 1, 1, {})
    try:
        yield broker
    finally:
        for index in list(broker.transactions.runtime.owned):  # cancels loads and completions
            broker.transactions.runtime.on_leadership(index, None)
        await asyncio.sleep(0)
        broker.topics.close()


def log_of(broker: Broker, topic: str, index: int) -> Partition:
    partition = broker.topics.get(topic, index)
    assert partition is not None
    return partition


def write_state(broker: Broker, meta: TxnMetadata) -> None:
    """A record of the id's __transaction_state partition, as an earlier leader wrote it."""
    partition = log_of(
        broker, TRANSACTION_STATE_TOPIC, partition_for(meta.transactional_id, PARTITIONS)
    )
    batch = build_batch([(encode_key(meta.transactional_id), encode_value(meta))], timestamp_ms=1)
    partition.append(bytearray(batch), validate_produced_batch(batch), 1, internal=True)


def prepared_commit(transactional_id: str = TXN_ID) -> TxnMetadata:
    return TxnMetadata(transactional_id, PID, 0, 60_000, TxnState.PREPARE_COMMIT,
                       frozenset({(TOPIC, 0)}), start_ms=1, last_update_ms=1)  # fmt: skip


def empty(transactional_id: str = TXN_ID, epoch: int = 0) -> TxnMetadata:
    return TxnMetadata(transactional_id, PID, epoch, 60_000, TxnState.EMPTY, last_update_ms=1)


def markers(partition: Partition) -> list[tuple[int, int, int]]:
    """(producer id, COMMIT/ABORT, coordinator epoch) of each marker in the log."""
    found = []
    for segment, position, header in partition.batches_from(0):
        if header.is_control:
            kind, epoch = control_record(segment.log.read(position, header.size))
            found.append((header.producer_id, kind, epoch))
    return found


async def lead(transactions: TransactionCoordinator, index: int, epoch: int = 1) -> None:
    transactions.runtime.on_leadership(index, epoch)
    await wait_until(lambda: index in transactions.runtime.loaded_partitions)


def completions_running() -> list[asyncio.Task[object]]:
    return [
        task
        for task in asyncio.all_tasks()
        if not task.done()
        and getattr(task.get_coro(), "__qualname__", "") == "TransactionCoordinator._complete"
    ]


async def test_an_id_of_a_partition_not_led_here_is_not_coordinated(broker: Broker) -> None:
    transactions = broker.transactions
    assert transactions.unavailable(TXN_ID) == ErrorCode.not_coordinator
    assert transactions.serving(TXN_ID) == ErrorCode.not_coordinator
    assert transactions.coordinator_epoch(TXN_ID) == -1


async def test_a_led_partition_is_loading_until_its_replay_ends(broker: Broker) -> None:
    transactions = broker.transactions
    transactions.runtime.on_leadership(0, 6)
    assert transactions.runtime.owned == {0: 6} and not transactions.loaded
    assert transactions.unavailable(TXN_ID) == ErrorCode.coordinator_load_in_progress
    assert transactions.serving(TXN_ID) == ErrorCode.coordinator_load_in_progress
    await wait_until(lambda: transactions.loaded)
    assert transactions.unavailable(TXN_ID) == ErrorCode.none
    assert transactions.coordinator_epoch(TXN_ID) == 6
    assert transactions.unavailable(OTHER_ID) == ErrorCode.not_coordinator


async def test_serving_ignores_a_write_in_flight_but_gate_does_not(broker: Broker) -> None:
    transactions = broker.transactions
    await lead(transactions, 0)
    transactions.pending.add(TXN_ID)
    assert transactions.serving(TXN_ID) == ErrorCode.none
    assert transactions.unavailable(TXN_ID) == ErrorCode.concurrent_transactions


async def test_the_ids_in_the_log_are_loaded(broker: Broker) -> None:
    write_state(broker, empty(epoch=3))
    await lead(broker.transactions, 0)
    assert broker.transactions.txns[TXN_ID] == empty(epoch=3)


async def test_losing_the_leadership_forgets_that_partitions_ids_only(broker: Broker) -> None:
    write_state(broker, empty(TXN_ID))
    write_state(broker, empty(OTHER_ID))
    transactions = broker.transactions
    await lead(transactions, 0)
    await lead(transactions, 1)
    transactions.runtime.on_leadership(0, None)
    assert list(transactions.txns) == [OTHER_ID]
    assert transactions.unavailable(TXN_ID) == ErrorCode.not_coordinator
    assert transactions.runtime.owned == {1: 1} and transactions.loaded


async def test_a_prepared_commit_is_resumed_once_its_partition_is_loaded(broker: Broker) -> None:
    write_state(broker, prepared_commit())
    transactions = broker.transactions
    await lead(transactions, 0, epoch=7)
    await wait_until(lambda: transactions.txns[TXN_ID].state == TxnState.COMPLETE_COMMIT)
    assert markers(log_of(broker, TOPIC, 0)) == [(PID, CONTROL_COMMIT, 7)]


async def test_losing_the_leadership_cancels_a_completion(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldWrites(broker, monkeypatch)
    write_state(broker, prepared_commit())
    transactions = broker.transactions
    await lead(transactions, 0)
    assert len(completions_running()) == 1  # waiting for its marker to be durable
    transactions.runtime.on_leadership(0, None)
    await wait_until(lambda: not completions_running(), timeout=1.0)
    held.release()


async def test_a_new_epoch_while_loading_restarts_the_load(broker: Broker) -> None:
    for epoch in range(2_000):  # a long partition: its replay yields to the loop
        write_state(broker, empty(epoch=epoch))
    transactions = broker.transactions
    transactions.runtime.on_leadership(0, 1)
    for _ in range(3):
        await asyncio.sleep(0)
    assert transactions.unavailable(TXN_ID) == ErrorCode.coordinator_load_in_progress
    transactions.runtime.on_leadership(0, 2)
    await wait_until(lambda: transactions.loaded)
    assert transactions.coordinator_epoch(TXN_ID) == 2
    assert transactions.txns[TXN_ID] == empty(epoch=1_999)


async def test_a_transition_is_installed_once_logged(broker: Broker) -> None:
    transactions = broker.transactions
    await lead(transactions, 0)
    outcome = rules.Outcome(ErrorCode.none, empty())
    assert await transactions.apply(TXN_ID, outcome) == ErrorCode.none
    assert transactions.txns[TXN_ID] == empty()


async def test_a_transition_logged_after_the_leadership_moved_is_not_installed(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    transactions = broker.transactions
    await lead(transactions, 0)
    held = HeldWrites(broker, monkeypatch)
    applying = asyncio.create_task(
        transactions.apply(TXN_ID, rules.Outcome(ErrorCode.none, empty()))
    )
    await wait_until(lambda: bool(held.futures))
    transactions.runtime.on_leadership(0, None)
    held.release()
    assert await asyncio.wait_for(applying, 5) == ErrorCode.not_coordinator
    assert TXN_ID not in transactions.txns
    assert TXN_ID not in transactions.pending


async def test_a_transition_logged_across_a_new_epoch_is_answered_not_coordinator(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator leads the partition again, in a newer epoch: the client is told to
    look again; the state is the one the new term's load read from the log."""
    transactions = broker.transactions
    await lead(transactions, 0, epoch=1)
    held = HeldWrites(broker, monkeypatch)
    applying = asyncio.create_task(
        transactions.apply(TXN_ID, rules.Outcome(ErrorCode.none, empty()))
    )
    await wait_until(lambda: bool(held.futures))
    transactions.runtime.on_leadership(0, 2)
    await wait_until(lambda: transactions.loaded)
    held.release()
    assert await asyncio.wait_for(applying, 5) == ErrorCode.not_coordinator
    assert transactions.txns[TXN_ID] == empty()  # (replayed by the new term's load)


async def test_a_log_write_refused_by_replication_is_coordinator_not_available(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    transactions = broker.transactions
    await lead(transactions, 0)

    def refused(*_args: object, **_kwargs: object) -> asyncio.Future[None]:
        raise KafkaProtocolError(ErrorCode.not_enough_replicas)

    monkeypatch.setattr(transactions.runtime, "write", refused)  # the coordinator's log writes
    answer = await transactions.apply(TXN_ID, rules.Outcome(ErrorCode.none, empty()))
    assert answer == ErrorCode.coordinator_not_available
    assert TXN_ID not in transactions.txns and TXN_ID not in transactions.pending


async def test_a_completion_resumed_by_a_new_term_is_cancelled_when_the_partition_moves(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldWrites(broker, monkeypatch)
    write_state(broker, prepared_commit())
    transactions = broker.transactions
    await lead(transactions, 0, epoch=1)
    transactions.runtime.on_leadership(0, 2)  # cancels the first completion, resumes it again
    await wait_until(lambda: transactions.loaded)
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(completions_running()) == 1
    transactions.runtime.on_leadership(0, None)
    try:
        await wait_until(lambda: not completions_running(), timeout=1.0)
    finally:
        for task in completions_running():  # (do not leave it retrying for ever)
            task.cancel()
        held.release()
