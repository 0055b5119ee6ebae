"""EndTxn (key 26), versions 0–5.

Behaviour:
- Ongoing → PrepareCommit/PrepareAbort, logged durably before the answer; markers are then
  written to every partition of the transaction and the Complete state logged.
- Before TV2: the epoch must match (PRODUCER_FENCED); resending the decision gets NONE when
  complete, CONCURRENT_TRANSACTIONS while preparing, INVALID_TXN_STATE otherwise; unknown id:
  INVALID_PRODUCER_ID_MAPPING.
- v5 (TV2, KIP-890): every commit/abort bumps the epoch and the answer carries the producer
  id/epoch for the next transaction; on epoch exhaustion a new producer id (NextProducerId);
  a retry after a lost answer (previous epoch, or the previous producer id after a rotation)
  gets success. Markers carry the bumped epoch, so a late EndTxn or marker from an older
  transaction is refused.
- Before TV2, an EndTxn on a connection older than one the id's client has since used is a
  delayed copy of a request the client retried: INVALID_TXN_STATE, nothing changes (see
  TransactionCoordinator.end_txn).
- Authorization: WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
Version notes: v2 PRODUCER_FENCED (older: INVALID_PRODUCER_EPOCH); v3 flexible; v5 TV2.
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.txn.metadata import TV2
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.txn_common import map_fenced
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

FIRST_TV2_VERSION = 5


@handles(ApiKey.END_TXN, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    transactional_id = request.transactional_id
    answer: dict[str, Any] = {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1}
    if not authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return {**answer, "error_code": ErrorCode.transactional_id_authorization_failed}
    result = await ctx.services.transactions.end_txn(
        transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
        ctx.received_ms,
        TV2 if ctx.api_version >= FIRST_TV2_VERSION else 0,
        ctx.connection,
        ctx.peer,
    )
    if result.error:
        return {**answer, "error_code": map_fenced(result.error, ctx.api_version, 2)}
    return {
        **answer,
        "error_code": 0,
        "producer_id": result.producer_id,
        "producer_epoch": result.producer_epoch,
    }
