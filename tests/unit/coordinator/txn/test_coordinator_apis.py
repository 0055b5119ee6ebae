"""The transaction coordinator's API methods against the coordinator alone, built from the
narrow pieces the composition root hands it (a topic directory over memory storage, a clock,
a log write that commits at once): ListTransactions' filters, DescribeTransactions' answers,
and when InitProducerId asks for TWO_PHASE_COMMIT (KIP-939)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from lockgate.cluster.local import LocalMetadataStore
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.runtime import LoopTimers
from lockgate.coordinator.txn.coordinator import TransactionCoordinator
from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.directory import TopicManager
from tests.unit.coordinator.txn.support import (
    MAX_TIMEOUT_MS,
    NOW,
    PID,
    TIMEOUT_MS,
    TXN_ID,
    Allocator,
    meta,
    no_allocation,
)


def committed(_partition: Partition, _batch: bytes) -> asyncio.Future[None]:
    """A log write that is committed at once."""
    future = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


class NoMarkers:
    """Markers no test here reaches: every decision's partitions are written at once."""

    async def write(self, *_marker: object) -> dict[tuple[str, int], ErrorCode]:
        return {}

    async def close(self) -> None:
        return None


class NoVerifier:
    """The one broker coordinates every id: nobody else to ask."""

    async def ask(self, *_question: object) -> ErrorCode:
        return ErrorCode.not_coordinator


def coordinator(allocate: Allocator | None = None, loaded: bool = True) -> TransactionCoordinator:
    """A single node's coordinator of one __transaction_state partition, loaded or not."""
    engine = MemoryEngine()
    topics = TopicManager(engine, LocalMetadataStore(engine, 0), BrokerConfig({}), lambda: NOW)
    transactions = TransactionCoordinator(
        topics=topics,
        num_partitions=1,
        max_timeout_ms=MAX_TIMEOUT_MS,
        expiration_ms=7 * 24 * 3600 * 1000,
        allocate=allocate or no_allocation,
        write=committed,
        clock=lambda: NOW,
        on_loaded=lambda _seconds: None,
        snapshots=None,
        markers=NoMarkers(),
        verifier=NoVerifier(),
        timers=LoopTimers(),
    )
    transactions.runtime.ensure_topic()
    if loaded:
        transactions.runtime.loaded_partitions.update(transactions.runtime.owned)
    return transactions


def put(transactions: TransactionCoordinator, found: TxnMetadata) -> TxnMetadata:
    transactions.txns[found.transactional_id] = found
    return found


def listed(transactions: TransactionCoordinator, **filters: object) -> list[str]:
    arguments: dict[str, object] = {
        "state_filters": [],
        "producer_ids": set(),
        "min_duration_ms": -1,
        "id_pattern": None,
        "now_ms": NOW,
        **filters,
    }
    listing = transactions.list_transactions(**arguments)  # type: ignore[arg-type]
    assert listing.error == ErrorCode.none
    return [m.transactional_id for m in listing.transactions]


def some_transactions(transactions: TransactionCoordinator) -> None:
    """b-open: Ongoing for 5 s (producer 42); a-done: CompleteCommit (producer 43);
    c-empty: Empty (producer 44)."""
    put(transactions, replace(meta(TxnState.ONGOING), transactional_id="b-open"))
    done = meta(TxnState.COMPLETE_COMMIT, producer_id=PID + 1)
    put(transactions, replace(done, transactional_id="a-done"))
    empty = meta(TxnState.EMPTY, producer_id=PID + 2)
    put(transactions, replace(empty, transactional_id="c-empty"))


async def test_listing_waits_for_every_partition_to_load() -> None:
    listing = coordinator(loaded=False).list_transactions(["Ongoing", "Nope"], set(), -1, "(", NOW)
    assert listing.error == ErrorCode.coordinator_load_in_progress
    assert (listing.unknown_state_filters, listing.transactions) == ([], [])


