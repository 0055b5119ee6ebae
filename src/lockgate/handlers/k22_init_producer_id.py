"""InitProducerId (key 22), versions 0–5.

Behaviour:
- Idempotent producers (no transactional id): always a fresh producer id from the persisted
  allocator with epoch 0; the id/epoch a producer sends (v3+, KIP-360) is only checked for
  consistency, because an idempotent producer may always start afresh.
- ProducerId and ProducerEpoch must be both -1 or both set: INVALID_REQUEST otherwise.
- Transactional ids: not served until the transaction coordinator exists; they get
  INVALID_REQUEST with a message saying so.
Version notes: v2 flexible; v3 ProducerId/ProducerEpoch (KIP-360); v4 PRODUCER_FENCED.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
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
    if request.transactional_id is not None:
        return _answer(ErrorCode.invalid_request)
    return _answer(ErrorCode.none, ctx.broker.producer_ids.allocate(), 0)
