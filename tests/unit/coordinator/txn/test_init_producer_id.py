"""InitProducerId rules (KIP-98, KIP-360): new ids, new-instance fencing, live epoch bumps and
their retries, open transactions fenced and aborted, epoch exhaustion, argument errors."""

from __future__ import annotations

import pytest

from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.metadata import NO_EPOCH, NO_PRODUCER_ID
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.errors import ErrorCode
from tests.unit.coordinator.txn.support import (
    MAX,
    MAX_TIMEOUT_MS,
    NOW,
    PID,
    TIMEOUT_MS,
    TP_A,
    TP_B,
    TXN_ID,
    Allocator,
    init,
    installed,
    meta,
)

IDLE = [TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT]
PREPARING = [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT]


# -- a transactional id the coordinator does not know --


@pytest.mark.parametrize("known_as_dead", [False, True])
def test_new_transactional_id_gets_a_fresh_producer_id_at_epoch_zero(known_as_dead: bool) -> None:
    allocate = Allocator(7001)
    current = meta(TxnState.DEAD, epoch=9) if known_as_dead else None
    outcome = init(current, allocate=allocate, timeout_ms=30_000)
    assert (outcome.error, outcome.producer_id, outcome.producer_epoch) == (ErrorCode.none, 7001, 0)
    new = installed(outcome)
    assert (new.transactional_id, new.producer_id, new.producer_epoch) == (TXN_ID, 7001, 0)
    assert (new.state, new.timeout_ms, new.last_update_ms) == (TxnState.EMPTY, 30_000, NOW)
    assert new.partitions == frozenset()
    assert (new.prev_producer_id, new.next_producer_id) == (NO_PRODUCER_ID, NO_PRODUCER_ID)
    assert allocate.handed_out == [7001]
    assert not outcome.writes_markers


# -- argument errors --


@pytest.mark.parametrize(("producer_id", "epoch"), [(PID, -1), (-1, 5), (-1, 0), (0, -1)])
@pytest.mark.parametrize("known", [False, True])
def test_exactly_one_of_id_and_epoch_missing_is_an_invalid_request(
    producer_id: int, epoch: int, known: bool
) -> None:
    current = meta(TxnState.EMPTY) if known else None
    assert init(current, producer_id, epoch) == rules.Outcome(ErrorCode.invalid_request)


@pytest.mark.parametrize("timeout_ms", [0, -1, -60_000, MAX_TIMEOUT_MS + 1, 2**31 - 1])
@pytest.mark.parametrize("known", [False, True])
def test_timeout_not_positive_or_above_the_maximum_is_refused(timeout_ms: int, known: bool) -> None:
    current = meta(TxnState.EMPTY) if known else None
    outcome = init(current, timeout_ms=timeout_ms)
    assert outcome == rules.Outcome(ErrorCode.invalid_transaction_timeout)


@pytest.mark.parametrize("timeout_ms", [1, MAX_TIMEOUT_MS])
def test_timeouts_at_the_limits_are_accepted(timeout_ms: int) -> None:
    outcome = init(meta(TxnState.EMPTY, epoch=5), timeout_ms=timeout_ms)
    assert outcome.error == ErrorCode.none
    assert installed(outcome).timeout_ms == timeout_ms


# -- producer ids the coordinator does not recognise --


@pytest.mark.parametrize("state", [*IDLE, TxnState.ONGOING, *PREPARING])
def test_producer_id_matching_neither_current_nor_previous_is_fenced(state: TxnState) -> None:
    current = meta(state, epoch=5, prev_producer_id=PID - 1)
    assert init(current, PID + 1, 5) == rules.Outcome(ErrorCode.producer_fenced)


# -- preparing: the client must come back later --


@pytest.mark.parametrize("state", PREPARING)
@pytest.mark.parametrize(("producer_id", "epoch"), [(-1, -1), (PID, 5)])
def test_while_preparing_the_answer_is_concurrent_transactions(
    state: TxnState, producer_id: int, epoch: int
) -> None:
    outcome = init(meta(state, epoch=5), producer_id, epoch)
    assert outcome == rules.Outcome(ErrorCode.concurrent_transactions)


# -- idle: bump the epoch --


