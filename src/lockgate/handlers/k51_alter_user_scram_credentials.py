"""AlterUserScramCredentials (key 51), version 0.

Behaviour:
- Needs ALTER on the CLUSTER: CLUSTER_AUTHORIZATION_FAILED for every user otherwise.
- Deletions and upsertions (the client derives the salted password; the broker stores
  Kafka's credential: salt, stored key, server key, iterations) apply all at once, durably
  (single node: the storage engine; cluster: etcd by compare-and-swap), one result per user.
- Errors per user, as Kafka's controller gives them: a user named twice in one request
  (deletions and upsertions together) DUPLICATE_RESOURCE (92) and nothing of that user
  changes; an empty name UNACCEPTABLE_CREDENTIAL (93); a mechanism other than 1 (SCRAM-SHA-256)
  or 2 (SCRAM-SHA-512) UNSUPPORTED_SASL_MECHANISM (33); iterations below 4096 or above 16384
  UNACCEPTABLE_CREDENTIAL; deleting a credential that does not exist RESOURCE_NOT_FOUND (91).
- The store could not be written (full disk, etcd away): UNKNOWN_SERVER_ERROR for every user
  that would have changed, and nothing changed.
- Connections already authenticated stay so after their credential changes or goes.
Version notes: v0 only (Kafka has no other).
"""

from __future__ import annotations

import logging
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.security.credentials import Deletion, Upsertion, UserResult, Users, alter

log = logging.getLogger(__name__)


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    deletions = [Deletion(str(item.name), int(item.mechanism)) for item in request.deletions]
    upsertions = [
        Upsertion(
            str(item.name),
            int(item.mechanism),
            int(item.iterations),
            bytes(item.salt),
            bytes(item.salted_password),
        )
        for item in request.upsertions
    ]
    if not authorize(ctx, Operation.ALTER, ResourceType.CLUSTER):
        names = [item.user for item in deletions] + [item.user for item in upsertions]
        denied = ErrorCode.cluster_authorization_failed
        return {
            "throttle_time": 0,
            "results": [
                {"user": name, "error_code": denied, "error_message": None}
                for name in dict.fromkeys(names)
            ],
        }
    outcome: list[UserResult] = []

    def change(users: Users) -> Users:
        changed, results = alter(users, deletions, upsertions)
        outcome[:] = results  # the last run's results: the one that was written
        return changed

    try:
        await ctx.services.credentials.change(change)
    except Exception as exc:
        log.warning("AlterUserScramCredentials from %s: the credential store: %r", ctx.peer, exc)
        refused = {item.user: item for item in outcome if item.error != ErrorCode.none}
        names = [item.user for item in deletions] + [item.user for item in upsertions]
        outcome = [
            refused.get(name)
            or UserResult(name, ErrorCode.unknown_server_error, "SCRAM credentials not stored")
            for name in dict.fromkeys(names)
        ]
    results = [
        {"user": item.user, "error_code": item.error, "error_message": item.message}
        for item in outcome
    ]
    return {"throttle_time": 0, "results": results}
