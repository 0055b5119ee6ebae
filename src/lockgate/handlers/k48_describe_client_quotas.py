"""DescribeClientQuotas (key 48), versions 0–1.

Behaviour:
- Answers the stored quota entities that match every filter component: match type 0 the
  exact name, 1 the entity type's default, 2 any name (default included). `strict` keeps only
  entities with no entity type beyond the components'; no components and not strict: every
  entity.
- An empty or repeated entity type, an ip component combined with user or client-id, an
  exact match without a name or an unknown match type: INVALID_REQUEST for the whole request
  (entries null); an unknown entity type: UNSUPPORTED_VERSION, as Kafka.
- Authorization: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
Version notes: v1 flexible.
"""

from __future__ import annotations

from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.security.quotas import ENTITY_TYPES, FilterComponent, describe


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if not authorize(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": None,
            "entries": None,
        }
    components = [
        FilterComponent(c.entity_type, int(c.match_type), c.match) for c in request.components
    ]
    try:
        found = describe(ctx.services.quota_store.table, components, bool(request.strict))
    except KafkaProtocolError as exc:
        return {
            "throttle_time": 0,
            "error_code": exc.code,
            "error_message": exc.message or None,
            "entries": None,
        }
    entries = [
        {
            "entity": [
                {"entity_type": kind, "entity_name": name}
                for kind, name in sorted(entity.parts, key=lambda p: ENTITY_TYPES.index(p[0]))
            ],
            "values": [{"key": key, "value": value} for key, value in sorted(values.items())],
        }
        for entity, values in found
    ]
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries}
