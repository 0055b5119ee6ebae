"""EndTxn rules: before transaction version 2 (EndTxn < v5) and with TV2 (epoch bump on every
commit/abort, the next id/epoch in the answer, retries after a lost response, exhaustion),
and complete(), which finishes a prepared decision once its markers are durable."""

from __future__ import annotations

import pytest

from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.metadata import NO_EPOCH, NO_PRODUCER_ID, TV2
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.errors import ErrorCode
from tests.unit.coordinator.txn.support import (
    MAX,
    NOW,
    PID,
    TP_A,
    TP_B,
    Allocator,
    end,
    installed,
    meta,
)

TV1 = 0
IDLE = [TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT]
DECISIONS = pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])


def prepare_state(commit: bool) -> TxnState:
    return TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT


def complete_state(commit: bool) -> TxnState:
    return TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT


# -- shared by both versions --


@pytest.mark.parametrize("version", [TV1, TV2])
def test_unknown_transactional_id_is_an_invalid_mapping(version: int) -> None:
    outcome = end(None, PID, 0, True, version=version)
    assert outcome == rules.Outcome(ErrorCode.invalid_producer_id_mapping)


@pytest.mark.parametrize("version", [TV1, TV2])
@DECISIONS
def test_other_producer_id_is_an_invalid_mapping(version: int, commit: bool) -> None:
    outcome = end(meta(TxnState.ONGOING, epoch=5), PID + 1, 5, commit, version=version)
    assert outcome == rules.Outcome(ErrorCode.invalid_producer_id_mapping)


@pytest.mark.parametrize("version", [TV1, TV2])
@pytest.mark.parametrize("epoch", [3, 6, MAX - 1])
@DECISIONS
def test_other_epoch_is_fenced(version: int, epoch: int, commit: bool) -> None:
    outcome = end(meta(TxnState.ONGOING, epoch=5), PID, epoch, commit, version=version)
    assert outcome == rules.Outcome(ErrorCode.producer_fenced)


# -- before transaction version 2 --


@DECISIONS
def test_tv1_ongoing_moves_to_prepare_without_an_epoch_bump(commit: bool) -> None:
    outcome = end(meta(TxnState.ONGOING, epoch=5), PID, 5, commit, version=TV1, now_ms=NOW + 4)
    assert outcome.error == ErrorCode.none
    preparing = installed(outcome)
    assert preparing.state == prepare_state(commit)
    assert (preparing.producer_id, preparing.producer_epoch) == (PID, 5)
    assert preparing.partitions == frozenset({TP_A, TP_B})
    assert preparing.last_update_ms == NOW + 4
    assert outcome.writes_markers


@DECISIONS
def test_tv1_same_decision_again_is_success_once_complete(commit: bool) -> None:
    done = rules.complete(installed(end(meta(TxnState.ONGOING), PID, 5, commit, version=TV1)), NOW)
    assert done.state == complete_state(commit)
    assert end(done, PID, 5, commit, version=TV1) == rules.Outcome(ErrorCode.none)


@DECISIONS
def test_tv1_same_decision_again_while_preparing_is_concurrent(commit: bool) -> None:
    outcome = end(meta(prepare_state(commit), epoch=5), PID, 5, commit, version=TV1)
    assert outcome == rules.Outcome(ErrorCode.concurrent_transactions)


@pytest.mark.parametrize(
    ("state", "commit"),
    [
        (TxnState.EMPTY, True),
        (TxnState.EMPTY, False),
        (TxnState.COMPLETE_COMMIT, False),
        (TxnState.COMPLETE_ABORT, True),
        (TxnState.PREPARE_COMMIT, False),
        (TxnState.PREPARE_ABORT, True),
        (TxnState.DEAD, True),
    ],
)
def test_tv1_other_decisions_are_an_invalid_state(state: TxnState, commit: bool) -> None:
    outcome = end(meta(state, epoch=5), PID, 5, commit, version=TV1)
    assert outcome == rules.Outcome(ErrorCode.invalid_txn_state)


@DECISIONS
def test_tv1_complete_keeps_id_and_epoch_and_clears_the_transaction(commit: bool) -> None:
    preparing = installed(end(meta(TxnState.ONGOING, epoch=5), PID, 5, commit, version=TV1))
    done = rules.complete(preparing, NOW + 60)
    assert done.state == complete_state(commit)
    assert (done.producer_id, done.producer_epoch) == (PID, 5)
    assert (done.partitions, done.start_ms, done.last_update_ms) == (frozenset(), -1, NOW + 60)
    assert (done.prev_producer_id, done.next_producer_id) == (NO_PRODUCER_ID, NO_PRODUCER_ID)


