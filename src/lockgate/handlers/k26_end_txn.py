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
  TransactionCoordinator.superseded).
- Authorization: WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
Version notes: v2 PRODUCER_FENCED (older: INVALID_PRODUCER_EPOCH); v3 flexible; v5 TV2.
"""

from __future__ import annotations

import logging
from typing import Any

from lockgate.coordinator.txn import rules
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.txn_common import map_fenced
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

FIRST_TV2_VERSION = 5
log = logging.getLogger(__name__)


@handles(ApiKey.END_TXN, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    coordinator = ctx.services.transactions
    transactional_id = request.transactional_id
    answer: dict[str, Any] = {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1}
    if not authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return {**answer, "error_code": ErrorCode.transactional_id_authorization_failed}
    await coordinator.settle(transactional_id)
    gate = coordinator.gate(transactional_id)
    if gate:
        return {**answer, "error_code": gate}
    # TV2's epoch bump fences a delayed EndTxn; before it, only its connection tells
    producer = (request.producer_id, request.producer_epoch, ctx.connection)
    if ctx.api_version < FIRST_TV2_VERSION and coordinator.superseded(transactional_id, *producer):
        log.warning("EndTxn for %r from %s refused: its client has moved to a newer connection "
                    "(a request delayed in the network)", transactional_id, ctx.peer)  # fmt: skip
        return {**answer, "error_code": ErrorCode.invalid_txn_state}
    coordinator.spoke(transactional_id, *producer)
    try:
        outcome = rules.end_txn(
            coordinator.txns.get(transactional_id),
            request.producer_id,
            request.producer_epoch,
            request.committed,
            ctx.received_ms,
            2 if ctx.api_version >= FIRST_TV2_VERSION else 0,
            ctx.services.producer_ids.allocate,
        )
    except KafkaProtocolError as exc:  # epoch exhausted and no new producer id available
        return {**answer, "error_code": exc.code}
    error = await coordinator.apply(transactional_id, outcome)
    if error:
        return {**answer, "error_code": map_fenced(error, ctx.api_version, 2)}
    return {
        **answer,
        "error_code": 0,
        "producer_id": outcome.producer_id,
        "producer_epoch": outcome.producer_epoch,
    }
