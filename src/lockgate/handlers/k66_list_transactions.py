"""ListTransactions (key 66), versions 0–2.

Behaviour: every transactional id known to the coordinator, filtered by state names
(unknown names are echoed in UnknownStateFilters), producer ids, (v1) running longer than
DurationFilter ms, and (v2) a regular-expression TransactionalIdPattern (an invalid pattern
gets INVALID_REQUEST). Before the log is loaded: COORDINATOR_LOAD_IN_PROGRESS.
- Authorization: lists only the transactional ids the principal may DESCRIBE.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import filter_authorized


def _empty(error: ErrorCode, unknown: list[str] | None = None) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": error,
        "unknown_state_filters": unknown or [],
        "transaction_states": (),
    }


@handles(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    listing = ctx.services.transactions.list_transactions(
        request.state_filters,
        set(request.producer_id_filters),
        field(request, "duration_filter", -1),
        field(request, "transactional_id_pattern", None),
        ctx.received_ms,
    )
    if listing.error:
        return _empty(listing.error, listing.unknown_state_filters)
    visible = filter_authorized(
        ctx,
        Operation.DESCRIBE,
        ResourceType.TRANSACTIONAL_ID,
        listing.transactions,
        lambda meta: meta.transactional_id,
    )
    return {
        "throttle_time": 0,
        "error_code": 0,
        "unknown_state_filters": listing.unknown_state_filters,
        "transaction_states": [
            {
                "transactional_id": meta.transactional_id,
                "producer_id": meta.producer_id,
                "transaction_state": meta.state.display_name,
            }
            for meta in visible
        ],
    }