# -- transaction version 2 --


@DECISIONS
def test_tv2_bumps_the_epoch_and_answers_with_the_next_one(commit: bool) -> None:
    outcome = end(meta(TxnState.ONGOING, epoch=5), PID, 5, commit, version=TV2, now_ms=NOW + 4)
    assert (outcome.error, outcome.producer_id, outcome.producer_epoch) == (ErrorCode.none, PID, 6)
    preparing = installed(outcome)
    assert preparing.state == prepare_state(commit)
    assert (preparing.producer_id, preparing.producer_epoch) == (PID, 6)  # the markers' epoch
    assert preparing.partitions == frozenset({TP_A, TP_B})
    assert preparing.client_transaction_version == TV2
    assert preparing.next_producer_id == NO_PRODUCER_ID
    done = rules.complete(preparing, NOW + 9)
    assert done.state == complete_state(commit)
    assert (done.producer_id, done.producer_epoch) == (PID, 6)
    assert (done.partitions, done.start_ms) == (frozenset(), -1)


@pytest.mark.parametrize("state", IDLE)
def test_tv2_abort_without_a_transaction_bumps_the_epoch(state: TxnState) -> None:
    outcome = end(meta(state, epoch=5), PID, 5, False, version=TV2)
    assert (outcome.error, outcome.producer_id, outcome.producer_epoch) == (ErrorCode.none, PID, 6)
    aborting = installed(outcome)
    assert (aborting.state, aborting.producer_epoch) == (TxnState.PREPARE_ABORT, 6)
    assert aborting.partitions == frozenset()  # no markers to write
    assert rules.complete(aborting, NOW).state == TxnState.COMPLETE_ABORT


@pytest.mark.parametrize("state", IDLE)
def test_tv2_commit_without_a_transaction_is_an_invalid_state(state: TxnState) -> None:
    outcome = end(meta(state, epoch=5), PID, 5, True, version=TV2)
    assert outcome == rules.Outcome(ErrorCode.invalid_txn_state)


@DECISIONS
def test_tv2_retry_after_a_lost_response_is_answered_with_success(commit: bool) -> None:
    done = rules.complete(installed(end(meta(TxnState.ONGOING), PID, 5, commit, version=TV2)), NOW)
    retry = end(done, PID, 5, commit, version=TV2)
    assert retry == rules.Outcome(ErrorCode.none, None, PID, 6)


@DECISIONS
def test_tv2_retry_while_preparing_is_concurrent(commit: bool) -> None:
    preparing = installed(end(meta(TxnState.ONGOING), PID, 5, commit, version=TV2))
    assert end(preparing, PID, 5, commit, version=TV2) == rules.Outcome(
        ErrorCode.concurrent_transactions
    )


@DECISIONS
def test_tv2_retry_with_the_other_decision_is_an_invalid_state(commit: bool) -> None:
    preparing = installed(end(meta(TxnState.ONGOING), PID, 5, commit, version=TV2))
    assert end(preparing, PID, 5, not commit, version=TV2) == rules.Outcome(
        ErrorCode.invalid_txn_state
    )
    done = rules.complete(preparing, NOW)
    assert end(done, PID, 5, not commit, version=TV2) == rules.Outcome(ErrorCode.invalid_txn_state)


@DECISIONS
def test_tv2_next_transaction_uses_the_answered_epoch(commit: bool) -> None:
    first = end(meta(TxnState.ONGOING, epoch=5), PID, 5, commit, version=TV2)
    done = rules.complete(installed(first), NOW)
    opened = installed(rules.add_partitions(done, PID, 6, [TP_A], NOW + 1, TV2))
    second = end(opened, PID, 6, commit, version=TV2)
    assert (second.producer_id, second.producer_epoch) == (PID, 7)
    assert end(opened, PID, 5, commit, version=TV2) == rules.Outcome(ErrorCode.producer_fenced)