@pytest.mark.parametrize("state", IDLE)
def test_new_instance_fences_the_old_one_by_bumping_the_epoch(state: TxnState) -> None:
    current = meta(state, epoch=5, client_transaction_version=2)
    outcome = init(current, timeout_ms=45_000, now_ms=NOW + 9)
    assert (outcome.error, outcome.producer_id, outcome.producer_epoch) == (ErrorCode.none, PID, 6)
    new = installed(outcome)
    assert (new.state, new.producer_id, new.producer_epoch) == (TxnState.EMPTY, PID, 6)
    assert (new.timeout_ms, new.last_update_ms, new.start_ms) == (45_000, NOW + 9, -1)
    assert new.partitions == frozenset()
    assert (new.prev_producer_id, new.next_producer_id, new.next_producer_epoch) == (-1, -1, -1)


@pytest.mark.parametrize("state", IDLE)
def test_live_producer_bumps_its_epoch(state: TxnState) -> None:
    outcome = init(meta(state, epoch=5), PID, 5)
    assert (outcome.error, outcome.producer_id, outcome.producer_epoch) == (ErrorCode.none, PID, 6)
    assert installed(outcome).state == TxnState.EMPTY


@pytest.mark.parametrize("state", IDLE)
def test_retry_with_the_epoch_before_the_bump_gets_the_same_answer_without_a_second_bump(
    state: TxnState,
) -> None:
    first = init(meta(state, epoch=5), PID, 5)
    after = installed(first)
    retry = init(after, PID, 5, now_ms=NOW + 50)
    assert retry == rules.Outcome(ErrorCode.none, None, PID, 6)
    again = init(after, PID, 5, now_ms=NOW + 90)
    assert again == retry


def test_a_bump_after_the_retry_window_bumps_again() -> None:
    after = installed(init(meta(TxnState.EMPTY, epoch=5), PID, 5))
    outcome = init(after, PID, 6)
    assert (outcome.producer_id, outcome.producer_epoch) == (PID, 7)
    assert installed(outcome).producer_epoch == 7


@pytest.mark.parametrize("epoch", [0, 4, 7, MAX - 1])
def test_live_producer_with_an_epoch_that_is_neither_current_nor_last_is_fenced(epoch: int) -> None:
    after = installed(init(meta(TxnState.EMPTY, epoch=5), PID, 5))  # now epoch 6, last 5
    assert init(after, PID, epoch) == rules.Outcome(ErrorCode.producer_fenced)


def test_fenced_instance_cannot_pass_its_old_epoch_off_as_a_retry() -> None:
    """A (-1, -1) InitProducerId comes from a new instance: the epoch before it belongs to the
    instance being fenced, so a later KIP-360 bump from that zombie (with its own epoch) must
    be fenced instead of being handed the new instance's epoch (Kafka records no last epoch
    for a new instance)."""
    zombie_epoch = 5
    after = installed(init(meta(TxnState.EMPTY, epoch=zombie_epoch)))  # new instance: epoch 6
    assert after.producer_epoch == 6
    outcome = init(after, PID, zombie_epoch)
    assert outcome == rules.Outcome(ErrorCode.producer_fenced)


def test_previous_producer_id_with_an_unexhausted_epoch_is_fenced() -> None:
    """After a rotation, PrevProducerId is recognised only for a retry from the exhausted epoch
    (Kafka's rule); an older instance of that id must not abort the new id's transaction."""
    rotated = meta(TxnState.ONGOING, producer_id=7001, epoch=0, prev_producer_id=PID)
    assert init(rotated, PID, 17) == rules.Outcome(ErrorCode.producer_fenced)


# -- an open transaction: fence it and abort it --


@pytest.mark.parametrize(("producer_id", "epoch"), [(-1, -1), (PID, 5)])
def test_ongoing_transaction_is_fenced_and_aborted(producer_id: int, epoch: int) -> None:
    current = meta(TxnState.ONGOING, epoch=5)
    outcome = init(current, producer_id, epoch, now_ms=NOW + 3)
    assert outcome.error == ErrorCode.concurrent_transactions
    assert (outcome.producer_id, outcome.producer_epoch) == (NO_PRODUCER_ID, NO_EPOCH)
    aborting = installed(outcome)
    assert aborting.state == TxnState.PREPARE_ABORT
    assert (aborting.producer_id, aborting.producer_epoch) == (PID, 6)  # markers fence epoch 5
    assert aborting.partitions == frozenset({TP_A, TP_B})  # where the abort markers go
    assert aborting.last_update_ms == NOW + 3
    assert outcome.writes_markers


