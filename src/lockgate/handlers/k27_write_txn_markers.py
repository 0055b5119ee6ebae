"""WriteTxnMarkers (key 27), versions 1–2.

Behaviour: writes a COMMIT or ABORT control batch for each listed partition (what the
coordinator does locally for its own transactions, exposed for operators' tools). A marker
older than the producer's epoch gets INVALID_PRODUCER_EPOCH; with transaction version 2 it
must be newer than the epoch of the open transaction. Unknown partition:
UNKNOWN_TOPIC_OR_PARTITION; not its leader (cluster mode): NOT_LEADER_OR_FOLLOWER. Markers are
answered once durable.
Version notes: v1 flexible; v2 TransactionVersion.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lockgate.handlers.common import NO_EPOCH, check_leader, field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError


@handles(ApiKey.WRITE_TXN_MARKERS, 1, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    broker = ctx.broker
    pending: list[asyncio.Future[None]] = []
    answers = []
    for marker in request.markers:
        strict = field(marker, "transaction_version", 0) >= 2
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                error = ErrorCode.none
                partition = broker.topics.get(topic.name, index)
                try:
                    if partition is None:
                        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition)
                    check_leader(partition, NO_EPOCH)
                    partition.write_marker(
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.transaction_result,
                        marker.coordinator_epoch,
                        ctx.received_ms,
                        strict,
                    )
                    pending.append(broker.group_commit.appended(partition))
                except KafkaProtocolError as exc:
                    error = exc.code
                partitions.append({"partition_index": index, "error_code": error})
            topics.append({"name": topic.name, "partitions": partitions})
        answers.append({"producer_id": marker.producer_id, "topics": topics})
    await asyncio.gather(*pending)
    return {"markers": answers}
