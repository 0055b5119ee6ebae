"""InitProducerId (key 22), versions 0–5.

Behaviour:
- Idempotent producers (no transactional id): a fresh producer id from the persisted allocator
  with epoch 0 (an idempotent producer may always start afresh, KIP-360).
- Transactional ids, following the transaction coordinator's rules (PROTOCOL.md): a new id
  gets a fresh producer id; ProducerId/ProducerEpoch both -1 is a new instance that bumps the
  epoch, fencing the old one; a known id/epoch bumps it (KIP-360) and a retry carrying the
  epoch from before the bump gets the same answer; an open transaction is fenced and aborted
  and the caller told CONCURRENT_TRANSACTIONS; while preparing: CONCURRENT_TRANSACTIONS;
  epoch exhaustion allocates a new producer id; an unknown producer id: PRODUCER_FENCED.
- Exactly one of ProducerId/ProducerEpoch -1: INVALID_REQUEST. Timeout ≤ 0 or above
  transaction.max.timeout.ms: INVALID_TRANSACTION_TIMEOUT.
Version notes: v2 flexible; v3 ProducerId/ProducerEpoch (KIP-360); v4 PRODUCER_FENCED (older
versions get INVALID_PRODUCER_EPOCH); v5 may answer TRANSACTION_ABORTABLE (never needed here).
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.txn import coordinator as rules
from lockgate.handlers.common import field, millis
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.txn_common import map_fenced
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode


def _answer(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": error,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    producer_id = field(request, "producer_id", -1)
    epoch = field(request, "producer_epoch", -1)
    if (producer_id == -1) != (epoch == -1):
        return _answer(ErrorCode.invalid_request)
    transactional_id = request.transactional_id
    broker = ctx.broker
    if transactional_id is None:
        return _answer(ErrorCode.none, broker.producer_ids.allocate(), 0)
    coordinator = broker.transactions
    gate = coordinator.gate(transactional_id)
    if gate:
        return _answer(gate)
    outcome = rules.init_producer_id(
        coordinator.txns.get(transactional_id),
        transactional_id,
        millis(request.transaction_timeout),
        producer_id,
        epoch,
        ctx.received_ms,
        coordinator.max_timeout_ms,
        broker.producer_ids.allocate,
    )
    error = await coordinator.apply(transactional_id, outcome)
    if error:
        return _answer(map_fenced(error, ctx.api_version, 4))
    return _answer(ErrorCode.none, outcome.producer_id, outcome.producer_epoch)
