# Writing COMMIT/ABORT markers to partitions this broker leads. Two callers take this one path:
# WriteTxnMarkers (another broker's transaction coordinator, or an operator's tool) and this
# broker's own coordinator, whose marker sender writes in-process to the partitions led here
# (on a single node: all of them). Every marker of a call is appended before any wait, in the
# caller's order; then each is answered once committed (durable, and in a cluster in the ISR).
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.replication.writer import PartitionWriter


@dataclass(frozen=True, slots=True)
class Marker:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    strict_epoch: bool  # transaction version 2: newer than the open transaction's epoch


def append_marker(
    writer: PartitionWriter, partition: Partition | None, marker: Marker, now_ms: int
) -> ErrorCode | asyncio.Future[None]:
    """Appends the marker as the partition's leader: the future of its commit, or the error
    it gets with nothing written (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, the
    log's epoch checks, the ISR's, KAFKA_STORAGE_ERROR)."""
    try:
        if partition is None:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition)
        if not partition.is_leader:
            raise KafkaProtocolError(ErrorCode.not_leader_or_follower)
        return writer.write_marker(
            partition,
            marker.producer_id,
            marker.producer_epoch,
            marker.commit,
            marker.coordinator_epoch,
            now_ms,
            marker.strict_epoch,
        )
    except KafkaProtocolError as exc:
        return exc.code
    except OSError:  # storage's contract: nothing of this marker was written
        return ErrorCode.kafka_storage_error


async def commit_errors(commits: Sequence[asyncio.Future[None]]) -> list[ErrorCode]:
    """Each appended marker's answer once committed: NONE, KAFKA_STORAGE_ERROR for a failed
    flush, or the ISR's error (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT ...)."""
    outcomes = await asyncio.gather(*commits, return_exceptions=True)
    errors = []
    for outcome in outcomes:
        if isinstance(outcome, OSError):
            errors.append(ErrorCode.kafka_storage_error)
        elif isinstance(outcome, KafkaProtocolError):
            errors.append(outcome.code)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            errors.append(ErrorCode.none)
    return errors
