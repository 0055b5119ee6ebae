"""AlterClientQuotas (key 49), versions 0–1.

Behaviour:
- Each entry names an entity (user and/or client-id, a null name meaning the type's default)
  and sets or removes quota keys: producer_byte_rate, consumer_byte_rate (whole numbers) and
  request_percentage. Entries that pass validation are applied together and stored durably
  (in etcd in cluster mode); connected clients are governed by them from their next request.
- Per entry, INVALID_REQUEST with Kafka's message: no entity type, a repeated or unknown
  entity type, an empty name, a repeated key, the same entity twice in the request, an
  unknown key, a value ≤ 0, a fractional byte rate. Removing a key needs no valid value.
- Not served, refused with INVALID_REQUEST and a message saying so: controller_mutation_rate
  (KIP-599) and ip entities (connection_creation_rate).
- validate_only: every check, nothing stored. A store that cannot write answers the entries
  it would have applied with UNKNOWN_SERVER_ERROR and changes nothing.
- Authorization: ALTER_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every
  entry (nothing changes).
Version notes: v1 flexible.
"""

from __future__ import annotations

import logging
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.security.quotas import Alteration, QuotaEntity, validate_entity, validate_value

log = logging.getLogger(__name__)


def _alteration(entry: Any, seen: set[QuotaEntity]) -> Alteration:
    entity = validate_entity((e.entity_type, e.entity_name) for e in entry.entity)
    changes: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key in changes:
            raise KafkaProtocolError(
                ErrorCode.invalid_request,
                f"Duplicate quota key {op.key} not updating quota for this entity "
                f"{entity.describe()}",
            )
        changes[op.key] = None if op.remove else float(op.value)
    if entity in seen:
        raise KafkaProtocolError(
            ErrorCode.invalid_request, f"Ignoring duplicate entity {entity.describe()}"
        )
    seen.add(entity)
    for key, value in changes.items():
        if value is not None:
            validate_value(key, value)
    return Alteration(entity, changes)


@handles(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    answers: list[dict[str, Any]] = []
    accepted: list[tuple[dict[str, Any], Alteration]] = []
    seen: set[QuotaEntity] = set()
    allowed = authorize(ctx, Operation.ALTER_CONFIGS, ResourceType.CLUSTER)
    for entry in request.entries:
        answer: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "entity": [
                {"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity
            ],
        }
        try:
            if not allowed:
                raise KafkaProtocolError(ErrorCode.cluster_authorization_failed)
            accepted.append((answer, _alteration(entry, seen)))
        except KafkaProtocolError as exc:
            answer["error_code"] = exc.code
            answer["error_message"] = exc.message or None
        answers.append(answer)
    if accepted and not request.validate_only:
        try:
            await ctx.services.quota_store.alter([alteration for _, alteration in accepted])
        except Exception as exc:  # storage or etcd: nothing was changed
            log.error("AlterClientQuotas from %s (client id %r) failed: %s",
                      ctx.peer, ctx.client_id, exc)  # fmt: skip
            for answer, _ in accepted:
                answer["error_code"] = ErrorCode.unknown_server_error
                answer["error_message"] = f"the quotas could not be stored: {exc}"
        else:
            for _, alteration in accepted:
                log.info("client quotas of %s altered by %s (client id %r): %s",
                         alteration.entity.describe(), ctx.peer, ctx.client_id,
                         dict(alteration.changes))  # fmt: skip
    return {"throttle_time": 0, "entries": answers}
