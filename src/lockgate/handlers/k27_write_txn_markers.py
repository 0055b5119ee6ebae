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
request.timeout.ms; the marker stays on the leader's log). The partition writer
(replication/writer.py) writes the marker and waits for it.
- Authorization: CLUSTER_ACTION on the cluster (brokers send markers; their principal must
  be a super user or be granted it), else CLUSTER_AUTHORIZATION_FAILED for every partition.
Version notes: v1 flexible; v2 TransactionVersion.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lockgate.handlers.common import NO_EPOCH, check_leader, field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

# a marker written: the partition's entry in the response, and the future of its commit
_Written = tuple[dict[str, Any], asyncio.Future[None]]


@handles(ApiKey.WRITE_TXN_MARKERS, 1, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    services = ctx.services
    written: list[_Written] = []
    answers = []
    if not authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return {"markers": _denied(request)}
    for marker in request.markers:
        strict = field(marker, "transaction_version", 0) >= 2
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                answer: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.none}
                partition = services.topics.get(topic.name, index)
                try:
                    if partition is None:
                        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition)
                    check_leader(partition, NO_EPOCH)
                    committed = services.writer.write_marker(
                        partition,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.transaction_result,
                        marker.coordinator_epoch,
                        ctx.received_ms,
                        strict,
                    )
                    written.append((answer, committed))
                except KafkaProtocolError as exc:
                    answer["error_code"] = exc.code
                except OSError:  # storage's contract: nothing of this marker was written
                    answer["error_code"] = ErrorCode.kafka_storage_error
                partitions.append(answer)
            topics.append({"name": topic.name, "partitions": partitions})
        answers.append({"producer_id": marker.producer_id, "topics": topics})
    await _acknowledged(written)
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


async def _acknowledged(written: list[_Written]) -> None:
    """Each marker's commit (durable, and in a cluster in the ISR's logs): a marker whose flush
    failed gets KAFKA_STORAGE_ERROR in its answer, one the ISR did not take its error."""
    outcomes = await asyncio.gather(
        *(committed for _, committed in written), return_exceptions=True
    )
    for (answer, _), outcome in zip(written, outcomes, strict=True):
        if isinstance(outcome, OSError):
            answer["error_code"] = ErrorCode.kafka_storage_error
        elif isinstance(outcome, KafkaProtocolError):
            answer["error_code"] = outcome.code
        elif isinstance(outcome, BaseException):
            raise outcome
