# Transaction states, their ids in the transaction log and Describe/ListTransactions names, and
# the table of legal previous states (PROTOCOL.md) that every transition is checked against.
from __future__ import annotations

import enum
from collections.abc import Mapping


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

_COMPLETE_OR_EMPTY = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})

LEGAL_PREVIOUS: Mapping[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _COMPLETE_OR_EMPTY,
    TxnState.ONGOING: _COMPLETE_OR_EMPTY | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    # Empty/Complete* only under transaction version 2 (an abort that just bumps the epoch)
    TxnState.PREPARE_ABORT: _COMPLETE_OR_EMPTY | {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE},
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _COMPLETE_OR_EMPTY,
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

PREPARING = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
COMPLETE = frozenset({TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


def is_legal(previous: TxnState, new: TxnState) -> bool:
    return previous in LEGAL_PREVIOUS[new]