async def test_listing_filters_by_state_producer_duration_and_pattern_in_id_order() -> None:
    transactions = coordinator()
    some_transactions(transactions)
    assert listed(transactions) == ["a-done", "b-open", "c-empty"]
    assert listed(transactions, state_filters=["Ongoing", "Empty"]) == ["b-open", "c-empty"]
    assert listed(transactions, producer_ids={PID + 1, PID + 2}) == ["a-done", "c-empty"]
    # open for 5 s: longer than 4.999 s, not longer than 5 s; the others have no transaction
    assert listed(transactions, min_duration_ms=4_999) == ["b-open"]
    assert listed(transactions, min_duration_ms=5_000) == []
    assert listed(transactions, id_pattern="[ab]-.*") == ["a-done", "b-open"]
    assert listed(transactions, id_pattern="done") == []  # the whole id must match


async def test_unknown_state_names_are_echoed_and_a_bad_pattern_is_an_invalid_request() -> None:
    transactions = coordinator()
    some_transactions(transactions)
    listing = transactions.list_transactions(["Ongoing", "Paused"], set(), -1, None, NOW)
    assert [m.transactional_id for m in listing.transactions] == ["b-open"]
    assert listing.unknown_state_filters == ["Paused"]
    refused = transactions.list_transactions(["Paused"], set(), -1, "([", NOW)
    assert refused.error == ErrorCode.invalid_request
    assert (refused.unknown_state_filters, refused.transactions) == (["Paused"], [])


async def test_describe_answers_for_the_ids_served_here() -> None:
    transactions = coordinator(loaded=False)
    found = put(transactions, meta(TxnState.ONGOING))
    assert transactions.describe(TXN_ID) == ErrorCode.coordinator_load_in_progress
    transactions.runtime.loaded_partitions.update(transactions.runtime.owned)
    assert transactions.describe(TXN_ID) == found
    assert transactions.describe("unknown") == ErrorCode.transactional_id_not_found
    transactions.runtime.on_leadership(0, None)  # the partition moved away
    assert transactions.describe(TXN_ID) == ErrorCode.not_coordinator


class TwoPhaseCheck:
    """Stands for the handler's TWO_PHASE_COMMIT authorization: counts the questions."""

    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.allowed


async def test_an_ordinary_init_producer_id_is_not_asked_about_two_phase_commit() -> None:
    transactions = coordinator(Allocator(PID))
    check = TwoPhaseCheck(allowed=False)
    answer = await transactions.init_producer_id(
        TXN_ID, TIMEOUT_MS, -1, -1, NOW, False, False, check
    )
    assert (answer.error, answer.producer_id, answer.producer_epoch) == (ErrorCode.none, PID, 0)
    assert check.asked == 0


async def test_keeping_a_prepared_transaction_needs_two_phase_commit() -> None:
    transactions = coordinator()
    before = put(transactions, meta(TxnState.ONGOING, two_phase_commit=True))
    check = TwoPhaseCheck(allowed=False)
    answer = await transactions.init_producer_id(
        TXN_ID, TIMEOUT_MS, -1, -1, NOW, False, True, check
    )
    assert answer.error == ErrorCode.transactional_id_authorization_failed
    assert (answer.producer_id, answer.producer_epoch) == (-1, -1)
    assert check.asked == 1
    assert transactions.txns[TXN_ID] == before  # nothing logged


async def test_aborting_an_open_two_phase_transaction_needs_two_phase_commit() -> None:
    transactions = coordinator()
    put(transactions, meta(TxnState.ONGOING, two_phase_commit=True))
    refused = TwoPhaseCheck(allowed=False)
    answer = await transactions.init_producer_id(
        TXN_ID, TIMEOUT_MS, -1, -1, NOW, False, False, refused
    )
    assert (answer.error, refused.asked) == (ErrorCode.transactional_id_authorization_failed, 1)
    allowed = TwoPhaseCheck(allowed=True)
    answer = await transactions.init_producer_id(
        TXN_ID, TIMEOUT_MS, -1, -1, NOW, False, False, allowed
    )
    # allowed: the open transaction is fenced and aborted, the client retries meanwhile
    assert (answer.error, allowed.asked) == (ErrorCode.concurrent_transactions, 1)
    assert transactions.txns[TXN_ID].state == TxnState.PREPARE_ABORT
    await transactions.drain()
