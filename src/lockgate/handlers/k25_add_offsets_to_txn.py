"""AddOffsetsToTxn (key 25), versions 0–4.

Behaviour: adds the group's __consumer_offsets partition to the open transaction so that its
TxnOffsetCommit is committed or aborted with it; errors as AddPartitionsToTxn
(INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS).
- Authorization: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then
  READ on the group (GROUP_AUTHORIZATION_FAILED).
Version notes: v2 PRODUCER_FENCED (older: INVALID_PRODUCER_EPOCH); v3 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.txn_common import map_fenced
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    transactional_id = request.transactional_id
    if not authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    error = await ctx.services.transactions.add_offsets(
        transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.group_id,
        ctx.received_ms,
        ctx.connection,
    )
    return {"throttle_time": 0, "error_code": map_fenced(error, ctx.api_version, 2)}
