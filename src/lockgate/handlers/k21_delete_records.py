"""DeleteRecords (key 21), versions 0–2.

Behaviour:
- Moves each partition's log start offset to the given offset (-1: the high watermark, KIP-107)
  and answers the new low watermark; segments entirely below it are deleted. An offset below
  the current start changes nothing. Producer state stays: it outlives the data.
- Above the high watermark or negative (other than -1): OFFSET_OUT_OF_RANGE. Unknown topic or
  partition: UNKNOWN_TOPIC_OR_PARTITION. An internal topic: INVALID_TOPIC_EXCEPTION, as Kafka
  (its records are the coordinators' state). The new start cannot be persisted:
  KAFKA_STORAGE_ERROR, nothing changed. Not the partition's leader (cluster mode):
  NOT_LEADER_OR_FOLLOWER.
- Authorization: DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
Version notes: v2 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import NO_EPOCH, check_leader
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.log.clock import now_ms
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


def _delete(ctx: RequestContext, topic: str, index: int, offset: int) -> int:
    record = ctx.services.topics.topics.get(topic)
    partition = ctx.services.topics.get(topic, index)
    if record is None or partition is None:
        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition)
    if record.internal:
        raise KafkaProtocolError(ErrorCode.invalid_topic_exception, f"{topic} is internal")
    check_leader(partition, NO_EPOCH)
    try:
        return partition.delete_records(offset, now_ms())
    except OSError as exc:
        raise KafkaProtocolError(ErrorCode.kafka_storage_error, str(exc)) from exc


@handles(ApiKey.DELETE_RECORDS, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    topics = []
    for topic in request.topics:
        allowed = authorize(ctx, Operation.DELETE, ResourceType.TOPIC, topic.name)
        results = []
        for partition in topic.partitions:
            entry: dict[str, Any] = {
                "partition_index": partition.partition_index,
                "low_watermark": -1,
                "error_code": 0,
            }
            try:
                if not allowed:
                    raise KafkaProtocolError(ErrorCode.topic_authorization_failed)
                entry["low_watermark"] = _delete(
                    ctx, topic.name, partition.partition_index, partition.offset
                )
            except KafkaProtocolError as exc:
                entry["error_code"] = exc.code
            results.append(entry)
        topics.append({"name": topic.name, "partitions": results})
    return {"throttle_time": 0, "topics": topics}
