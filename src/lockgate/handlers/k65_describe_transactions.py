"""DescribeTransactions (key 65), version 0.

Behaviour: for each transactional id, its state name, timeout, start time (-1 when no
transaction is open), producer id/epoch and partitions. Unknown id:
TRANSACTIONAL_ID_NOT_FOUND; before its log partition is loaded: COORDINATOR_LOAD_IN_PROGRESS;
coordinated by another broker (cluster mode): NOT_COORDINATOR.
- Authorization: DESCRIBE on each transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  for it.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def _timestamp(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    states = []
    for transactional_id in request.transactional_ids:
        if not authorize(ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            found: TxnMetadata | ErrorCode = ErrorCode.transactional_id_authorization_failed
        else:
            found = ctx.services.transactions.describe(transactional_id)
        if isinstance(found, ErrorCode):
            states.append(
                {
                    "error_code": found,
                    "transactional_id": transactional_id,
                    "transaction_state": "",
                    "transaction_timeout": 0,
                    "transaction_start_time": _timestamp(-1),
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": (),
                }
            )
            continue
        meta = found
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, index in sorted(meta.partitions):
            by_topic[topic].append(index)
        states.append(
            {
                "error_code": 0,
                "transactional_id": transactional_id,
                "transaction_state": meta.state.display_name,
                "transaction_timeout": meta.timeout_ms,
                "transaction_start_time": _timestamp(meta.start_ms),
                "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch,
                "topics": [{"topic": t, "partitions": tuple(p)} for t, p in by_topic.items()],
            }
        )
    return {"throttle_time": 0, "transaction_states": states}
