"""ListOffsets (key 2), versions 1–11.

Behaviour:
- Timestamp -1: the high watermark (read_uncommitted) or last stable offset (read_committed);
  -2: the log start offset (tiered storage's part included); -4 (earliest-local): the first
  offset on this broker's disk; -5 (latest-tiered): the last offset copied to the object store,
  -1 when none or not tiered; -6 (earliest-pending-upload): the first offset not copied yet,
  the log start when nothing is, -1 when not tiered (Kafka 4.4's answers); -3 (v7+): the
  record with the largest timestamp (local segments); any other timestamp ≥ 0: the first
  record at or after it, in the tiered segments first (their remote time index), then through
  the local time index, or offset -1 when none. -2, -5 and -6 of a tiered partition whose
  remote log this broker has not read yet (since its start, or since it leads the partition)
  read it first: until then the log start offset is the local one, and a consumer reset to
  the earliest offset would skip the whole remote history.
- CurrentLeaderEpoch (v4+) older than the leader's → FENCED_LEADER_EPOCH, newer →
  UNKNOWN_LEADER_EPOCH. Unknown partition: UNKNOWN_TOPIC_OR_PARTITION. Other negative
  timestamps: INVALID_REQUEST... answered per partition.
- Authorization: DESCRIBE on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
Version notes: v2 isolation level; v4 leader epochs; v7 max timestamp; v6+ flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import check_leader, field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.storage.object_store import ObjectStoreError
from lockgate.tiered.manager import RemoteLogManager

READ_COMMITTED = 1
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5  # Kafka's ListOffsetsRequest numbering
EARLIEST_PENDING_UPLOAD = -6
# the queries whose answer depends on the remote log's extent
REMOTE_EXTENT = frozenset({EARLIEST, LATEST_TIERED, EARLIEST_PENDING_UPLOAD})


def lookup(partition: Partition, timestamp: int, isolation: int) -> tuple[int, int]:
    """(offset, timestamp) for one ListOffsets query."""
    if timestamp == LATEST:
        committed = isolation == READ_COMMITTED
        return (partition.last_stable_offset if committed else partition.high_watermark), -1
    if timestamp == EARLIEST:
        return partition.log_start_offset, -1
    if timestamp == EARLIEST_LOCAL:  # KIP-405: the first offset on this broker's disk
        return partition.local_log_start_offset, -1
    if timestamp == EARLIEST_PENDING_UPLOAD:  # the first offset not copied yet (-1: not tiered)
        if partition.remote_end is not None:
            return max(partition.remote_end, partition.log_start_offset), -1
        return (partition.log_start_offset if partition.config.remote_storage else -1), -1
    if timestamp == LATEST_TIERED:  # the last offset in the object store, -1 for none
        return (partition.remote_end - 1 if partition.remote_end is not None else -1), -1
    if timestamp == MAX_TIMESTAMP:
        found = partition.max_timestamp_offset()
        return found if found else (-1, -1)
    if timestamp < 0:
        raise KafkaProtocolError(ErrorCode.invalid_request, f"timestamp {timestamp}")
    found = partition.offset_for_timestamp(timestamp)
    return (found[0], found[1]) if found else (-1, -1)


@handles(ApiKey.LIST_OFFSETS, 1, 11)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    isolation = field(request, "isolation_level", 0)
    topics = []
    for topic in request.topics:
        described = authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
        partitions = []
        for p in topic.partitions:
            entry: dict[str, Any] = {
                "partition_index": p.partition_index,
                "error_code": 0,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            try:
                if not described:
                    raise KafkaProtocolError(ErrorCode.topic_authorization_failed)
                partition = ctx.services.topics.get(topic.name, p.partition_index)
                if partition is None:
                    raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition)
                check_leader(partition, field(p, "current_leader_epoch", -1))
                await remote_extent_known(ctx.services.tiered, partition, p.timestamp)
                found = None
                if p.timestamp >= 0 and ctx.services.tiered is not None:
                    found = await _remote_time_lookup(ctx.services.tiered, partition, p.timestamp)
                offset, timestamp = found or lookup(partition, p.timestamp, isolation)
                entry["offset"] = offset
                entry["timestamp"] = timestamp
                entry["leader_epoch"] = partition.epoch_of(offset) if offset >= 0 else -1
                if p.timestamp == LATEST:
                    entry["leader_epoch"] = partition.leader_epoch
            except KafkaProtocolError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


async def remote_extent_known(
    tiered: RemoteLogManager | None, partition: Partition, timestamp: int
) -> None:
    """Before -2, -5 or -6 is answered for a tiered partition: its remote log read if this
    broker has not read it yet (once; a pass or a fetch would read it too, later);
    KAFKA_STORAGE_ERROR when the object store fails."""
    if tiered is None or timestamp not in REMOTE_EXTENT or not tiered.unknown(partition):
        return
    try:
        await tiered.remote_log(partition)
    except ObjectStoreError as exc:
        raise KafkaProtocolError(ErrorCode.kafka_storage_error, str(exc)) from None


async def _remote_time_lookup(
    tiered: RemoteLogManager, partition: Partition, timestamp: int
) -> tuple[int, int] | None:
    """A timestamp lookup in the tiered part of the log first (its records are older than
    the local ones); KAFKA_STORAGE_ERROR when the object store fails."""
    if not partition.config.remote_storage:
        return None
    try:
        return await tiered.offset_for_timestamp(partition, timestamp)
    except ObjectStoreError as exc:
        raise KafkaProtocolError(ErrorCode.kafka_storage_error, str(exc)) from None
