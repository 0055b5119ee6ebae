"""The worked state sequences of the KIP-939 reference, step by step: the coordinator state
(ProducerId, ProducerEpoch, PrevProducerId, NextProducerId, NextProducerEpoch) and the answer
after every step.

One deviation from the reference text: in the crash loop it shows NextProducerEpoch=MAX in
the state while answering Epoch=MAX-1; lockgate stores what it answers (MAX-1), because an
epoch of MAX is never handed to a client (only markers may carry it)."""

from __future__ import annotations

from collections.abc import Iterator

from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.metadata import MAX_EPOCH, TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.errors import ErrorCode

MAX = MAX_EPOCH
TXN = "external-tm"
TIMEOUT = 60_000


def ids(*values: int) -> Iterator[int]:
    yield from values


def state(meta: TxnMetadata) -> tuple[TxnState, int, int, int, int, int]:
    return (
        meta.state,
        meta.producer_id,
        meta.producer_epoch,
        meta.prev_producer_id,
        meta.next_producer_id,
        meta.next_producer_epoch,
    )


def apply(outcome: rules.Outcome, meta: TxnMetadata) -> TxnMetadata:
    assert outcome.error == ErrorCode.none, outcome.error
    return outcome.transition if outcome.transition is not None else meta


def start(epoch_before_init: int) -> TxnMetadata:
    return TxnMetadata(TXN, 42, epoch_before_init, TIMEOUT, TxnState.COMPLETE_COMMIT)


def test_vanilla_kip890_transaction_with_epoch_overflow() -> None:
    allocate = ids(85).__next__
    meta = start(MAX - 2)
    # InitProducerId(false)
    out = rules.init_producer_id(meta, TXN, TIMEOUT, -1, -1, 1, 900_000, allocate)
    meta = apply(out, meta)
    assert state(meta) == (TxnState.EMPTY, 42, MAX - 1, -1, -1, -1)
    assert (
        out.producer_id,
        out.producer_epoch,
        out.ongoing_producer_id,
        out.ongoing_producer_epoch,
    ) == (42, MAX - 1, -1, -1)
    # AddPartitionsToTxn
    meta = apply(rules.add_partitions(meta, 42, MAX - 1, [("t", 0)], 2), meta)
    assert state(meta) == (TxnState.ONGOING, 42, MAX - 1, -1, -1, -1)
    # Commit
    out = rules.end_txn(meta, 42, MAX - 1, True, 3, 2, allocate)
    meta = apply(out, meta)
    assert state(meta) == (TxnState.PREPARE_COMMIT, 42, MAX, -1, 85, 0)
    assert (out.producer_id, out.producer_epoch) == (85, 0)
    # markers written, then CompleteCommit
    meta = rules.complete(meta, 4)
    assert state(meta) == (TxnState.COMPLETE_COMMIT, 85, 0, 42, -1, -1)
    # the client's retry of the commit with the old id is recognised
    retry = rules.end_txn(meta, 42, MAX - 1, True, 5, 2, allocate)
    assert (retry.error, retry.transition, retry.producer_id, retry.producer_epoch) == (
        ErrorCode.none,
        None,
        85,
        0,
    )


