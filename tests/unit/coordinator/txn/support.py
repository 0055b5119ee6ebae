"""Shared fixtures of the transaction-coordinator rule tests: a scripted producer-id allocator
and builders for metadata in a given state."""

from __future__ import annotations

from dataclasses import replace

from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.metadata import MAX_EPOCH, TopicPartition, TxnMetadata
from lockgate.coordinator.txn.state import TxnState

TXN_ID = "payments-1"
PID = 42
TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms default: 15 min
NOW = 1_000_000
MAX = MAX_EPOCH  # Java's Short.MAX_VALUE
TP_A: TopicPartition = ("orders", 0)
TP_B: TopicPartition = ("orders", 1)
TP_C: TopicPartition = ("audit", 3)


class Allocator:
    """Hands out the given producer ids in order; fails the test on an unexpected call."""

    def __init__(self, *ids: int) -> None:
        self._ids = list(ids)
        self.handed_out: list[int] = []

    def __call__(self) -> int:
        assert self._ids, "the rules allocated a producer id they should not have"
        self.handed_out.append(self._ids.pop(0))
        return self.handed_out[-1]


def no_allocation() -> int:
    raise AssertionError("the rules allocated a producer id they should not have")


def meta(
    state: TxnState,
    epoch: int = 5,
    producer_id: int = PID,
    partitions: frozenset[TopicPartition] | None = None,
    **changes: object,
) -> TxnMetadata:
    """Metadata as it would be installed in `state`: partitions and a start time only while a
    transaction is open or being ended."""
    open_txn = state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
    if partitions is None:
        partitions = frozenset({TP_A, TP_B}) if open_txn else frozenset()
    base = TxnMetadata(
        TXN_ID,
        producer_id,
        epoch,
        TIMEOUT_MS,
        state,
        partitions,
        start_ms=NOW - 5_000 if open_txn else -1,
        last_update_ms=NOW - 1_000,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def init(
    current: TxnMetadata | None,
    producer_id: int = -1,
    epoch: int = -1,
    *,
    allocate: rules.AllocateId = no_allocation,
    timeout_ms: int = TIMEOUT_MS,
    now_ms: int = NOW,
) -> rules.Outcome:
    return rules.init_producer_id(
        current, TXN_ID, timeout_ms, producer_id, epoch, now_ms, MAX_TIMEOUT_MS, allocate
    )


def end(
    current: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    commit: bool,
    *,
    version: int,
    allocate: rules.AllocateId = no_allocation,
    now_ms: int = NOW,
) -> rules.Outcome:
    return rules.end_txn(current, producer_id, epoch, commit, now_ms, version, allocate)


def installed(outcome: rules.Outcome) -> TxnMetadata:
    """The metadata the service would install after logging the outcome's transition."""
    assert outcome.transition is not None, f"expected a transition, got {outcome}"
    return outcome.transition
