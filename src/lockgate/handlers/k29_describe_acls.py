"""DescribeAcls (key 29), versions 1–3.

Behaviour:
- Needs DESCRIBE on the CLUSTER: CLUSTER_AUTHORIZATION_FAILED otherwise.
- With no authorizer configured (authorizer.class.name empty): SECURITY_DISABLED.
- A filter with an unknown resource type, pattern type, operation or permission type:
  INVALID_REQUEST. Otherwise every stored ACL the filter matches (pattern type MATCH: every
  ACL that would apply to the named resource: its literal name, the wildcard, its prefixes),
  grouped by resource pattern.
Version notes: v1 pattern types (prefixed); v2 flexible; v3 the USER resource type.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    code_of,
)
from lockgate.security.authorizer import authorize


def request_filter(item: Any) -> AclBindingFilter:
    """The filter of a DescribeAcls request or of one DeleteAcls filter entry."""
    return AclBindingFilter(
        code_of(ResourceType, item.resource_type_filter),
        item.resource_name_filter,
        code_of(PatternType, getattr(item, "pattern_type_filter", PatternType.LITERAL)),
        item.principal_filter,
        item.host_filter,
        code_of(Operation, item.operation),
        code_of(Permission, item.permission_type),
    )


def _answer(code: ErrorCode, message: str | None, resources: list[Any]) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "resources": resources,
    }


@handles(ApiKey.DESCRIBE_ACLS, 1, 3)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if not authorize(ctx, Operation.DESCRIBE, ResourceType.CLUSTER):
        return _answer(ErrorCode.cluster_authorization_failed, None, [])
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return _answer(ErrorCode.security_disabled, "No Authorizer is configured.", [])
    wanted = request_filter(request)
    try:
        wanted.validate()
    except AclError as exc:
        return _answer(ErrorCode.invalid_request, str(exc), [])
    grouped: dict[ResourcePattern, list[AclBinding]] = {}
    for binding in sorted(authorizer.store.bindings):
        if wanted.matches(binding):
            grouped.setdefault(binding.pattern, []).append(binding)
    resources = [
        {
            "resource_type": pattern.resource_type,
            "resource_name": pattern.name,
            "pattern_type": pattern.pattern_type,
            "acls": [
                {
                    "principal": b.entry.principal,
                    "host": b.entry.host,
                    "operation": b.entry.operation,
                    "permission_type": b.entry.permission,
                }
                for b in bindings
            ],
        }
        for pattern, bindings in grouped.items()
    ]
    return _answer(ErrorCode.none, None, resources)
