# What the share coordinator answers for one share partition (one (group, topic, partition) of
# an InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
# DeleteShareGroupState or ReadShareGroupStateSummary request): Kafka's error code and message,
# and for reads the state. The persister (persister.py) returns these to its callers.
from __future__ import annotations

from dataclasses import dataclass

from lockgate.coordinator.share.records import StateBatch
from lockgate.protocol.errors import ErrorCode

UNINITIALIZED_START_OFFSET = -1
UNINITIALIZED_DELIVERY_COMPLETE_COUNT = -1
DEFAULT_EPOCH = 0


@dataclass(frozen=True, slots=True)
class StateResult:
    """The answer of Initialize, Write and Delete."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ReadResult:
    """ReadShareGroupState's answer: the share partition's state epoch, start offset and the
    delivery states of the offsets at and above it (those not listed are AVAILABLE, never
    delivered)."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    state_epoch: int = DEFAULT_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """ReadShareGroupStateSummary's answer; for a share partition with no state: start offset
    -1, delivery complete count -1, epochs 0 (no error)."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    state_epoch: int = DEFAULT_EPOCH
    leader_epoch: int = DEFAULT_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    delivery_complete_count: int = UNINITIALIZED_DELIVERY_COMPLETE_COUNT


Result = StateResult | ReadResult | SummaryResult


def failed(kind: type[Result], error: ErrorCode, message: str | None) -> Result:
    """An error answer of the kind of `kind`."""
    return kind(error=error, message=message)
