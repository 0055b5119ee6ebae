"""ListTransactions (key 66), versions 0–2.

Behaviour: every transactional id known to the coordinator, filtered by state names
(unknown names are echoed in UnknownStateFilters), producer ids, (v1) running longer than
DurationFilter ms, and (v2) a regular-expression TransactionalIdPattern (an invalid pattern
gets INVALID_REQUEST). Before the log is loaded: COORDINATOR_LOAD_IN_PROGRESS.
- Authorization: lists only the transactional ids the principal may DESCRIBE.
"""

from __future__ import annotations

import re
from typing import Any

from lockgate.coordinator.txn.state import TxnState
from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


def _empty(error: ErrorCode, unknown: list[str] | None = None) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": error,
        "unknown_state_filters": unknown or [],
        "transaction_states": (),
    }


@handles(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    coordinator = ctx.services.transactions
    if not coordinator.loaded:
        return _empty(ErrorCode.coordinator_load_in_progress)
    wanted_states = {TxnState.from_name(name) for name in request.state_filters}
    unknown = [name for name in request.state_filters if TxnState.from_name(name) is None]
    producer_ids = set(request.producer_id_filters)
    duration = field(request, "duration_filter", -1)
    pattern_text = field(request, "transactional_id_pattern", None)
    try:
        pattern = re.compile(pattern_text) if pattern_text else None
    except re.error:
        return _empty(ErrorCode.invalid_request, unknown)
    now = ctx.received_ms
    listed = []
    for transactional_id, meta in sorted(coordinator.txns.items()):
        if request.state_filters and meta.state not in wanted_states:
            continue
        if producer_ids and meta.producer_id not in producer_ids:
            continue
        if duration >= 0 and (meta.start_ms < 0 or now - meta.start_ms <= duration):
            continue
        if pattern is not None and not pattern.fullmatch(transactional_id):
            continue
        if not authorize(
            ctx,
            Operation.DESCRIBE,
            ResourceType.TRANSACTIONAL_ID,
            transactional_id,
            log_denied=False,
        ):
            continue
        listed.append(
            {
                "transactional_id": transactional_id,
                "producer_id": meta.producer_id,
                "transaction_state": meta.state.display_name,
            }
        )
    return {
        "throttle_time": 0,
        "error_code": 0,
        "unknown_state_filters": unknown,
        "transaction_states": listed,
    }
