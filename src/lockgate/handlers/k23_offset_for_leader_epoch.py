"""OffsetForLeaderEpoch (key 23), versions 2–4.

Behaviour:
- For each partition, the largest leader epoch ≤ the requested one and the offset where it
  ended (the log end offset for the current epoch); an epoch older than the history gets
  epoch -1, offset -1.
- CurrentLeaderEpoch older than the leader's → FENCED_LEADER_EPOCH, newer →
  UNKNOWN_LEADER_EPOCH; unknown partition → UNKNOWN_TOPIC_OR_PARTITION.
- Authorization: a consumer needs DESCRIBE on the topic (TOPIC_AUTHORIZATION_FAILED), a
  follower (replica id >= 0) CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED).
Version notes: v0–1 are not served, like Kafka 4.0 (KIP-896); v3 replica id; v4 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import check_leader, field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    # a follower (replica id >= 0) needs CLUSTER_ACTION on the cluster, a consumer DESCRIBE
    replica = field(request, "replica_id", -1) >= 0
    cluster_ok = not replica or authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER)
    topics = []
    for topic in request.topics:
        if not cluster_ok:
            denied: ErrorCode | None = ErrorCode.cluster_authorization_failed
        elif replica or authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, topic.topic):
            denied = None
        else:
            denied = ErrorCode.topic_authorization_failed
        partitions = []
        for p in topic.partitions:
            entry: dict[str, Any] = {
                "error_code": 0,
                "partition": p.partition,
                "leader_epoch": -1,
                "end_offset": -1,
            }
            try:
                if denied is not None:
                    raise KafkaProtocolError(denied)
                partition = ctx.services.topics.get(topic.topic, p.partition)
                if partition is None:
                    raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition)
                check_leader(partition, p.current_leader_epoch)
                epoch, end = partition.epochs.end_offset_for(
                    p.leader_epoch, partition.log_end_offset
                )
                entry["leader_epoch"] = epoch
                entry["end_offset"] = end
            except KafkaProtocolError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