def test_after_the_fencing_abort_the_retry_gets_a_new_epoch() -> None:
    aborting = installed(init(meta(TxnState.ONGOING, epoch=5)))
    aborted = rules.complete(aborting, NOW + 10)
    assert (aborted.state, aborted.producer_epoch) == (TxnState.COMPLETE_ABORT, 6)
    assert aborted.partitions == frozenset()
    retry = init(aborted, now_ms=NOW + 20)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (ErrorCode.none, PID, 7)
    assert installed(retry).state == TxnState.EMPTY


# -- epoch exhaustion --


def test_epoch_below_the_limit_is_bumped_in_place() -> None:
    outcome = init(meta(TxnState.EMPTY, epoch=MAX - 2))
    assert (outcome.producer_id, outcome.producer_epoch) == (PID, MAX - 1)
    assert installed(outcome).prev_producer_id == NO_PRODUCER_ID


@pytest.mark.parametrize("state", IDLE)
@pytest.mark.parametrize("epoch", [MAX - 1, MAX])
def test_epoch_exhaustion_allocates_a_new_producer_id_at_epoch_zero(
    state: TxnState, epoch: int
) -> None:
    allocate = Allocator(7001)
    outcome = init(meta(state, epoch=epoch), allocate=allocate)
    assert (outcome.error, outcome.producer_id, outcome.producer_epoch) == (ErrorCode.none, 7001, 0)
    new = installed(outcome)
    assert (new.state, new.producer_id, new.producer_epoch) == (TxnState.EMPTY, 7001, 0)
    assert new.prev_producer_id == PID
    assert allocate.handed_out == [7001]


def test_retry_after_a_rotation_is_recognised_by_the_previous_producer_id() -> None:
    rotated = installed(
        init(meta(TxnState.EMPTY, epoch=MAX - 1), PID, MAX - 1, allocate=Allocator(7001))
    )
    retry = init(rotated, PID, MAX - 1)  # the answer (7001, 0) was lost
    assert retry == rules.Outcome(ErrorCode.none, None, 7001, 0)
    live = init(rotated, 7001, 0)  # the new id bumps as usual
    assert (live.producer_id, live.producer_epoch) == (7001, 1)
    assert installed(live).prev_producer_id == NO_PRODUCER_ID


def test_fencing_an_open_transaction_at_the_last_epoch_rotates_on_the_retry() -> None:
    aborting = installed(init(meta(TxnState.ONGOING, epoch=MAX - 1)))
    assert aborting.producer_epoch == MAX  # only ever used for the abort markers
    retry = init(rules.complete(aborting, NOW + 1), allocate=Allocator(7001))
    assert (retry.producer_id, retry.producer_epoch) == (7001, 0)
    assert installed(retry).prev_producer_id == PID


def test_timeout_is_taken_from_each_request() -> None:
    outcome = init(meta(TxnState.EMPTY, epoch=1), timeout_ms=TIMEOUT_MS + 1)
    assert installed(outcome).timeout_ms == TIMEOUT_MS + 1


def test_previous_producer_id_is_forgotten_once_the_new_id_starts_a_transaction() -> None:
    """PrevProducerId only covers the retry right after a rotation (Kafka keeps it for one
    transition). Once the new id has opened a transaction, even the exhausted epoch of the
    old id belongs to a fenced instance and must not abort that transaction."""
    rotated = installed(init(meta(TxnState.EMPTY, epoch=MAX - 1), allocate=Allocator(7001)))
    assert (rotated.producer_id, rotated.prev_producer_id) == (7001, PID)
    opened = installed(rules.add_partitions(rotated, 7001, 0, [TP_A], NOW + 1))
    assert opened.prev_producer_id == NO_PRODUCER_ID
    assert init(opened, PID, MAX - 1) == rules.Outcome(ErrorCode.producer_fenced)


def test_while_preparing_the_next_producer_id_is_asked_to_wait() -> None:
    preparing = meta(
        TxnState.PREPARE_COMMIT,
        epoch=MAX,
        next_producer_id=7001,
        next_producer_epoch=0,
        client_transaction_version=2,
    )
    assert init(preparing, 7001, 0) == rules.Outcome(ErrorCode.concurrent_transactions)