@DECISIONS
def test_tv2_epoch_exhaustion_hands_out_the_next_producer_id(commit: bool) -> None:
    allocate = Allocator(7001)
    outcome = end(
        meta(TxnState.ONGOING, epoch=MAX - 1), PID, MAX - 1, commit, version=TV2, allocate=allocate
    )
    assert (outcome.error, outcome.producer_id, outcome.producer_epoch) == (ErrorCode.none, 7001, 0)
    preparing = installed(outcome)
    assert (preparing.producer_id, preparing.producer_epoch) == (PID, MAX)  # markers' epoch
    assert (preparing.next_producer_id, preparing.next_producer_epoch) == (7001, 0)
    assert preparing.prev_producer_id == NO_PRODUCER_ID
    assert allocate.handed_out == [7001]
    # a retry while the markers are written: wait
    assert end(preparing, PID, MAX - 1, commit, version=TV2) == rules.Outcome(
        ErrorCode.concurrent_transactions
    )
    done = rules.complete(preparing, NOW + 1)
    assert done.state == complete_state(commit)
    assert (done.producer_id, done.producer_epoch) == (7001, 0)
    assert done.prev_producer_id == PID
    assert (done.next_producer_id, done.next_producer_epoch) == (NO_PRODUCER_ID, NO_EPOCH)
    # the retry after the lost answer is recognised through PrevProducerId
    assert end(done, PID, MAX - 1, commit, version=TV2) == rules.Outcome(
        ErrorCode.none, None, 7001, 0
    )


def test_tv2_epoch_below_the_limit_is_bumped_in_place() -> None:
    outcome = end(meta(TxnState.ONGOING, epoch=MAX - 2), PID, MAX - 2, True, version=TV2)
    assert (outcome.producer_id, outcome.producer_epoch) == (PID, MAX - 1)
    assert installed(outcome).next_producer_id == NO_PRODUCER_ID


@pytest.mark.parametrize("rotated", [False, True], ids=["same-id", "next-id"])
@DECISIONS
def test_tv2_next_id_and_epoch_used_while_markers_are_written_are_asked_to_wait(
    rotated: bool, commit: bool
) -> None:
    """EndTxn v5 answers before the markers are written; a client that at once ends its next
    (empty) transaction with the answered id/epoch must be told to retry, also when that id is
    the new one of an epoch overflow."""
    epoch = MAX - 1 if rotated else 5
    ending = end(
        meta(TxnState.ONGOING, epoch=epoch), PID, epoch, True, version=TV2, allocate=Allocator(7001)
    )
    preparing = installed(ending)
    outcome = end(preparing, ending.producer_id, ending.producer_epoch, commit, version=TV2)
    assert outcome == rules.Outcome(ErrorCode.concurrent_transactions)


@pytest.mark.parametrize("zombie_epoch", [0, 100, MAX - 2])
def test_tv2_older_instance_of_the_previous_id_is_not_taken_for_a_retry(zombie_epoch: int) -> None:
    """Only the producer that committed at the exhausted epoch can be retrying; an older
    instance of the rotated-away id must not be handed the new id (Kafka: retryOnOverflow
    requires the epoch Short.MAX_VALUE - 1)."""
    done = rules.complete(
        installed(
            end(
                meta(TxnState.ONGOING, epoch=MAX - 1),
                PID,
                MAX - 1,
                True,
                version=TV2,
                allocate=Allocator(7001),
            )
        ),
        NOW,
    )
    outcome = end(done, PID, zombie_epoch, True, version=TV2)
    assert outcome.error != ErrorCode.none
    assert (outcome.producer_id, outcome.producer_epoch) == (NO_PRODUCER_ID, NO_EPOCH)


def test_tv2_producer_fenced_at_the_last_epoch_is_never_handed_that_epoch() -> None:
    """A timed-out transaction at epoch MAX-1 is aborted with the markers' epoch MAX. The
    producer's own abort then must not be taken for a retry of a TV2 bump and answered with
    epoch MAX: no epoch is left above it for the next transaction's markers."""
    ongoing = meta(TxnState.ONGOING, epoch=MAX - 1, client_transaction_version=TV2)
    aborting = rules.abort_if_timed_out(ongoing, ongoing.start_ms + ongoing.timeout_ms + 1)
    assert aborting is not None and aborting.producer_epoch == MAX
    aborted = rules.complete(aborting, NOW)
    outcome = end(aborted, PID, MAX - 1, False, version=TV2)
    assert outcome == rules.Outcome(ErrorCode.producer_fenced)
