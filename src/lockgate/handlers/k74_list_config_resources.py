"""ListConfigResources (key 74), versions 0–1 (v0 was ListClientMetricsResources, KIP-714;
v1 lists any config resource type, KIP-1142).

Behaviour: the config resources of the types asked (none: every type the version knows), as
Kafka 4.4 lists them: groups with dynamic group configs, client-metrics subscriptions (lockgate
has none, KIP-714 is not served: nothing listed), every broker for the broker-logger and broker
types (those with an endpoint on the request's listener), and every topic, internal ones
included. `kafka-configs.sh --describe --entity-type groups` without a name lists groups so.
- Authorization: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
- A type the version does not know (v0: anything but client metrics): UNSUPPORTED_VERSION,
  nothing listed.
"""

from __future__ import annotations

from typing import Any

from lockgate.cluster.membership import on_listener
from lockgate.handlers.common import field
from lockgate.handlers.configs import BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP, TOPIC
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize

_SUPPORTED = {0: (CLIENT_METRICS,), 1: (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)}


def _answer(error: ErrorCode, resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": error, "config_resources": resources}


@handles(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if not authorize(ctx, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return _answer(ErrorCode.cluster_authorization_failed, [])
    supported = _SUPPORTED[min(ctx.api_version, 1)]
    asked = set(field(request, "resource_types", ())) or set(supported)
    if not asked <= set(supported):
        return _answer(ErrorCode.unsupported_version, [])
    services = ctx.services
    names: list[tuple[str, int]] = []
    if GROUP in asked:
        groups = services.group_configs.groups
        names += [(group, GROUP) for group in sorted(groups) if groups[group]]
    brokers = [
        str(b.node_id) for b in on_listener(services.membership.brokers(), ctx.session.listener)
    ]
    if BROKER_LOGGER in asked:
        names += [(broker, BROKER_LOGGER) for broker in brokers]
    if BROKER in asked:
        names += [(broker, BROKER) for broker in brokers]
    if TOPIC in asked:
        names += [(topic, TOPIC) for topic in sorted(services.topics.topics)]
    resources = [{"resource_name": name, "resource_type": kind} for name, kind in names]
    return _answer(ErrorCode.none, resources)
