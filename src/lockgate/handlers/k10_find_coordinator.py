"""FindCoordinator (key 10), versions 0–6.

Behaviour:
- Key types 1 (transaction) and 0 (group). A single node answers itself, also while the key's
  partition of __transaction_state / __consumer_offsets is still loading, as Kafka answers:
  the requests sent to the coordinator get COORDINATOR_LOAD_IN_PROGRESS meanwhile, which
  clients retry (librdkafka does not expect that error from FindCoordinator itself).
- Cluster mode: the leader of the key's partition of __consumer_offsets (groups) or
  __transaction_state (transactional ids). The first lookup creates the topic (its
  replication-factor setting); COORDINATOR_NOT_AVAILABLE until it exists and while the
  partition has no leader.
- Other key types: INVALID_REQUEST.
- The coordinator's endpoint is that of the listener the request came in on; a coordinator
  without that listener: COORDINATOR_NOT_AVAILABLE (as Kafka).
- Authorization: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or on the transactional
  id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) the key names.
Version notes: v1 key type and error message; v3 flexible; v4+ batched keys.
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.locator import GROUP, TRANSACTION
from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


def _locate(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    found = _denied(ctx, key, key_type) or ctx.services.coordinators.locate(key_type, key)
    if not isinstance(found, ErrorCode):  # as reached on the listener the request came in on
        found = found.on_listener(ctx.session.listener) or ErrorCode.coordinator_not_available
    if isinstance(found, ErrorCode):
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": found,
                "error_message": found.name}  # fmt: skip
    return {"key": key, "node_id": found.node_id, "host": found.host, "port": found.port,
            "error_code": ErrorCode.none, "error_message": None}  # fmt: skip


def _denied(ctx: RequestContext, key: str, key_type: int) -> ErrorCode | None:
    """DESCRIBE on the group or transactional id the key names."""
    if key_type == GROUP and not authorize(ctx, Operation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed
    transactional = ResourceType.TRANSACTIONAL_ID
    if key_type == TRANSACTION and not authorize(ctx, Operation.DESCRIBE, transactional, key):
        return ErrorCode.transactional_id_authorization_failed
    return None


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