def test_2pc_transaction_with_two_epoch_overflows() -> None:
    allocate = ids(73, 85).__next__
    meta = start(MAX - 2)
    out = rules.init_producer_id(meta, TXN, TIMEOUT, -1, -1, 1, 900_000, allocate, enable_2pc=True)
    meta = apply(out, meta)
    assert state(meta) == (TxnState.EMPTY, 42, MAX - 1, -1, -1, -1)
    assert meta.two_phase_commit
    meta = apply(rules.add_partitions(meta, 42, MAX - 1, [("t", 0), ("t", 1)], 2), meta)
    assert state(meta) == (TxnState.ONGOING, 42, MAX - 1, -1, -1, -1)
    # (prepared on the client, client crashed) InitProducerId(keepPreparedTxn=true)
    out = rules.init_producer_id(meta, TXN, TIMEOUT, -1, -1, 3, 900_000, allocate, True, True)
    meta = apply(out, meta)
    assert state(meta) == (TxnState.ONGOING, 42, MAX - 1, -1, 73, 0)
    assert (
        out.producer_id,
        out.producer_epoch,
        out.ongoing_producer_id,
        out.ongoing_producer_epoch,
    ) == (73, 0, 42, MAX - 1)
    # crash again
    out = rules.init_producer_id(meta, TXN, TIMEOUT, -1, -1, 4, 900_000, allocate, True, True)
    meta = apply(out, meta)
    assert state(meta) == (TxnState.ONGOING, 42, MAX - 1, -1, 73, 1)
    assert (out.producer_id, out.producer_epoch) == (73, 1)
    # a crash loop drives NextProducerEpoch up to MAX-1
    for expected in range(2, MAX):
        out = rules.init_producer_id(meta, TXN, TIMEOUT, -1, -1, 5, 900_000, allocate, True, True)
        meta = apply(out, meta)
        assert (out.producer_id, out.producer_epoch) == (73, expected)
    assert state(meta) == (TxnState.ONGOING, 42, MAX - 1, -1, 73, MAX - 1)
    assert (out.ongoing_producer_id, out.ongoing_producer_epoch) == (42, MAX - 1)
    # the transaction is never aborted by the timeout task: only the external manager decides
    assert rules.abort_if_timed_out(meta, 10**12) is None
    # Commit with the latest id/epoch: three distinct producer ids in PrepareCommit
    out = rules.end_txn(meta, 73, MAX - 1, True, 6, 2, allocate)
    meta = apply(out, meta)
    assert state(meta) == (TxnState.PREPARE_COMMIT, 42, MAX, 73, 85, 0)
    assert (out.producer_id, out.producer_epoch) == (85, 0)
    meta = rules.complete(meta, 7)
    assert state(meta) == (TxnState.COMPLETE_COMMIT, 85, 0, 73, -1, -1)
    retry = rules.end_txn(meta, 73, MAX - 1, True, 8, 2, allocate)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, 85, 0)


def test_next_producer_epoch_overflow_allocates_a_new_next_id() -> None:
    allocate = ids(73).__next__
    meta = TxnMetadata(TXN, 42, 5, TIMEOUT, TxnState.ONGOING, frozenset({("t", 0)}), 1, 1)
    meta = apply(
        rules.init_producer_id(meta, TXN, TIMEOUT, -1, -1, 2, 900_000, allocate, True, True), meta
    )
    assert (meta.next_producer_id, meta.next_producer_epoch) == (42, 6)
    meta = TxnMetadata(
        TXN,
        42,
        5,
        TIMEOUT,
        TxnState.ONGOING,
        frozenset({("t", 0)}),
        1,
        1,
        next_producer_id=73,
        next_producer_epoch=MAX - 1,
    )
    out = rules.init_producer_id(meta, TXN, TIMEOUT, -1, -1, 2, 900_000, allocate, True, True)
    meta = apply(out, meta)
    assert (meta.next_producer_id, meta.next_producer_epoch) == (73, 0)
    assert meta.next_producer_id != 42 and meta.producer_id == 42 and meta.producer_epoch == 5


def test_keep_prepared_without_an_open_transaction_answers_minus_one() -> None:
    meta = start(3)
    out = rules.init_producer_id(meta, TXN, TIMEOUT, -1, -1, 1, 900_000, ids().__next__, True, True)
    assert out.error == ErrorCode.none
    assert (out.producer_id, out.producer_epoch) == (42, 4)
    assert (out.ongoing_producer_id, out.ongoing_producer_epoch) == (-1, -1)


def test_completing_a_kept_transaction_with_a_stale_pair_is_fenced() -> None:
    meta = TxnMetadata(
        TXN,
        42,
        5,
        TIMEOUT,
        TxnState.ONGOING,
        frozenset({("t", 0)}),
        1,
        1,
        next_producer_id=42,
        next_producer_epoch=8,
    )
    assert rules.end_txn(meta, 42, 7, True, 2, 2, ids().__next__).error == ErrorCode.producer_fenced
    assert (
        rules.end_txn(meta, 99, 8, True, 2, 2, ids().__next__).error
        == ErrorCode.invalid_producer_id_mapping
    )
    out = rules.end_txn(meta, 42, 8, False, 2, 2, ids().__next__)
    assert out.transition is not None
    assert (out.transition.state, out.transition.producer_epoch, out.producer_epoch) == (
        TxnState.PREPARE_ABORT,
        6,
        9,
    )
