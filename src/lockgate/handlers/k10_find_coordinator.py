"""FindCoordinator (key 10), versions 0–6.

Behaviour:
- Key types 1 (transaction) and 0 (group): this broker, also while the key's partition of
  __transaction_state / __consumer_offsets is still loading, as Kafka answers: the requests
  sent to the coordinator get COORDINATOR_LOAD_IN_PROGRESS meanwhile, which clients retry
  (librdkafka does not expect that error from FindCoordinator itself).
- Other key types: INVALID_REQUEST.
- Cluster mode: COORDINATOR_NOT_AVAILABLE (coordinators across a cluster are not built yet;
  docs/cluster-mode.md).
Version notes: v1 key type and error message; v3 flexible; v4+ batched keys.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode

GROUP = 0
TRANSACTION = 1


def _locate(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    host, port = ctx.broker.advertised
    error = ErrorCode.none if key_type in (TRANSACTION, GROUP) else ErrorCode.invalid_request
    if not error and not ctx.broker.membership.coordinators:
        error = ErrorCode.coordinator_not_available
    found = not error
    return {
        "key": key,
        "node_id": ctx.broker.node_id if found else -1,
        "host": host if found else "",
        "port": port if found else -1,
        "error_code": error,
        "error_message": None if found else error.name,
    }


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    key_type = field(request, "key_type", GROUP)
    if ctx.api_version >= 4:
        return {
            "throttle_time": 0,
            "coordinators": [_locate(ctx, key, key_type) for key in request.coordinator_keys],
        }
    answer = _locate(ctx, request.key, key_type)
    answer["throttle_time"] = 0
    return answer
