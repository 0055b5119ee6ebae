# Issue 22, the transactional producer's rules for pains 2-3 without a broker: which errors
# leave an open transaction abortable rather than fatal, and what the abort then has to do;
# pain 5: an EndTxn whose answer was lost leaves the next transaction in need of a new epoch.
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from lockgate.client.batches import ProducerIdentity
from lockgate.client.cluster import Cluster
from lockgate.client.errors import (
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
)
from lockgate.client.transactions import (
    ProducerIdExpiredError,
    TransactionManager,
    TransactionState,
    TransactionTimedOutError,
)

S = TransactionState


def in_transaction(two_phase_commit: bool = False) -> TransactionManager:
    txn = TransactionManager(
        Cluster("127.0.0.1:1"),
        "txn",
        transaction_timeout_ms=1_000,
        transaction_version=None,
        retry_backoff_ms=100,
        request_timeout_ms=30_000,
    )
    txn.transition(S.INITIALIZING)
    txn.transition(S.READY)
    txn.two_phase_commit = two_phase_commit
    txn.begin()
    return txn


def state(txn: TransactionManager) -> TransactionState:
    return txn.state  # a call, so that type checkers do not narrow across transitions


@pytest.mark.parametrize("error", [ProducerFencedError, InvalidProducerEpochError])
@pytest.mark.parametrize("during", [S.IN_TRANSACTION, S.COMMITTING])
def test_an_epoch_bump_in_a_transaction_is_abortable_until_settled(
    error: type[Exception], during: TransactionState
) -> None:
    txn = in_transaction()
    if during is S.COMMITTING:
        txn.transition(S.COMMITTING)
    txn.fail(error("bumped"))  # type: ignore[arg-type]
    assert state(txn) is S.ABORTABLE_ERROR and txn.epoch_bump_unsettled
    with pytest.raises(TransactionAbortableError, match="abort_transaction"):
        txn.check_sendable()
    txn.fail(ProducerFencedError("the next batch"))  # more answers of the same bump
    assert state(txn) is S.ABORTABLE_ERROR and txn.epoch_bump_unsettled
    txn.transition(S.ABORTING)
    txn.fail(ProducerFencedError("a batch the abort waited for"))
    assert state(txn) is S.ABORTING and txn.epoch_bump_unsettled


def test_a_settled_timeout_leaves_nothing_to_end() -> None:
    txn = in_transaction()
    txn.transaction.partitions.add(("orders", 0))  # type: ignore[arg-type]
    txn.fail(ProducerFencedError("bumped"))
    txn.epoch_bump_was_timeout()
    assert not txn.epoch_bump_unsettled and not txn.has_anything
    assert state(txn) is S.ABORTABLE_ERROR
    with pytest.raises(TransactionTimedOutError, match="transaction_timeout_ms"):
        txn.raise_error()
    txn.transition(S.ABORTING)
    txn.transition(S.READY)
    txn.begin()
    assert txn.error is None


def test_a_settled_fence_is_fatal() -> None:
    txn = in_transaction()
    txn.fail(ProducerFencedError("bumped"))
    txn.epoch_bump_was_fence(ProducerFencedError("refused"))
    assert state(txn) is S.FATAL_ERROR and not txn.epoch_bump_unsettled
    with pytest.raises(ProducerFencedError, match="newer instance"):
        txn.begin()


def test_an_epoch_bump_is_fatal_outside_a_transaction_and_for_two_phase_commit() -> None:
    txn = in_transaction()
    txn.transition(S.ABORTING)
    txn.transition(S.READY)
    txn.fail(ProducerFencedError("between transactions"))
    assert state(txn) is S.FATAL_ERROR
    two_phase = in_transaction(two_phase_commit=True)  # never timed out: a real fence
    two_phase.fail(ProducerFencedError("fenced"))
    assert state(two_phase) is S.FATAL_ERROR


@pytest.mark.parametrize("during", [S.IN_TRANSACTION, S.COMMITTING, S.READY])
def test_a_forgotten_transactional_id_is_fatal_and_says_why(during: TransactionState) -> None:
    """KAFKA-18019: nothing remembers whether a newer instance fenced this one before the id
    expired, so taking a new producer id could let a zombie write again."""
    txn = in_transaction()
    if during is S.COMMITTING:
        txn.transition(S.COMMITTING)
    elif during is S.READY:
        txn.transition(S.ABORTING)
        txn.transition(S.READY)
    txn.fail(InvalidProducerIdMappingError("expired"))
    assert state(txn) is S.FATAL_ERROR
    with pytest.raises(ProducerIdExpiredError, match=r"transactional\.id\.expiration\.ms"):
        txn.begin()
    with pytest.raises(InvalidProducerIdMappingError):  # its code's class, for old handlers
        txn.raise_error()


class _LosesFirstAnswer:
    """A coordinator connection whose first EndTxn answer is lost (a timeout)."""

    def __init__(self) -> None:
        self.attempts = 0

    def version_for(self, api_key: int, *, min_version: int, max_version: int | None) -> int:
        return 4

    async def request(self, api_key: int, body: object, *, version: int) -> object:
        self.attempts += 1
        if self.attempts == 1:
            raise KafkaTimeoutError("no answer")
        return SimpleNamespace(error_code=0, producer_id=-1, producer_epoch=-1)


@pytest.mark.parametrize("lose", [True, False])
async def test_an_end_txn_whose_answer_was_lost_is_in_doubt(lose: bool) -> None:
    """Pain 5: the lost attempt may still reach the coordinator during the next transaction,
    so the classic-protocol producer bumps its epoch before it (Producer._end_transaction)."""
    txn = in_transaction()
    connection = _LosesFirstAnswer()
    connection.attempts = 0 if lose else 1

    async def coordinator(_key_type: int, _key: str) -> _LosesFirstAnswer:
        return connection

    txn.coordinator = coordinator  # type: ignore[method-assign,assignment]
    deadline = asyncio.get_running_loop().time() + 5
    identity = ProducerIdentity(7, 0, True)
    assert await txn.end_txn(identity, True, deadline) == identity
    assert txn.end_txn_in_doubt is lose
