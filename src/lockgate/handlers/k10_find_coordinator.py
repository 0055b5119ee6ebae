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
- Key type 2 (share, v6+): the share coordinator of the share partition the key names,
  "groupId:topicId:partition": the leader of its partition of __share_group_state (created on
  the first lookup in a cluster with Kafka's configs for it; COORDINATOR_NOT_AVAILABLE
  meanwhile). Below v6, or a key not of that form: INVALID_REQUEST. CLUSTER_ACTION on the
  cluster, else CLUSTER_AUTHORIZATION_FAILED for every key (brokers ask this).
- Other key types: INVALID_REQUEST.
- The coordinator's endpoint is that of the listener the request came in on; a coordinator
  without that listener: COORDINATOR_NOT_AVAILABLE (as Kafka).
- Authorization: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or on the transactional
  id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) the key names.
Version notes: v1 key type and error message; v3 flexible; v4+ batched keys; v6 key type 2
(share).
"""

from __future__ import annotations

from typing import Any

from lockgate.cluster.metadata import BrokerRegistration
from lockgate.coordinator.locator import GROUP, SHARE, TRANSACTION
from lockgate.coordinator.share.routing import coordinator_key, parse_coordinator_key
from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize


def _locate(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    refused = _denied(ctx, key, key_type) or _share_key_error(ctx, key, key_type)
    found: BrokerRegistration | ErrorCode
    if refused is not None:
        found = refused
    else:
        located = coordinator_key(parse_coordinator_key(key)) if key_type == SHARE else key
        found = ctx.services.coordinators.locate(key_type, located)
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


def _share_key_error(ctx: RequestContext, key: str, key_type: int) -> ErrorCode | None:
    """A SHARE key: only from v6, and only of the form groupId:topicId:partition."""
    if key_type != SHARE:
        return None
    if ctx.api_version < 6:
        return ErrorCode.invalid_request
    try:
        parse_coordinator_key(key)
    except ValueError:
        return ErrorCode.invalid_request
    return None


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    key_type = field(request, "key_type", GROUP)
    cluster_action = Operation.CLUSTER_ACTION
    if (
        key_type == SHARE
        and ctx.api_version >= 6
        and not authorize(ctx, cluster_action, ResourceType.CLUSTER)
    ):
        denied = ErrorCode.cluster_authorization_failed
        return {"throttle_time": 0, "coordinators": [
            {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": denied,
             "error_message": "Cluster authorization failed."}
            for key in request.coordinator_keys
        ]}  # fmt: skip
    if ctx.api_version >= 4:
        return {
            "throttle_time": 0,
            "coordinators": [_locate(ctx, key, key_type) for key in request.coordinator_keys],
        }
    answer = _locate(ctx, request.key, key_type)
    answer["throttle_time"] = 0
    return answer
