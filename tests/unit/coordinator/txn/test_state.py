"""Transaction states: ids, names and the table of legal previous states (PROTOCOL.md), and
TxnMetadata.to(), which must accept exactly the transitions that table allows."""

from __future__ import annotations

import itertools

import pytest

from lockgate.coordinator.txn.state import LEGAL_PREVIOUS, TxnState, is_legal
from tests.unit.coordinator.txn.support import TP_C, meta

EMPTY = TxnState.EMPTY
ONGOING = TxnState.ONGOING
PREPARE_COMMIT = TxnState.PREPARE_COMMIT
PREPARE_ABORT = TxnState.PREPARE_ABORT
COMPLETE_COMMIT = TxnState.COMPLETE_COMMIT
COMPLETE_ABORT = TxnState.COMPLETE_ABORT
DEAD = TxnState.DEAD
PREPARE_EPOCH_FENCE = TxnState.PREPARE_EPOCH_FENCE

# PROTOCOL.md, "Transaction coordinator", copied by hand rather than derived from the code.
EXPECTED_PREVIOUS: dict[TxnState, set[TxnState]] = {
    EMPTY: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    ONGOING: {ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_COMMIT: {ONGOING},
    PREPARE_ABORT: {ONGOING, PREPARE_EPOCH_FENCE, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    COMPLETE_COMMIT: {PREPARE_COMMIT},
    COMPLETE_ABORT: {PREPARE_ABORT},
    DEAD: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_EPOCH_FENCE: {ONGOING},
}

ALL_PAIRS = list(itertools.product(TxnState, TxnState))


def test_state_ids_and_names_match_kafka() -> None:
    expected = {
        0: "Empty",
        1: "Ongoing",
        2: "PrepareCommit",
        3: "PrepareAbort",
        4: "CompleteCommit",
        5: "CompleteAbort",
        6: "Dead",
        7: "PrepareEpochFence",
    }
    assert {int(state): state.display_name for state in TxnState} == expected
    for name in expected.values():
        state = TxnState.from_name(name)
        assert state is not None and state.display_name == name
    assert TxnState.from_name("Preparing") is None


def test_table_is_the_one_in_the_protocol_notes() -> None:
    assert set(LEGAL_PREVIOUS) == set(TxnState)
    assert {state: set(previous) for state, previous in LEGAL_PREVIOUS.items()} == EXPECTED_PREVIOUS


@pytest.mark.parametrize(
    ("previous", "new"), ALL_PAIRS, ids=[f"{a.name}->{b.name}" for a, b in ALL_PAIRS]
)
def test_to_accepts_exactly_the_legal_transitions(previous: TxnState, new: TxnState) -> None:
    legal = previous in EXPECTED_PREVIOUS[new]
    assert is_legal(previous, new) == legal
    before = meta(previous)
    if legal:
        after = before.to(new, producer_epoch=before.producer_epoch + 1)
        assert after.state == new
        assert after.producer_epoch == before.producer_epoch + 1
        assert after.partitions == before.partitions  # untouched fields are carried over
        assert before.state == previous  # immutable: the old value is unchanged
    else:
        with pytest.raises(ValueError, match="illegal transition"):
            before.to(new)


def test_to_applies_several_changes_at_once() -> None:
    before = meta(EMPTY)
    after = before.to(ONGOING, partitions=frozenset({TP_C}), start_ms=7, last_update_ms=8)
    assert (after.state, after.partitions, after.start_ms, after.last_update_ms) == (
        ONGOING,
        frozenset({TP_C}),
        7,
        8,
    )
    assert after.producer_id == before.producer_id
    assert after.timeout_ms == before.timeout_ms
