# A coordinator's writes to its internal partition, as Kafka's coordinators append: with
# acks=all, through the partition writer (replication/writer.py). On a single node a record is
# committed once durable; in a cluster once the ISR has it too, so that a coordinator elected
# after a failover reads every decision answered. Here too: which answer a failed write gives.
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

if TYPE_CHECKING:
    from lockgate.replication.writer import PartitionWriter

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


def append(
    writer: PartitionWriter, partition: Partition, batch: bytes, internal: bool = False
) -> asyncio.Future[None]:
    """Appends (synchronously: callers must not await before this, to keep their order) and
    returns the future of the batch's commit (replication/writer.py). Raises
    KafkaProtocolError if a cluster broker cannot append there (not the leader, too few
    replicas in sync)."""
    return writer.write(partition, batch, internal)


def write_error(exc: BaseException, storage: ErrorCode = ErrorCode.not_coordinator) -> ErrorCode:
    """The error a coordinator answers for a failed write; `storage`: for a local disk error."""
    if isinstance(exc, KafkaProtocolError):
        if exc.code in _NOT_AVAILABLE:
            return ErrorCode.coordinator_not_available
        return ErrorCode.not_coordinator
    return storage
