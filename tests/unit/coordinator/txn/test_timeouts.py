"""The coordinator's periodic work: aborting transactions open longer than their timeout (with
an epoch bump that fences the producer) and expiring idle transactional ids."""

from __future__ import annotations

import pytest

from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.errors import ErrorCode
from tests.unit.coordinator.txn.support import NOW, PID, TIMEOUT_MS, TP_A, TP_B, init, meta

EXPIRATION_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms default

NOT_ONGOING = [s for s in TxnState if s != TxnState.ONGOING]


def test_ongoing_transaction_past_its_timeout_is_aborted_with_an_epoch_bump() -> None:
    ongoing = meta(TxnState.ONGOING, epoch=5, start_ms=NOW)
    aborting = rules.abort_if_timed_out(ongoing, NOW + TIMEOUT_MS + 1)
    assert aborting is not None
    assert aborting.state == TxnState.PREPARE_ABORT
    assert (aborting.producer_id, aborting.producer_epoch) == (PID, 6)
    assert aborting.partitions == frozenset({TP_A, TP_B})
    assert aborting.last_update_ms == NOW + TIMEOUT_MS + 1
    done = rules.complete(aborting, NOW + TIMEOUT_MS + 2)
    assert (done.state, done.producer_epoch) == (TxnState.COMPLETE_ABORT, 6)


@pytest.mark.parametrize("elapsed", [0, 1, TIMEOUT_MS - 1, TIMEOUT_MS])
def test_ongoing_transaction_within_its_timeout_is_left_alone(elapsed: int) -> None:
    ongoing = meta(TxnState.ONGOING, epoch=5, start_ms=NOW)
    assert rules.abort_if_timed_out(ongoing, NOW + elapsed) is None


@pytest.mark.parametrize("state", NOT_ONGOING)
def test_only_ongoing_transactions_time_out(state: TxnState) -> None:
    current = meta(state, epoch=5, start_ms=NOW, last_update_ms=NOW)
    assert rules.abort_if_timed_out(current, NOW + 100 * TIMEOUT_MS) is None


def test_timed_out_producer_is_fenced() -> None:
    ongoing = meta(TxnState.ONGOING, epoch=5, start_ms=NOW)
    aborting = rules.abort_if_timed_out(ongoing, NOW + TIMEOUT_MS + 1)
    assert aborting is not None
    done = rules.complete(aborting, NOW + TIMEOUT_MS + 2)
    outcome = rules.add_partitions(done, PID, 5, [TP_A], NOW + TIMEOUT_MS + 3)
    assert outcome == rules.Outcome(ErrorCode.producer_fenced)


def test_timeout_counts_from_the_first_add_not_the_last() -> None:
    opened = rules.add_partitions(meta(TxnState.EMPTY, epoch=5), PID, 5, [TP_A], NOW)
    assert opened.transition is not None
    later = rules.add_partitions(opened.transition, PID, 5, [TP_B], NOW + TIMEOUT_MS)
    assert later.transition is not None
    assert rules.abort_if_timed_out(later.transition, NOW + TIMEOUT_MS + 1) is not None


@pytest.mark.parametrize(
    "state", [TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT]
)
def test_idle_id_expires_only_after_the_expiration_time(state: TxnState) -> None:
    idle = meta(state, epoch=5, last_update_ms=NOW)
    assert not rules.expire_if_idle(idle, NOW + EXPIRATION_MS, EXPIRATION_MS)
    assert rules.expire_if_idle(idle, NOW + EXPIRATION_MS + 1, EXPIRATION_MS)


@pytest.mark.parametrize(
    "state",
    [TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.DEAD],
)
def test_ids_with_a_transaction_in_flight_never_expire(state: TxnState) -> None:
    busy = meta(state, epoch=5, last_update_ms=NOW)
    assert not rules.expire_if_idle(busy, NOW + 100 * EXPIRATION_MS, EXPIRATION_MS)


def test_any_transition_restarts_the_expiration_clock() -> None:
    idle = meta(TxnState.EMPTY, epoch=5, last_update_ms=NOW)
    outcome = init(idle, now_ms=NOW + EXPIRATION_MS)
    assert outcome.transition is not None
    assert not rules.expire_if_idle(outcome.transition, NOW + EXPIRATION_MS + 1, EXPIRATION_MS)
