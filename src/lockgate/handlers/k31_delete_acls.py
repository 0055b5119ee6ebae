"""DeleteAcls (key 31), versions 1–3.

Behaviour:
- Needs ALTER on the CLUSTER: every filter result CLUSTER_AUTHORIZATION_FAILED otherwise.
- With no authorizer configured: every filter result SECURITY_DISABLED.
- A filter with an unknown resource type, pattern type, operation or permission type:
  INVALID_REQUEST for that filter. The others remove every stored ACL they match (durably, in
  etcd in cluster mode) and list what they removed; a filter matching nothing removes nothing.
- A store that cannot write gets UNKNOWN_SERVER_ERROR for every filter, nothing changes.
Version notes: v1 pattern types; v2 flexible; v3 the USER resource type.
"""

from __future__ import annotations

import logging
from typing import Any

from lockgate.handlers.k29_describe_acls import request_filter
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import AclBinding, AclBindingFilter, AclError, Operation, ResourceType
from lockgate.security.authorizer import authorize

log = logging.getLogger(__name__)


def _result(code: ErrorCode, message: str | None, removed: list[AclBinding]) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "matching_acls": [
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "resource_type": b.pattern.resource_type,
                "resource_name": b.pattern.name,
                "pattern_type": b.pattern.pattern_type,
                "principal": b.entry.principal,
                "host": b.entry.host,
                "operation": b.entry.operation,
                "permission_type": b.entry.permission,
            }
            for b in removed
        ],
    }


@handles(ApiKey.DELETE_ACLS, 1, 3)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    entries = request.filters
    if not authorize(ctx, Operation.ALTER, ResourceType.CLUSTER):
        failed = _result(ErrorCode.cluster_authorization_failed, None, [])
        return {"throttle_time": 0, "filter_results": [failed] * len(entries)}
    authorizer = ctx.services.authorizer
    if authorizer is None:
        disabled = _result(ErrorCode.security_disabled, "No Authorizer is configured.", [])
        return {"throttle_time": 0, "filter_results": [disabled] * len(entries)}
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, AclBindingFilter]] = []
    for entry in entries:
        wanted = request_filter(entry)
        try:
            wanted.validate()
        except AclError as exc:
            results.append(_result(ErrorCode.invalid_request, str(exc), []))
            continue
        valid.append((len(results), wanted))
        results.append(_result(ErrorCode.none, None, []))
    if valid:
        try:
            removed = await authorizer.store.delete([wanted for _, wanted in valid])
        except Exception as exc:  # storage or etcd refused: nothing was removed
            log.error("DeleteAcls from %s: storing ACLs failed: %s", ctx.session.principal, exc)
            for index, _ in valid:
                results[index] = _result(ErrorCode.unknown_server_error, "storing ACLs failed", [])
        else:
            for (index, _), gone in zip(valid, removed, strict=True):
                results[index] = _result(ErrorCode.none, None, gone)
                for binding in gone:
                    log.info("ACL removed by %s: %s", ctx.session.principal, binding)
    return {"throttle_time": 0, "filter_results": results}
