# The transactional producer's client-side rules without a broker: the state table, the
# KIP-939 prepared state's serialised form, configuration checks and the sync facade's
# property mapping.
from __future__ import annotations

import pytest

from lockgate.client.cluster import Cluster
from lockgate.client.errors import (
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from lockgate.client.producer import Producer
from lockgate.client.sync import producer_options
from lockgate.client.transactions import (
    LEGAL_PREVIOUS,
    PreparedTxnState,
    TransactionManager,
    TransactionState,
    is_legal,
)

S = TransactionState


def manager() -> TransactionManager:
    return TransactionManager(
        Cluster("127.0.0.1:1"),
        "txn",
        transaction_timeout_ms=60_000,
        transaction_version=None,
        retry_backoff_ms=100,
        request_timeout_ms=30_000,
    )


def state(txn: TransactionManager) -> TransactionState:
    return txn.state  # a call, so that type checkers do not narrow across transitions


def test_every_state_has_its_legal_predecessors() -> None:
    assert set(LEGAL_PREVIOUS) == set(TransactionState)
    assert is_legal(S.READY, S.IN_TRANSACTION)
    assert not is_legal(S.READY, S.COMMITTING)  # nothing to commit
    assert not is_legal(S.ABORTABLE_ERROR, S.COMMITTING)  # must abort
    assert is_legal(S.PREPARED, S.COMMITTING) and is_legal(S.PREPARED, S.ABORTING)
    assert is_legal(S.INITIALIZING, S.PREPARED)  # KIP-939: a kept transaction
    assert all(is_legal(state, S.FATAL_ERROR) for state in TransactionState)


def test_illegal_calls_raise_invalid_txn_state_and_change_nothing() -> None:
    txn = manager()
    with pytest.raises(InvalidTxnStateError):
        txn.begin()  # before init_transactions
    assert state(txn) is S.UNINITIALIZED
    with pytest.raises(InvalidTxnStateError):
        txn.check_sendable()
    txn.transition(S.INITIALIZING)
    txn.transition(S.READY)
    txn.begin()
    txn.check_sendable()
    with pytest.raises(InvalidTxnStateError):
        txn.transition(S.READY)
    assert state(txn) is S.IN_TRANSACTION


def test_abortable_error_allows_only_abort() -> None:
    txn = manager()
    txn.transition(S.INITIALIZING)
    txn.transition(S.READY)
    txn.begin()
    txn.fail(TransactionAbortableError("a batch failed"))
    assert state(txn) is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError):
        txn.check_sendable()
    with pytest.raises(TransactionAbortableError):
        txn.transition(S.COMMITTING)
    txn.transition(S.ABORTING)
    txn.transition(S.READY)
    txn.begin()  # a fresh transaction forgets the error
    assert txn.error is None


def test_fenced_is_final() -> None:
    txn = manager()
    txn.transition(S.INITIALIZING)
    txn.transition(S.READY)
    txn.begin()
    txn.fail(ProducerFencedError("a newer instance"))
    assert state(txn) is S.ABORTABLE_ERROR and txn.epoch_bump_unsettled  # a timeout, maybe
    txn.epoch_bump_was_fence(ProducerFencedError("a newer instance"))  # the abort found out
    assert state(txn) is S.FATAL_ERROR
    for call in (txn.begin, txn.check_sendable, lambda: txn.transition(S.ABORTING)):
        with pytest.raises(ProducerFencedError, match="a newer instance"):
            call()
    txn.fail(TransactionAbortableError("later"))  # never leaves FATAL_ERROR
    assert state(txn) is S.FATAL_ERROR


def test_prepared_state_serialises() -> None:
    state = PreparedTxnState(42, 32_766)
    assert PreparedTxnState.from_json(state.to_json()) == state
    assert state.has_transaction
    assert not PreparedTxnState().has_transaction
    for bad in ('{"producer_id": 1}', "[1, 2]", '{"producer_id": "1", "epoch": 0}'):
        with pytest.raises(ValueError):
            PreparedTxnState.from_json(bad)


def test_producer_configuration_checks() -> None:
    assert Producer("127.0.0.1:1").idempotent  # on by default with acks=-1
    assert not Producer("127.0.0.1:1", acks=1).idempotent  # as the Java client defaults
    assert Producer("127.0.0.1:1", acks=1).max_in_flight == 1
    with pytest.raises(ValueError, match="acks=-1"):
        Producer("127.0.0.1:1", acks=0, enable_idempotence=True)
    with pytest.raises(ValueError, match="idempotent"):
        Producer("127.0.0.1:1", transactional_id="t", enable_idempotence=False)
    with pytest.raises(ValueError, match="max_in_flight"):
        Producer("127.0.0.1:1", max_in_flight_per_partition=6)
    with pytest.raises(ValueError, match="max_in_flight"):
        Producer("127.0.0.1:1", acks=1, max_in_flight_per_partition=2)
    with pytest.raises(ValueError, match="threshold"):
        Producer("127.0.0.1:1", sequence_overflow_threshold=0)
    with pytest.raises(ValueError, match="transaction_version"):
        Producer("127.0.0.1:1", transactional_id="t", transaction_version=3)


def test_sync_facade_maps_kafka_property_names() -> None:
    assert producer_options(
        {
            "bootstrap.servers": "127.0.0.1:9092",
            "acks": "all",
            "linger.ms": "7",
            "enable.idempotence": "true",
            "transactional.id": "t",
            "transaction.version": 1,
            "sequence.overflow.threshold": 99,
        }
    ) == {
        "bootstrap_servers": "127.0.0.1:9092",
        "acks": -1,
        "linger_ms": 7,
        "enable_idempotence": True,
        "transactional_id": "t",
        "transaction_version": 1,
        "sequence_overflow_threshold": 99,
    }
    with pytest.raises(ValueError, match="unknown producer property"):
        producer_options({"bootstrap.servers": "x", "queue.buffering.max.kbytes": 1})
    with pytest.raises(ValueError, match="bad value"):
        producer_options({"bootstrap.servers": "x", "acks": "some"})
    with pytest.raises(ValueError, match="required"):
        producer_options({"acks": 1})
