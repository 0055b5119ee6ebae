"""WriteTxnMarkers (key 27), versions 1–2.

Behaviour: writes a COMMIT or ABORT control batch for each listed partition (what the
coordinator does locally for its own transactions, exposed for operators' tools and for the
coordinators of other brokers in a cluster). A marker older than the producer's epoch gets
INVALID_PRODUCER_EPOCH; with transaction version 2 it must be newer than the epoch of the open
transaction. A marker whose coordinator epoch is older than that of the producer's previous
marker on the partition gets TRANSACTION_COORDINATOR_FENCED (a coordinator epoch of -1,
unknown, is not checked). Unknown partition: UNKNOWN_TOPIC_OR_PARTITION; storage refusing the
write or its flush: KAFKA_STORAGE_ERROR. Markers are answered once durable. Cluster mode: only
the leader writes (NOT_LEADER_OR_FOLLOWER elsewhere, also on a leader whose registration
lapsed), with acks=all as in Kafka: an ISR smaller than min.insync.replicas gets
NOT_ENOUGH_REPLICAS with nothing written, and each marker is answered once the high watermark
passes it: NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile,
NOT_LEADER_OR_FOLLOWER if leadership moved, REQUEST_TIMED_OUT after 30 s (Kafka's
request.timeout.ms; the marker stays on the leader's log). Markers are written
and waited for as the coordinator's own (replication/markers.py).
- Authorization: CLUSTER_ACTION on the cluster (brokers send markers; their principal must
  be a super user or be granted it), else CLUSTER_AUTHORIZATION_FAILED for every partition.
Version notes: v1 flexible; v2 TransactionVersion.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.replication.markers import Marker, append_marker, commit_errors
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.WRITE_TXN_MARKERS, 1, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    services = ctx.services
    if not authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return {"markers": _denied(request)}
    # each partition's answer, and the commit it waits for once every marker is appended
    waiting: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
    answers = []
    for entry in request.markers:
        marker = Marker(
            entry.producer_id,
            entry.producer_epoch,
            entry.transaction_result,
            entry.coordinator_epoch,
            strict_epoch=field(entry, "transaction_version", 0) >= 2,
        )
        topics = []
        for topic in entry.topics:
            partitions = []
            for index in topic.partition_indexes:
                partition = services.topics.get(topic.name, index)
                written = append_marker(services.writer, partition, marker, ctx.received_ms)
                answer: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.none}
                if isinstance(written, ErrorCode):
                    answer["error_code"] = written
                else:
                    waiting.append((answer, written))
                partitions.append(answer)
            topics.append({"name": topic.name, "partitions": partitions})
        answers.append({"producer_id": entry.producer_id, "topics": topics})
    errors = await commit_errors([commit for _, commit in waiting])
    for (answer, _), error in zip(waiting, errors, strict=True):
        answer["error_code"] = error
    return {"markers": answers}


def _denied(request: Any) -> list[dict[str, Any]]:
    denied = ErrorCode.cluster_authorization_failed
    return [
        {
            "producer_id": marker.producer_id,
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        {"partition_index": index, "error_code": denied}
                        for index in topic.partition_indexes
                    ],
                }
                for topic in marker.topics
            ],
        }
        for marker in request.markers
    ]
