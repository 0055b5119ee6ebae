"""Issue 22, pain 3: telling a timeout abort apart from a newer instance. The timeout aborter
remembers the epoch it fenced; that producer's EndTxn(abort) and KIP-360 InitProducerId are
answered instead of fenced, until a new instance's InitProducerId clears the mark. A fenced
instance's InitProducerId never aborts the open transaction of the instance that fenced it."""

from __future__ import annotations

import pytest

from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.metadata import MAX_EPOCH, NO_EPOCH, TV2, TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.errors import ErrorCode
from tests.unit.coordinator.txn.support import (
    NOW,
    PID,
    TIMEOUT_MS,
    Allocator,
    end,
    init,
    installed,
    meta,
)

LATER = NOW + TIMEOUT_MS


def timed_out(epoch: int = 5, version: int = 0) -> TxnMetadata:
    """Aborting (PrepareAbort) after the timeout aborter fenced `epoch`."""
    ongoing = meta(TxnState.ONGOING, epoch=epoch, client_transaction_version=version)
    aborting = rules.abort_if_timed_out(ongoing, LATER)
    assert aborting is not None
    return aborting


def test_the_timeout_aborter_remembers_the_epoch_it_fenced() -> None:
    aborting = timed_out(5)
    assert (aborting.producer_epoch, aborting.last_producer_epoch) == (6, 5)
    assert rules.complete(aborting, LATER).last_producer_epoch == 5


def test_a_new_instance_s_fence_remembers_no_epoch() -> None:
    outcome = init(meta(TxnState.ONGOING, epoch=5))
    assert outcome.error == ErrorCode.concurrent_transactions
    assert installed(outcome).last_producer_epoch == NO_EPOCH


@pytest.mark.parametrize("version", [0, TV2])
def test_the_timed_out_producer_s_abort_is_answered(version: int) -> None:
    aborting = timed_out(5, version)
    assert end(aborting, PID, 5, False, version=version).error == (
        ErrorCode.concurrent_transactions
    )
    done = end(rules.complete(aborting, LATER), PID, 5, False, version=version)
    assert done.error == ErrorCode.none and done.transition is None
    if version == TV2:
        assert (done.producer_id, done.producer_epoch) == (PID, 6)  # EndTxn v5: go on with it


@pytest.mark.parametrize(
    ("version", "error"),
    [(0, ErrorCode.producer_fenced), (TV2, ErrorCode.invalid_txn_state)],  # Kafka's answers
)
def test_the_timed_out_producer_s_commit_is_refused(version: int, error: ErrorCode) -> None:
    done = rules.complete(timed_out(5, version), LATER)
    assert end(done, PID, 5, True, version=version).error == error


def test_under_tv2_a_zombie_s_abort_is_no_retry_after_a_newer_instance_s_fence() -> None:
    """The newer instance's InitProducerId fenced (epoch 6, abort written) and has not yet
    retried for its own epoch: the old instance's EndTxn(abort) under 5 is not a retry of a
    bump of its own, so it is fenced (and never handed epoch 6)."""
    fencing = installed(init(meta(TxnState.ONGOING, epoch=5, client_transaction_version=TV2)))
    fenced = rules.complete(fencing, LATER)
    assert (fenced.producer_epoch, fenced.last_producer_epoch) == (6, NO_EPOCH)
    assert end(fenced, PID, 5, False, version=TV2).error == ErrorCode.producer_fenced


def test_the_timed_out_producer_s_init_gets_the_fenced_epoch_s_successor() -> None:
    aborting = timed_out(5)
    assert init(aborting, PID, 5).error == ErrorCode.concurrent_transactions
    outcome = init(rules.complete(aborting, LATER), PID, 5)
    assert outcome.error == ErrorCode.none and outcome.transition is None
    assert (outcome.producer_id, outcome.producer_epoch) == (PID, 6)


def test_after_a_new_instance_the_timed_out_epoch_is_fenced_for_good() -> None:
    done = rules.complete(timed_out(5), LATER)
    newer = installed(init(done))  # (-1, -1): a new instance
    assert (newer.producer_epoch, newer.last_producer_epoch) == (7, NO_EPOCH)
    assert init(newer, PID, 5).error == ErrorCode.producer_fenced
    assert end(newer, PID, 5, False, version=0).error == ErrorCode.producer_fenced
    ongoing = installed(rules.add_partitions(newer, PID, 7, [("orders", 0)], LATER))
    assert end(ongoing, PID, 5, False, version=0).error == ErrorCode.producer_fenced


def test_a_stale_epoch_never_aborts_the_newer_instance_s_transaction() -> None:
    ongoing = meta(TxnState.ONGOING, epoch=7)
    for stale in (5, 6):
        outcome = init(ongoing, PID, stale)
        assert outcome == rules.Outcome(ErrorCode.producer_fenced)
    # its own epoch still may (KIP-360: the live producer bumps after an abortable error)
    assert init(ongoing, PID, 7).error == ErrorCode.concurrent_transactions


@pytest.mark.parametrize("epoch", [MAX_EPOCH - 3, MAX_EPOCH - 2])
def test_a_timeout_at_the_end_of_the_epochs_gives_a_new_producer_id(epoch: int) -> None:
    done = rules.complete(timed_out(epoch), LATER)
    outcome = init(done, PID, epoch, allocate=Allocator(77))
    if done.producer_epoch < MAX_EPOCH - 1:
        assert (outcome.producer_id, outcome.producer_epoch) == (PID, epoch + 1)
        return
    rotated = installed(outcome)
    assert (rotated.producer_id, rotated.producer_epoch) == (77, 0)
    assert (outcome.producer_id, outcome.producer_epoch) == (77, 0)
