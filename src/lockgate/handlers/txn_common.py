# Shared by the transaction APIs: version-dependent error mapping (PROTOCOL.md).
from __future__ import annotations

from lockgate.protocol.errors import ErrorCode


def map_fenced(error: ErrorCode, version: int, first_fenced_version: int) -> ErrorCode:
    """PRODUCER_FENCED became an error code of its own in later versions; older clients get
    INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.producer_fenced and version < first_fenced_version:
        return ErrorCode.invalid_producer_epoch
    return error


def map_abortable(error: ErrorCode, version: int, first_abortable_version: int) -> ErrorCode:
    """TRANSACTION_ABORTABLE is only understood from a version on; older clients get
    INVALID_TXN_STATE."""
    if error == ErrorCode.transaction_abortable and version < first_abortable_version:
        return ErrorCode.invalid_txn_state
    return error


# A transaction check that may pass on another try (the coordinator is busy, loading, moving
# or away): Produce answers NOT_ENOUGH_REPLICAS, TxnOffsetCommit COORDINATOR_NOT_AVAILABLE,
# both retried by every client version.
RETRIABLE_VERIFICATION = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.request_timed_out,
    }
)
