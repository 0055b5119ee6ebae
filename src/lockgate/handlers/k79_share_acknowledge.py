"""ShareAcknowledge (key 79), versions 1–2.

Behaviour (KIP-932; the share-partition leader in share/):
- Top level, in Kafka's order: GroupId null: INVALID_REQUEST; no READ on the group:
  GROUP_AUTHORIZATION_FAILED; MemberId null, empty or over 36 characters: INVALID_REQUEST; then
  the share session: epoch 0 INVALID_SHARE_SESSION_EPOCH (a session cannot start with an
  acknowledgement); no session for (group, member): SHARE_SESSION_NOT_FOUND; epoch -1 is
  accepted without an epoch check (the acknowledgements are applied, then the session ends and
  the member's records are released); another epoch than the expected one:
  INVALID_SHARE_SESSION_EPOCH. A valid epoch N moves the session to N + 1.
- Per partition (ErrorCode), in Kafka's order: batches out of order, overlapping, with
  FirstOffset > LastOffset, no types, a type count not matching the range, a type outside
  0..3 (0..4 in v2), or RENEW without IsRenewAck: INVALID_REQUEST; unknown topic id
  UNKNOWN_TOPIC_ID; no READ on the topic TOPIC_AUTHORIZATION_FAILED; unknown partition or no
  share partition loaded here UNKNOWN_TOPIC_OR_PARTITION; offsets not in the cache or not
  acquired by this member: INVALID_RECORD_STATE; past the last fetched offset:
  INVALID_REQUEST; the write failing: the persister's error as clients see it. Nothing of a
  refused partition is applied; the answer is sent once the writes are durable.
Version notes: v2 adds IsRenewAck (RENEW, type 4, restarts the acquisition locks) and
AcquisitionLockTimeoutMs in the answer.
"""

from __future__ import annotations

import uuid
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.share_acks import (
    LeaderHints,
    Refusal,
    ack_batches,
    acknowledge_all,
    check_request,
    lock_timeout_ms,
    no_leader,
)
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.share.partition import AckBatch
from lockgate.share.sessions import FINAL_EPOCH, INITIAL_EPOCH, next_epoch


def _answer(
    code: ErrorCode, message: str | None, lock_ms: int, responses: list[Any]
) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "acquisition_lock_timeout": lock_ms,
        "responses": responses,
        "node_endpoints": [],
    }


@handles(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    refusal = check_request(ctx, request)
    if refusal is None:
        refusal = _check_session(ctx, request)
    if refusal is not None:
        return _answer(refusal.code, refusal.message, 0, [])
    group, member = request.group_id, request.member_id
    renew = ctx.api_version >= 2 and request.is_renew_ack
    wanted: list[tuple[uuid.UUID, int, list[AckBatch]]] = [
        (topic.topic_id, p.partition_index, ack_batches(p))
        for topic in request.topics
        for p in topic.partitions
    ]
    outcomes = await acknowledge_all(ctx, group, member, wanted, renew)
    manager = ctx.services.share_leader
    if request.share_session_epoch == FINAL_EPOCH:
        session = manager.sessions.get(group, member)
        if session is not None:
            manager.sessions.remove(session)
            manager.release_session(session)
    grouped: dict[uuid.UUID, list[Any]] = {}
    hints = LeaderHints(ctx)
    for outcome in outcomes:
        entry = {
            "partition_index": outcome.index,
            "error_code": outcome.code,
            "error_message": outcome.message,
            "current_leader": no_leader(),
        }
        hints.fill(outcome.topic_id, outcome.index, entry)
        grouped.setdefault(outcome.topic_id, []).append(entry)
    responses = [{"topic_id": t, "partitions": ps} for t, ps in grouped.items()]
    answer = _answer(ErrorCode.none, None, lock_timeout_ms(ctx, group), responses)
    answer["node_endpoints"] = hints.node_endpoints()
    return answer


def _check_session(ctx: RequestContext, request: Any) -> Refusal | None:
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return Refusal(ErrorCode.invalid_share_session_epoch)
    session = ctx.services.share_leader.sessions.get(request.group_id, request.member_id)
    if session is None:
        return Refusal(ErrorCode.share_session_not_found)
    if epoch == FINAL_EPOCH:
        return None
    if session.epoch != epoch:
        return Refusal(ErrorCode.invalid_share_session_epoch)
    session.epoch = next_epoch(session.epoch)
    session.connection = ctx.connection
    return None
