# What ShareFetch (78) and ShareAcknowledge (79) share, as Kafka's KafkaApis checks them: the
# top-level refusals before the session (group id, READ on the group, member id), and one
# partition's acknowledgement, checked in Kafka's order (the batches themselves, then the
# topic id, READ on the topic, the partition, the share partition loaded here) and applied
# by the share-partition leader once durable. There is no membership check (as Kafka: the
# member need not be in the group, nor assigned the partition).
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lockgate.handlers.registry import RequestContext
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.share.manager import PersistError
from lockgate.share.partition import AckBatch, AcknowledgeError, validate_ack_batches

MAX_MEMBER_ID_CHARS = 36


@dataclass(frozen=True, slots=True)
class Refusal:
    code: ErrorCode
    message: str | None = None


def check_request(ctx: RequestContext, request: Any) -> Refusal | None:
    """The top-level checks before the session, in Kafka's order."""
    if request.group_id is None:
        return Refusal(ErrorCode.invalid_request, "Group id must be set.")
    if not authorize(ctx, Operation.READ, ResourceType.GROUP, request.group_id):
        return Refusal(ErrorCode.group_authorization_failed)
    member = request.member_id
    if not member or len(member) > MAX_MEMBER_ID_CHARS:
        return Refusal(ErrorCode.invalid_request, "Invalid member id.")
    return None


@dataclass(slots=True)
class AckOutcome:
    topic_id: uuid.UUID
    index: int
    code: ErrorCode = ErrorCode.none
    message: str | None = None


def ack_batches(partition: Any) -> list[AckBatch]:
    return [
        AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
        for b in partition.acknowledgement_batches
    ]


async def acknowledge_partition(
    ctx: RequestContext,
    group: str,
    member: str,
    topic_id: uuid.UUID,
    index: int,
    batches: Sequence[AckBatch],
    renew: bool,
) -> AckOutcome:
    outcome = AckOutcome(topic_id, index)
    problem = validate_ack_batches(batches, ctx.api_version, renew)
    if problem is not None:
        outcome.code, outcome.message = ErrorCode.invalid_request, problem
        return outcome
    topics = ctx.services.topics
    record = topics.by_id.get(topic_id)
    if record is None:
        outcome.code = ErrorCode.unknown_topic_id
        return outcome
    if not authorize(ctx, Operation.READ, ResourceType.TOPIC, record.name):
        outcome.code = ErrorCode.topic_authorization_failed
        return outcome
    if not topics.exists(record.name, index):
        outcome.code = ErrorCode.unknown_topic_or_partition
        return outcome
    if not batches:
        return outcome
    try:
        await ctx.services.share_leader.acknowledge((group, topic_id, index), member, batches)
    except (AcknowledgeError, PersistError) as exc:
        outcome.code, outcome.message = exc.code, exc.message
    return outcome


async def acknowledge_all(
    ctx: RequestContext,
    group: str,
    member: str,
    wanted: Sequence[tuple[uuid.UUID, int, list[AckBatch]]],
    renew: bool,
) -> list[AckOutcome]:
    """Every partition's acknowledgement, at once (each its own write)."""
    return list(
        await asyncio.gather(
            *(
                acknowledge_partition(ctx, group, member, topic_id, index, batches, renew)
                for topic_id, index, batches in wanted
            )
        )
    )


def lock_timeout_ms(ctx: RequestContext, group: str) -> int:
    return ctx.services.share_leader.limits(group).record_lock_duration_ms


def no_leader() -> dict[str, int]:
    return {"leader_id": -1, "leader_epoch": -1}


class LeaderHints:
    """CurrentLeader of the partitions answered NOT_LEADER_OR_FOLLOWER, and NodeEndpoints for
    their leaders as this client's listener reaches them (KIP-951, as Kafka's share APIs):
    the client goes to the new leader without a metadata round trip."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self.endpoints: dict[int, dict[str, Any]] = {}

    def fill(self, topic_id: uuid.UUID, index: int, entry: dict[str, Any]) -> None:
        """Sets the entry's current_leader when its error says the leader is elsewhere."""
        if entry["error_code"] != ErrorCode.not_leader_or_follower:
            return
        services = self.ctx.services
        record = services.topics.by_id.get(topic_id)
        state = services.membership.partition(record.name, index) if record else None
        if state is None or state.leader < 0:
            return
        entry["current_leader"] = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
        if state.leader in self.endpoints:
            return
        for broker in services.membership.brokers():
            if broker.node_id != state.leader:
                continue
            reachable = broker.on_listener(self.ctx.session.listener)
            if reachable is not None:
                self.endpoints[state.leader] = {
                    "node_id": reachable.node_id,
                    "host": reachable.host,
                    "port": reachable.port,
                    "rack": reachable.rack,
                }

    def node_endpoints(self) -> list[dict[str, Any]]:
        return list(self.endpoints.values())
