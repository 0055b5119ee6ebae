# Shared by the transaction APIs: version-dependent error mapping (PROTOCOL.md).
from __future__ import annotations

from lockgate.coordinator.txn.verifier import RETRIABLE_VERIFICATION
from lockgate.protocol.errors import ErrorCode

# (defined beside the verifier whose answers it sorts; Produce maps it from here)
__all__ = ["RETRIABLE_VERIFICATION", "map_abortable", "map_fenced"]


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
