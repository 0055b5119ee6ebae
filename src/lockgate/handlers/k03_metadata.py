"""Metadata (key 3), versions 0–13.

Behaviour:
- Null topic list (or an empty one at v0) = every topic; each partition reports its leader,
  leader epoch (v7+), replicas, ISR and offline replicas: this broker for all of them on a
  single node, the cluster metadata's state in a cluster (every registered broker listed).
- A missing topic is created when the request allows it (v4+) and auto.create.topics.enable is
  true; otherwise UNKNOWN_TOPIC_OR_PARTITION. An illegal name (empty, '.', '..', over 249
  characters, or outside [a-zA-Z0-9._-]) gets INVALID_TOPIC_EXCEPTION either way.
  One created meanwhile that this broker does not know yet gets LEADER_NOT_AVAILABLE.
- v10+ may name topics by id; an unknown id gets UNKNOWN_TOPIC_ID.
- A partition without a leader (its log not open; offline in a cluster) gets
  LEADER_NOT_AVAILABLE with leader -1 (never a crash).
- Brokers are listed with the endpoint of the listener the request came in on; brokers without
  that listener are left out, and a partition led by one gets LISTENER_NOT_FOUND (v6+;
  LEADER_NOT_AVAILABLE before) with leader -1, as Kafka.
- Authorization: DESCRIBE on each topic: an all-topics request leaves out the others, a
  named one gets TOPIC_AUTHORIZATION_FAILED; auto-creating a topic also needs CREATE on the
  cluster or the topic (TOPIC_AUTHORIZATION_FAILED). KIP-430: asked with
  Include{Topic,Cluster}AuthorizedOperations, the bitfields of the operations allowed.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from lockgate.cluster.membership import on_listener
from lockgate.cluster.metadata import NO_LEADER, PartitionState, TopicRecord
from lockgate.handlers.common import field
from lockgate.handlers.k00_produce import may_create_topic
from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.security.acls import CLUSTER_NAME, Operation, ResourceType
from lockgate.security.authorizer import authorize, authorized_operations, filter_authorized
from lockgate.topics.directory import validate_topic_name

NO_AUTHORIZED_OPERATIONS = -(2**31)
PARTITIONS_PER_TURN = 2000  # an all-topics answer gives the event loop back after as many


def broker_sets(ctx: RequestContext) -> tuple[set[int], set[int]]:
    """(registered brokers, those reachable on the request's listener): once per request, not
    per topic (an answer for 10,000 topics computed them 10,000 times)."""
    registered = ctx.services.membership.brokers()
    alive = {b.node_id for b in registered}
    return alive, {b.node_id for b in on_listener(registered, ctx.session.listener)}


def topic_entry(
    ctx: RequestContext, record: TopicRecord, brokers: tuple[set[int], set[int]]
) -> dict[str, Any]:
    membership = ctx.services.membership
    alive, reachable = brokers
    partitions = []
    lookup = membership.partition
    name = record.name
    for index in range(record.partitions):
        state = lookup(name, index)
        if state is None:  # created a moment ago: its state is on the way
            state = PartitionState((), NO_LEADER, -1, ())
        replicas = state.replicas
        leader = state.leader
        if leader in reachable:  # the common case, without a call
            error = ErrorCode.none
        else:
            error, leader = _leader(ctx, leader, alive, reachable)
        if state.leader == NO_LEADER or not alive.issuperset(replicas):
            offline = tuple(r for r in replicas if r not in alive or state.leader == NO_LEADER)
        else:
            offline = ()
        partitions.append(
            {
                "error_code": error,
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": state.leader_epoch,
                "replica_nodes": replicas,
                "isr_nodes": state.isr,
                "offline_replicas": offline,
            }
        )
    return {
        "error_code": 0,
        "name": record.name,
        "topic_id": record.topic_id,
        "is_internal": record.internal,
        "partitions": partitions,
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _leader(
    ctx: RequestContext, leader: int, alive: set[int], reachable: set[int]
) -> tuple[ErrorCode, int]:
    """(error, leader id): a leader registered without the request's listener is no leader
    to this client: LISTENER_NOT_FOUND from v6 (LEADER_NOT_AVAILABLE before), as Kafka."""
    if leader == NO_LEADER:
        return ErrorCode.leader_not_available, NO_LEADER
    if leader in reachable:
        return ErrorCode.none, leader
    if leader in alive and ctx.api_version >= 6:
        return ErrorCode.listener_not_found, NO_LEADER
    return ErrorCode.leader_not_available, NO_LEADER


def error_entry(name: str | None, topic_id: uuid.UUID | None, code: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name or "",
        "topic_id": topic_id or uuid.UUID(int=0),
        "is_internal": False,
        "partitions": (),
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _missing(name: str) -> ErrorCode:
    """A topic that does not exist: INVALID_TOPIC_EXCEPTION if its name is illegal (so clients
    report an invalid topic, not an unknown one), else UNKNOWN_TOPIC_OR_PARTITION, as Kafka."""
    try:
        validate_topic_name(name)
    except KafkaProtocolError as exc:
        return ErrorCode(exc.code)
    return ErrorCode.unknown_topic_or_partition


@handles(ApiKey.METADATA, 0, 13)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    services = ctx.services
    topics = services.topics
    requested = request.topics
    brokers = broker_sets(ctx)
    if requested is None or (ctx.api_version == 0 and not requested):
        described = filter_authorized(
            ctx, Operation.DESCRIBE, ResourceType.TOPIC, topics.topics.values(), lambda r: r.name
        )
        entries = []
        built = 0
        for listed in described:
            entries.append(topic_entry(ctx, listed, brokers))
            built += listed.partitions
            if built >= PARTITIONS_PER_TURN:  # thousands of partitions: others go meanwhile
                built = 0
                await asyncio.sleep(0)
    else:
        allow_create = field(request, "allow_auto_topic_creation", True) and services.config.flag(
            "auto.create.topics.enable"
        )
        entries = []
        for wanted in requested:
            name = wanted.name
            topic_id = field(wanted, "topic_id", None)
            if name is None:
                by_id = topics.by_id.get(topic_id) if topic_id else None
                if by_id and not authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, by_id.name):
                    denied = ErrorCode.topic_authorization_failed
                    entries.append(error_entry(None, topic_id, denied))
                    continue
                entries.append(
                    topic_entry(ctx, by_id, brokers)
                    if by_id
                    else error_entry(None, topic_id, ErrorCode.unknown_topic_id)
                )
                continue
            record = topics.topics.get(name)
            if not authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name) or (
                record is None and allow_create and not may_create_topic(ctx, name)
            ):
                entries.append(error_entry(name, None, ErrorCode.topic_authorization_failed))
                continue
            if record is None and allow_create:
                try:
                    record = await services.admin.create(name, -1, -1, {})
                except KafkaProtocolError as exc:
                    # created meanwhile (by another broker, in a cluster, before this one's
                    # view has it): being created, as Kafka answers, so the client asks again
                    code = exc.code
                    if code == ErrorCode.topic_already_exists:
                        code = ErrorCode.leader_not_available
                    entries.append(error_entry(name, None, code))
                    continue
            if record is None:
                entries.append(error_entry(name, None, _missing(name)))
            else:
                entries.append(topic_entry(ctx, record, brokers))
    if field(request, "include_topic_authorized_operations", False):  # KIP-430
        for entry in entries:
            # as Kafka: every named topic but those the session may not describe (an unknown
            # one included), never disclosing anything about the latter
            if entry["name"] and entry["error_code"] != ErrorCode.topic_authorization_failed:
                entry["topic_authorized_operations"] = authorized_operations(
                    ctx, ResourceType.TOPIC, entry["name"]
                )
    cluster_operations = NO_AUTHORIZED_OPERATIONS
    if field(request, "include_cluster_authorized_operations", False):
        cluster_operations = authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)
    return {
        "throttle_time": 0,
        "brokers": [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in on_listener(services.membership.brokers(), ctx.session.listener)
        ],
        "cluster_id": services.membership.cluster_id(),
        "controller_id": services.membership.controller_id(),
        "topics": entries,
        "cluster_authorized_operations": cluster_operations,
        "error_code": 0,
    }
