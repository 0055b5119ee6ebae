"""CreateAcls (key 30), versions 1–3.

Behaviour:
- Needs ALTER on the CLUSTER: every result CLUSTER_AUTHORIZATION_FAILED otherwise.
- With no authorizer configured: every result SECURITY_DISABLED.
- A creation with an unknown or ANY resource type, a pattern type other than LITERAL or
  PREFIXED, an unknown or ANY operation, a permission other than ALLOW or DENY, an empty
  resource name or a principal that is not TYPE:NAME gets INVALID_REQUEST; the valid ones are
  stored (durably, in etcd in cluster mode) and apply at once; an ACL already stored stays once.
- A store that cannot write gets UNKNOWN_SERVER_ERROR for those creations, nothing changes.
Version notes: v1 pattern types; v2 flexible; v3 the USER resource type.
"""

from __future__ import annotations

import logging
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import (
    AclBinding,
    AclError,
    Operation,
    PatternType,
    ResourceType,
)
from lockgate.security.authorizer import authorize

log = logging.getLogger(__name__)


def _binding(creation: Any) -> AclBinding:
    return AclBinding.from_codes(
        creation.resource_type,
        creation.resource_name,
        getattr(creation, "resource_pattern_type", PatternType.LITERAL),
        creation.principal,
        creation.host,
        creation.operation,
        creation.permission_type,
    )


def _result(code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message}


@handles(ApiKey.CREATE_ACLS, 1, 3)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    creations = request.creations
    if not authorize(ctx, Operation.ALTER, ResourceType.CLUSTER):
        failed = _result(ErrorCode.cluster_authorization_failed)
        return {"throttle_time": 0, "results": [failed] * len(creations)}
    authorizer = ctx.services.authorizer
    if authorizer is None:
        disabled = _result(ErrorCode.security_disabled, "No Authorizer is configured.")
        return {"throttle_time": 0, "results": [disabled] * len(creations)}
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, AclBinding]] = []
    for creation in creations:
        binding = _binding(creation)
        try:
            binding.validate()
        except AclError as exc:
            results.append(_result(ErrorCode.invalid_request, str(exc)))
            continue
        valid.append((len(results), binding))
        results.append(_result(ErrorCode.none))
    if valid:
        try:
            await authorizer.store.create([binding for _, binding in valid])
        except Exception as exc:  # storage or etcd refused: nothing was stored
            log.error("CreateAcls from %s: storing ACLs failed: %s", ctx.session.principal, exc)
            for index, _ in valid:
                results[index] = _result(ErrorCode.unknown_server_error, "storing ACLs failed")
        else:
            for _, binding in valid:
                log.info("ACL added by %s: %s", ctx.session.principal, binding)
    return {"throttle_time": 0, "results": results}
