"""DescribeCluster (key 60), versions 0–2.

Behaviour: the cluster id, the controller and the registered brokers (a single node: itself
for both). Asking for controller endpoints (endpoint type 2) is answered the same way: the
controller is one of the brokers. An unknown endpoint type gets UNSUPPORTED_ENDPOINT_TYPE.
Each broker's endpoint is that of the listener the request came in on; brokers without that
listener are left out (as Kafka).
- Authorization: none needed, as Kafka; KIP-430: asked with IncludeClusterAuthorizedOperations,
  the bitfield of the cluster operations the principal may perform.
Version notes: v1 endpoint type; v2 fenced brokers.
"""

from __future__ import annotations

from typing import Any

from lockgate.cluster.membership import on_listener
from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import CLUSTER_NAME, ResourceType
from lockgate.security.authorizer import authorized_operations

NO_AUTHORIZED_OPERATIONS = -(2**31)


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    services = ctx.services
    endpoint_type = field(request, "endpoint_type", 1)
    error = ErrorCode.none if endpoint_type in (1, 2) else ErrorCode.unsupported_endpoint_type
    return {
        "throttle_time": 0,
        "error_code": error,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": services.membership.cluster_id(),
        "controller_id": services.membership.controller_id(),
        "brokers": [
            {
                "broker_id": b.node_id,
                "host": b.host,
                "port": b.port,
                "rack": b.rack,
                "is_fenced": False,
            }
            for b in on_listener(services.membership.brokers(), ctx.session.listener)
        ]
        if not error
        else [],
        "cluster_authorized_operations": authorized_operations(
            ctx, ResourceType.CLUSTER, CLUSTER_NAME
        )
        if field(request, "include_cluster_authorized_operations", False)
        else NO_AUTHORIZED_OPERATIONS,
    }
