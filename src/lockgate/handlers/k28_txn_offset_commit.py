"""TxnOffsetCommit (key 28), versions 0–5.

Behaviour:
- Offsets committed inside a transaction: the producer must own the transactional id
  (INVALID_PRODUCER_ID_MAPPING), at its current epoch (INVALID_PRODUCER_EPOCH in every
  version, as Apache Kafka answers: its check is the offsets log's epoch check; clients treat
  it as fenced), and the group's offsets partition must be in the open transaction
  (AddOffsetsToTxn; v5 with TV2 adds it implicitly): TRANSACTION_ABORTABLE, or
  INVALID_TXN_STATE before v4, otherwise.
- In a cluster whose transaction coordinator for the id is another broker, the check is that
  broker's answer to AddPartitionsToTxn v4+ (VerifyOnly, or adding the partition for v5);
  an unreachable, loading or moving coordinator gives COORDINATOR_NOT_AVAILABLE, as Kafka.
- KIP-447 (v3+): when the request names a generation ≥ 0, a member id or an instance id, the
  member must be current: UNKNOWN_MEMBER_ID (also for an instance id the group does not know,
  even with a known member id, as Kafka 4.4), ILLEGAL_GENERATION, FENCED_INSTANCE_ID (another
  member's instance id). This is what fences a zombie that fell out of the group. In a
  consumer-protocol group the generation is the member epoch, checked as OffsetCommit checks
  it (KIP-1251: an older epoch for partitions the member had then); a stale one is
  ILLEGAL_GENERATION (no STALE_MEMBER_EPOCH before v6). A group that does not exist has no
  generation to match: ILLEGAL_GENERATION for a generation >= 0 (Kafka 4.4 before v6);
  generation -1 creates the group, and an empty group takes it whatever member or instance
  id it names, as Kafka.
- The offsets are invisible to OffsetFetch until the transaction's commit marker reaches the
  offsets partition, dropped on abort; RequireStable fetches get UNSTABLE_OFFSET_COMMIT.
- Authorization: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ
  on the group (GROUP_AUTHORIZATION_FAILED), both for every partition; READ on each topic
  (TOPIC_AUTHORIZATION_FAILED for its partitions; the others are committed).
Version notes: v2 leader epoch; v3 generation/member/instance (KIP-447), flexible; v5 TV2.
"""

from __future__ import annotations

from typing import Any

from lockgate.coordinator.group.records import CommittedOffset
from lockgate.handlers.common import field
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.handlers.txn_common import map_abortable
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC

FIRST_IMPLICIT_ADD_VERSION = 5
VERIFY_TIMEOUT_S = 30.0


async def _check_transaction(ctx: RequestContext, request: Any) -> ErrorCode:
    partition = (CONSUMER_OFFSETS_TOPIC, ctx.services.groups.offsets_partition(request.group_id))
    error = await ctx.services.transactions.check_txn_offset_commit(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        partition,
        add=ctx.api_version >= FIRST_IMPLICIT_ADD_VERSION,
        timeout_s=VERIFY_TIMEOUT_S,
    )
    if error == ErrorCode.producer_fenced:
        error = ErrorCode.invalid_producer_epoch
    return map_abortable(error, ctx.api_version, 4)


def _denied(ctx: RequestContext, request: Any) -> ErrorCode:
    """WRITE on the transactional id, then READ on the group."""
    transactional_id = request.transactional_id
    if not authorize(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed
    return ErrorCode.none


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    offsets = {
        (topic.name, p.partition_index): CommittedOffset(
            p.committed_offset,
            field(p, "committed_leader_epoch", -1),
            p.committed_metadata or "",
            ctx.received_ms,
        )
        for topic in request.topics
        for p in topic.partitions
    }
    error = _denied(ctx, request)
    refused = set()
    if not error:
        refused = {
            name
            for name, _ in offsets
            if not authorize(ctx, Operation.READ, ResourceType.TOPIC, name)
        }
        offsets = {tp: offset for tp, offset in offsets.items() if tp[0] not in refused}
    if not error:
        error = await _check_transaction(ctx, request)
    if error:
        results = dict.fromkeys(offsets, error)
    else:
        results = await ctx.services.groups.txn_commit(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            field(request, "generation_id", -1),
            field(request, "member_id", ""),
            field(request, "group_instance_id", None),
            offsets,
        )
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if topic.name in refused:
                results[key] = ErrorCode.topic_authorization_failed
            elif key not in results:
                results[key] = error
    topics = [
        {
            "name": topic.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": results[(topic.name, p.partition_index)],
                }
                for p in topic.partitions
            ],
        }
        for topic in request.topics
    ]
    return {"throttle_time": 0, "topics": topics}
