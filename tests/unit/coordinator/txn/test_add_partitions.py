"""AddPartitionsToTxn / AddOffsetsToTxn and KIP-890 produce verification at the rule level."""

from __future__ import annotations

import pytest

from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.metadata import TopicPartition, TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.errors import ErrorCode
from tests.unit.coordinator.txn.support import (
    MAX,
    NOW,
    PID,
    TP_A,
    TP_B,
    TP_C,
    Allocator,
    end,
    installed,
    meta,
)

IDLE = [TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT]


def add(
    current: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    partitions: list[TopicPartition],
    now_ms: int = NOW,
    version: int = 0,
) -> rules.Outcome:
    return rules.add_partitions(current, producer_id, epoch, partitions, now_ms, version)


def test_unknown_transactional_id_is_an_invalid_mapping() -> None:
    assert add(None, PID, 0, [TP_A]) == rules.Outcome(ErrorCode.invalid_producer_id_mapping)


@pytest.mark.parametrize("state", [*IDLE, TxnState.ONGOING, TxnState.PREPARE_COMMIT])
def test_other_producer_id_is_an_invalid_mapping(state: TxnState) -> None:
    outcome = add(meta(state, epoch=5), PID + 1, 5, [TP_A])
    assert outcome == rules.Outcome(ErrorCode.invalid_producer_id_mapping)


@pytest.mark.parametrize("state", [*IDLE, TxnState.ONGOING])
@pytest.mark.parametrize("epoch", [4, 6])
def test_other_epoch_is_fenced(state: TxnState, epoch: int) -> None:
    assert add(meta(state, epoch=5), PID, epoch, [TP_A]) == rules.Outcome(ErrorCode.producer_fenced)


@pytest.mark.parametrize("state", [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT])
def test_while_preparing_the_answer_is_concurrent_transactions(state: TxnState) -> None:
    outcome = add(meta(state, epoch=5), PID, 5, [TP_C])
    assert outcome == rules.Outcome(ErrorCode.concurrent_transactions)


def test_dead_id_is_an_invalid_mapping() -> None:
    outcome = add(meta(TxnState.DEAD, epoch=5), PID, 5, [TP_A])
    assert outcome == rules.Outcome(ErrorCode.invalid_producer_id_mapping)


@pytest.mark.parametrize("state", IDLE)
def test_first_add_opens_the_transaction_and_sets_its_start_time(state: TxnState) -> None:
    outcome = add(meta(state, epoch=5), PID, 5, [TP_A, TP_B], now_ms=NOW + 7)
    assert outcome.error == ErrorCode.none
    new = installed(outcome)
    assert new.state == TxnState.ONGOING
    assert new.partitions == frozenset({TP_A, TP_B})
    assert (new.start_ms, new.last_update_ms) == (NOW + 7, NOW + 7)
    assert (new.producer_id, new.producer_epoch) == (PID, 5)
    assert not outcome.writes_markers


def test_later_adds_extend_the_set_and_keep_the_start_time() -> None:
    opened = installed(add(meta(TxnState.EMPTY, epoch=5), PID, 5, [TP_A], now_ms=NOW))
    outcome = add(opened, PID, 5, [TP_A, TP_C], now_ms=NOW + 500)
    new = installed(outcome)
    assert new.partitions == frozenset({TP_A, TP_C})
    assert (new.start_ms, new.last_update_ms) == (NOW, NOW + 500)


@pytest.mark.parametrize("wanted", [[TP_A], [TP_A, TP_B], []])
def test_partitions_already_in_the_transaction_need_no_log_write(
    wanted: list[TopicPartition],
) -> None:
    current = meta(TxnState.ONGOING, epoch=5)  # holds TP_A and TP_B
    assert add(current, PID, 5, wanted) == rules.Outcome(ErrorCode.none)


def test_transaction_version_is_remembered_and_never_lowered() -> None:
    opened = installed(add(meta(TxnState.EMPTY, epoch=5), PID, 5, [TP_A], version=2))
    assert opened.client_transaction_version == 2 and opened.tv2
    later = installed(add(opened, PID, 5, [TP_C], version=0))
    assert later.client_transaction_version == 2


@pytest.mark.parametrize("rotated", [False, True], ids=["same-id", "next-id"])
def test_id_and_epoch_handed_out_by_end_txn_v5_are_asked_to_wait_while_markers_are_written(
    rotated: bool,
) -> None:
    """TV2: EndTxn v5 answers before the markers are written. The client may at once start the
    next transaction with the id/epoch it was given; while the coordinator is still preparing
    it must be told to retry (CONCURRENT_TRANSACTIONS), whether or not the epoch overflowed
    into a new producer id, never a fatal INVALID_PRODUCER_ID_MAPPING."""
    epoch = MAX - 1 if rotated else 5
    ending = end(
        meta(TxnState.ONGOING, epoch=epoch), PID, epoch, True, version=2, allocate=Allocator(7001)
    )
    preparing = installed(ending)
    assert preparing.state == TxnState.PREPARE_COMMIT
    next_pair = (ending.producer_id, ending.producer_epoch)
    assert next_pair == ((7001, 0) if rotated else (PID, 6))
    outcome = add(preparing, *next_pair, [TP_C], version=2)
    assert outcome == rules.Outcome(ErrorCode.concurrent_transactions)
    done = rules.complete(preparing, NOW + 1)
    assert (done.producer_id, done.producer_epoch) == next_pair
    assert installed(add(done, *next_pair, [TP_C], version=2)).state == TxnState.ONGOING


# -- KIP-890 part 1: produce verification --


def test_verification_accepts_a_partition_of_the_open_transaction() -> None:
    current = meta(TxnState.ONGOING, epoch=5)
    assert rules.verify_partition(current, PID, 5, TP_A) == ErrorCode.none


def test_verification_asks_the_next_epoch_to_wait_while_markers_are_written() -> None:
    """EndTxn v5 answers with the next epoch before the markers are written; the producer's
    next batch may come first, and must be retried, not fenced."""
    preparing = meta(TxnState.PREPARE_COMMIT, epoch=5, next_producer_id=PID, next_producer_epoch=6)
    assert rules.verify_partition(preparing, PID, 6, TP_A) == ErrorCode.concurrent_transactions
    assert rules.verify_partition(preparing, PID, 4, TP_A) == ErrorCode.producer_fenced


@pytest.mark.parametrize(
    ("current", "producer_id", "epoch", "partition", "expected"),
    [
        (None, PID, 5, TP_A, ErrorCode.invalid_producer_id_mapping),
        (meta(TxnState.ONGOING, epoch=5), PID + 1, 5, TP_A, ErrorCode.invalid_producer_id_mapping),
        (meta(TxnState.ONGOING, epoch=5), PID, 4, TP_A, ErrorCode.producer_fenced),
        (meta(TxnState.ONGOING, epoch=5), PID, 5, TP_C, ErrorCode.transaction_abortable),
        (meta(TxnState.EMPTY, epoch=5), PID, 5, TP_A, ErrorCode.transaction_abortable),
        (meta(TxnState.PREPARE_COMMIT, epoch=5), PID, 5, TP_A, ErrorCode.transaction_abortable),
        (meta(TxnState.COMPLETE_ABORT, epoch=5), PID, 5, TP_A, ErrorCode.transaction_abortable),
    ],
    ids=["unknown-id", "other-id", "old-epoch", "not-added", "empty", "preparing", "complete"],
)
def test_verification_refuses(
    current: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    partition: TopicPartition,
    expected: ErrorCode,
) -> None:
    assert rules.verify_partition(current, producer_id, epoch, partition) == expected
