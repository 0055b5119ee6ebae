"""DescribeUserScramCredentials (key 50), version 0.

Behaviour:
- Needs DESCRIBE on the CLUSTER: the top-level error CLUSTER_AUTHORIZATION_FAILED otherwise.
- Users null or empty: every user with a SCRAM credential; else the users named, in order.
- For each user, the mechanisms (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) and iterations of its
  credentials; never the salt or keys.
- A user without credentials: RESOURCE_NOT_FOUND (91); a user named twice: DUPLICATE_RESOURCE
  (92), once; the message names the user, as Kafka's does.
- The credential store could not be read (cluster: etcd away): the top-level error
  UNKNOWN_SERVER_ERROR.
Version notes: v0 only (Kafka has no other). v1+ of the flexible encoding is v0 here.
"""

from __future__ import annotations

import logging
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.security.credentials import describe

log = logging.getLogger(__name__)


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if not authorize(ctx, Operation.DESCRIBE, ResourceType.CLUSTER):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": None,
            "results": (),
        }
    try:
        users = await ctx.services.credentials.users()
    except Exception as exc:
        log.warning("DescribeUserScramCredentials from %s: the credential store: %r", ctx.peer, exc)
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.unknown_server_error,
            "error_message": "the SCRAM credential store could not be read",
            "results": (),
        }
    names = None if request.users is None else [str(user.name) for user in request.users]
    results = [
        {
            "user": item.user,
            "error_code": item.error,
            "error_message": item.message,
            "credential_infos": [
                {"mechanism": mechanism, "iterations": iterations}
                for mechanism, iterations in item.credentials
            ],
        }
        for item in describe(users, names)
    ]
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "results": results,
    }
