# A coordinator's writes to its internal partition, as Kafka's coordinators append: with
# acks=all. On a single node a record is committed once durable; in a cluster once the ISR has
# it too, so that a coordinator elected after a failover reads every decision answered.
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import validate_produced_batch

if TYPE_CHECKING:
    from lockgate.replication.manager import ReplicaManager
    from lockgate.server.broker import Broker

REPLICATION_TIMEOUT_S = 30.0

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
    broker: Broker, partition: Partition, batch: bytes, internal: bool = False
) -> asyncio.Future[None]:
    """Appends (synchronously: callers must not await before this, to keep their order) and
    returns the future of the batch's commit. Raises KafkaProtocolError if a cluster broker
    cannot append there (not the leader, too few replicas in sync)."""
    replicas = broker.replicas
    if replicas is not None:
        replicas.check_append(partition, -1)
    now_ms = int(time.time() * 1000)
    partition.append(bytearray(batch), validate_produced_batch(batch), now_ms, internal=internal)
    durable = broker.group_commit.appended(partition)
    if replicas is None:
        return durable
    end = partition.log_end_offset
    return asyncio.ensure_future(_replicated(replicas, partition, end, durable))


async def _replicated(
    replicas: ReplicaManager, partition: Partition, end: int, durable: asyncio.Future[None]
) -> None:
    await durable
    await replicas.replicated(partition, end, REPLICATION_TIMEOUT_S)


def write_error(exc: BaseException, storage: ErrorCode = ErrorCode.not_coordinator) -> ErrorCode:
    """The error a coordinator answers for a failed write; `storage`: for a local disk error."""
    if isinstance(exc, KafkaProtocolError):
        if exc.code in _NOT_AVAILABLE:
            return ErrorCode.coordinator_not_available
        return ErrorCode.not_coordinator
    return storage
