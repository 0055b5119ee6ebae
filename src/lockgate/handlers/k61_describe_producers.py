"""DescribeProducers (key 61), version 0.

Behaviour: for each partition, the producers with state there (KAFKA-12207: the latest batch
only): id, epoch, last sequence, last write time, coordinator epoch and the open
transaction's first offset (-1 if none). Unknown partition: UNKNOWN_TOPIC_OR_PARTITION; not
its leader (cluster mode): NOT_LEADER_OR_FOLLOWER.
- Authorization: READ on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    topics = []
    for topic in request.topics:
        partitions = []
        readable = authorize(ctx, Operation.READ, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            partition = ctx.services.topics.get(topic.name, index)
            if not readable:
                partitions.append(
                    {
                        "partition_index": index,
                        "error_code": ErrorCode.topic_authorization_failed,
                        "error_message": None,
                        "active_producers": (),
                    }
                )
                continue
            if partition is None or not partition.is_leader:
                missing = partition is None
                partitions.append(
                    {
                        "partition_index": index,
                        "error_code": ErrorCode.unknown_topic_or_partition
                        if missing
                        else ErrorCode.not_leader_or_follower,
                        "error_message": None,
                        "active_producers": (),
                    }
                )
                continue
            producers = [
                {
                    "producer_id": entry.producer_id,
                    "producer_epoch": entry.epoch,
                    "last_sequence": entry.last_sequence,
                    "last_timestamp": entry.timestamp,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": entry.txn_first_offset,
                }
                for entry in partition.producers.entries()
            ]
            partitions.append(
                {
                    "partition_index": index,
                    "error_code": 0,
                    "error_message": None,
                    "active_producers": producers,
                }
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
