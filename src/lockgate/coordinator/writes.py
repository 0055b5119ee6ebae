# What a coordinator answers when a write to its internal partition fails. The writes
# themselves go through the partition writer (replication/writer.py) with acks=all: on a
# single node a record is committed once durable, in a cluster once the ISR has it too, so
# that a coordinator elected after a failover reads every decision answered.
from __future__ import annotations

from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

# failures a caller catches around a coordinator write
WriteFailure = (OSError, KafkaProtocolError)

# Kafka's mapping of a failed coordinator append: a replication problem is passing
# (COORDINATOR_NOT_AVAILABLE, retried where it is); anything else means this broker may no
# longer be the coordinator (clients look for it again)
_NOT_AVAILABLE = frozenset({
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out,
    ErrorCode.unknown_topic_or_partition,
})  # fmt: skip


def write_error(exc: BaseException, storage: ErrorCode = ErrorCode.not_coordinator) -> ErrorCode:
    """The error a coordinator answers for a failed write; `storage`: for a local disk error."""
    if isinstance(exc, KafkaProtocolError):
        if exc.code in _NOT_AVAILABLE:
            return ErrorCode.coordinator_not_available
        return ErrorCode.not_coordinator
    return storage
