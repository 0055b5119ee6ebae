# The idempotent producer's bookkeeping without a broker: sequence numbering, the duplicate
# window, the overflow threshold (KAFKA-12207) and what each Produce error means for a batch.
from __future__ import annotations

import pytest

from lockgate.client.errors import ErrorCode
from lockgate.client.sequences import (
    DUPLICATE_WINDOW,
    SEQUENCE_LIMIT,
    Outcome,
    PartitionSequences,
    classify,
)


def test_sequences_are_contiguous_and_acknowledged_in_any_order() -> None:
    sequences = PartitionSequences()
    assert sequences.assign(3) == 0
    assert sequences.assign(2) == 3
    assert sequences.assign(1) == 5
    assert sequences.next_sequence == 6
    assert sequences.is_next_expected(0)
    assert not sequences.is_next_expected(3)

    sequences.acknowledge(3)  # an answer may come for a later batch first (another connection)
    assert sequences.last_acknowledged == 4
    sequences.acknowledge(0)
    assert sequences.last_acknowledged == 4  # never goes back
    assert list(sequences.unacknowledged) == [(5, 1)]
    assert sequences.is_next_expected(5)
    with pytest.raises(KeyError):
        sequences.acknowledge(0)


def test_forgotten_batch_leaves_a_gap_and_reset_starts_again() -> None:
    sequences = PartitionSequences()
    sequences.assign(4)
    sequences.assign(4)
    sequences.forget(0)
    assert list(sequences.unacknowledged) == [(4, 4)]
    assert not sequences.is_next_expected(4)  # the broker never saw 0-3
    sequences.reset()
    assert (sequences.next_sequence, sequences.last_acknowledged) == (0, -1)
    assert not sequences.unacknowledged
    with pytest.raises(ValueError):
        sequences.assign(0)


def test_overflow_threshold_is_inclusive() -> None:
    sequences = PartitionSequences()
    sequences.assign(8)  # 0..7
    assert sequences.fits(2, threshold=9)  # 8..9
    assert not sequences.fits(3, threshold=9)  # 8..10 passes 9
    assert sequences.fits(1)  # the real limit is 2^31-1
    sequences.next_sequence = SEQUENCE_LIMIT
    assert sequences.fits(1)
    assert not sequences.fits(2)


def test_unacknowledged_span_stays_within_the_duplicate_window() -> None:
    sequences = PartitionSequences()
    assert sequences.within_window(DUPLICATE_WINDOW + 1)  # nothing outstanding: any batch
    sequences.assign(600)  # 0..599
    assert sequences.within_window(401)  # 600..1000: a resend of 0 is 1000 behind: duplicate
    assert not sequences.within_window(402)  # 600..1001: 0 would be taken for a gap
    sequences.acknowledge(0)
    assert sequences.within_window(DUPLICATE_WINDOW + 1)


IDEMPOTENT = {"idempotent": True, "transactional": False}
TRANSACTIONAL = {"idempotent": True, "transactional": True}
PLAIN = {"idempotent": False, "transactional": False}


@pytest.mark.parametrize(
    ("code", "flags", "next_expected", "outcome"),
    [
        (ErrorCode.none, PLAIN, True, Outcome.DELIVERED),
        (ErrorCode.duplicate_sequence_number, IDEMPOTENT, True, Outcome.DELIVERED),
        (ErrorCode.duplicate_sequence_number, TRANSACTIONAL, False, Outcome.DELIVERED),
        (ErrorCode.fenced_leader_epoch, IDEMPOTENT, True, Outcome.REFRESH_AND_RETRY),
        (ErrorCode.unknown_leader_epoch, PLAIN, True, Outcome.REFRESH_AND_RETRY),
        (ErrorCode.not_leader_or_follower, TRANSACTIONAL, True, Outcome.REFRESH_AND_RETRY),
        (ErrorCode.unknown_topic_or_partition, IDEMPOTENT, True, Outcome.REFRESH_AND_RETRY),
        (ErrorCode.not_enough_replicas, IDEMPOTENT, True, Outcome.RETRY),
        (ErrorCode.request_timed_out, PLAIN, True, Outcome.RETRY),
        # the broker lost our state: a new epoch (KIP-360) for an idempotent producer...
        (ErrorCode.out_of_order_sequence_number, IDEMPOTENT, True, Outcome.RESET_SEQUENCES),
        (ErrorCode.unknown_producer_id, IDEMPOTENT, True, Outcome.RESET_SEQUENCES),
        # ...but only an earlier batch missing when the batch is not the next expected one
        (ErrorCode.out_of_order_sequence_number, IDEMPOTENT, False, Outcome.RETRY),
        (ErrorCode.unknown_producer_id, TRANSACTIONAL, False, Outcome.RETRY),
        # inside a transaction no bump is possible: the transaction must abort
        (ErrorCode.out_of_order_sequence_number, TRANSACTIONAL, True, Outcome.ABORTABLE),
        (ErrorCode.invalid_producer_epoch, TRANSACTIONAL, True, Outcome.FATAL),
        (ErrorCode.producer_fenced, TRANSACTIONAL, False, Outcome.FATAL),
        (ErrorCode.invalid_producer_epoch, IDEMPOTENT, True, Outcome.RESET_SEQUENCES),
        (ErrorCode.transaction_abortable, TRANSACTIONAL, True, Outcome.ABORTABLE),
        (ErrorCode.invalid_txn_state, TRANSACTIONAL, True, Outcome.ABORTABLE),
        (ErrorCode.message_too_large, IDEMPOTENT, True, Outcome.FAILED),
        (ErrorCode.message_too_large, TRANSACTIONAL, True, Outcome.ABORTABLE),
        (ErrorCode.corrupt_message, PLAIN, True, Outcome.RETRY),  # Kafka calls it retriable
        (ErrorCode.invalid_record, PLAIN, True, Outcome.FAILED),
        (9999, PLAIN, True, Outcome.FAILED),  # a code from a newer broker
    ],
)
def test_classify(code: int, flags: dict[str, bool], next_expected: bool, outcome: Outcome) -> None:
    assert classify(code, next_expected=next_expected, **flags) is outcome
