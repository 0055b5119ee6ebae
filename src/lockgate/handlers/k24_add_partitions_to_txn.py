"""AddPartitionsToTxn (key 24), versions 0–5.

Behaviour:
- v0–3 (clients): adds partitions to the open transaction (starting it from Empty/Complete*).
  Unknown id or producer id: INVALID_PRODUCER_ID_MAPPING; wrong epoch: PRODUCER_FENCED; while
  preparing or pending: CONCURRENT_TRANSACTIONS (after waiting up to 1 s for the previous
  transaction's markers, which usually spares the client a retry); unknown partitions:
  UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED. Already included
  partitions: success, nothing logged.
- v4–5 (brokers, KIP-890): batched by transaction; VerifyOnly checks that each partition is
  in the open transaction (TRANSACTION_ABORTABLE when not) without adding it; otherwise the
  partitions are added as a TV2 produce (or TxnOffsetCommit v5) adds them implicitly, once
  the addition is logged. Partitions are known by the cluster's topics, wherever they live.
- Authorization: v0–3 (clients) WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  for every partition), then WRITE on each topic (TOPIC_AUTHORIZATION_FAILED for its
  partitions, OPERATION_NOT_ATTEMPTED for the others); v4+ (brokers) CLUSTER_ACTION on the
  cluster (CLUSTER_AUTHORIZATION_FAILED for the request).
Version notes: v2 PRODUCER_FENCED (older: INVALID_PRODUCER_EPOCH); v3 flexible; v4 batched.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.txn_common import map_fenced
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

FIRST_BROKER_VERSION = 4


def _results(topics: Any, error_of: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    return [
        {
            "name": topic.name,
            "results_by_partition": [
                {"partition_index": p, "partition_error_code": error_of[(topic.name, p)]}
                for p in topic.partitions
            ],
        }
        for topic in topics
    ]


async def _add(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    topics: Any,
    verify_only: bool,
) -> dict[tuple[str, int], ErrorCode]:
    wanted = [(topic.name, p) for topic in topics for p in topic.partitions]
    # a client's request (v0-3) comes on its connection; a broker's (v4+) adds as a TV2 produce
    client = ctx.connection if ctx.api_version < FIRST_BROKER_VERSION else None
    errors = await ctx.services.transactions.add_partitions(
        transactional_id, producer_id, epoch, wanted, ctx.received_ms, client, verify_only
    )
    return {tp: map_fenced(error, ctx.api_version, 2) for tp, error in errors.items()}


def _denied(
    ctx: RequestContext, transactional_id: str, topics: Any
) -> dict[tuple[str, int], ErrorCode] | None:
    """A client's request (v0-3) needs WRITE on the transactional id, then on every topic:
    the answer for each partition when it may not, else None."""
    wanted = [(topic.name, p) for topic in topics for p in topic.partitions]
    if not authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
    refused = {
        topic.name
        for topic in topics
        if not authorize(ctx, Operation.WRITE, ResourceType.TOPIC, topic.name)
    }
    if not refused:
        return None
    return {
        tp: ErrorCode.topic_authorization_failed
        if tp[0] in refused
        else ErrorCode.operation_not_attempted
        for tp in wanted
    }


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if ctx.api_version < FIRST_BROKER_VERSION:
        topics = request.v3_and_below_topics
        errors = _denied(ctx, request.v3_and_below_transactional_id, topics)
        if errors is None:
            errors = await _add(
                ctx,
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                topics,
                False,
            )
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _results(topics, errors)}
    if not authorize(ctx, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        denied = ErrorCode.cluster_authorization_failed
        return {"throttle_time": 0, "error_code": denied, "results_by_transaction": []}
    results = []
    for txn in request.transactions:
        errors = await _add(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.topics,
            txn.verify_only,
        )
        results.append(
            {
                "transactional_id": txn.transactional_id,
                "topic_results": _results(txn.topics, errors),
            }
        )
    return {"throttle_time": 0, "error_code": 0, "results_by_transaction": results}
