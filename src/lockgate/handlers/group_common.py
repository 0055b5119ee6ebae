# What the consumer-group (KIP-848) and share-group (KIP-932) heartbeat and describe handlers
# put on the wire alike: an assignment by topic id, the refusal of unauthorized subscribed
# topics, a heartbeat's answers, a described group's entry before it is filled in, and
# the coordinator's refusals.
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from lockgate.coordinator.group.assignors import Assignment
from lockgate.coordinator.group.consumer_group import HeartbeatResponse
from lockgate.coordinator.group.share_group import ShareHeartbeatResponse
from lockgate.coordinator.group.views import NotFound
from lockgate.handlers.registry import RequestContext
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import NO_AUTHORIZED_OPERATIONS, authorize

V = TypeVar("V")


def wire_assignment(
    ctx: RequestContext, assignment: Assignment | None, *, names: bool = False
) -> dict[str, Any] | None:
    """The topic partitions by topic id (and, for describe, `names`), topics in name order;
    a topic deleted meanwhile, or one with no partitions, is left out. None (no change to
    tell) stays None."""
    if assignment is None:
        return None
    topics = ctx.services.topics.topics
    return {
        "topic_partitions": [
            {"topic_id": topics[name].topic_id, "partitions": sorted(parts)}
            | ({"topic_name": name} if names else {})
            for name, parts in sorted(assignment.items())
            if name in topics and parts
        ]
    }


def unauthorized_subscription(ctx: RequestContext, names: Iterable[str] | None) -> str | None:
    """TOPIC_AUTHORIZATION_FAILED's message when a subscribed topic name lacks DESCRIBE."""
    denied = sorted(
        n for n in set(names or ()) if not authorize(ctx, Operation.DESCRIBE, ResourceType.TOPIC, n)
    )
    if not denied:
        return None
    return "The group has subscribed to topics that are not authorized: " + ", ".join(denied)


def heartbeat_refused(
    code: ErrorCode, message: str | None, member_id: str | None, member_epoch: int
) -> dict[str, Any]:
    """The answer to a heartbeat refused with `code` (no assignment, no interval)."""
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "member_id": member_id,
        "member_epoch": member_epoch,
        "heartbeat_interval": 0,
    }


def accepted(
    ctx: RequestContext, answer: HeartbeatResponse | ShareHeartbeatResponse
) -> dict[str, Any]:
    """The answer to a heartbeat the coordinator accepted."""
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "member_id": answer.member_id,
        "member_epoch": answer.member_epoch,
        "heartbeat_interval": answer.heartbeat_interval_ms,
        "assignment": wire_assignment(ctx, answer.assignment),
    }


def described(group_id: str, code: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    """A described group's entry: empty, with `code`."""
    return {
        "error_code": code,
        "error_message": None,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
        "authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def found(entry: dict[str, Any], view: V | ErrorCode | NotFound) -> V | None:
    """The coordinator's view of the group; or None, its refusal marked on `entry` (an error
    code such as NOT_COORDINATOR, or GROUP_ID_NOT_FOUND with Kafka's message)."""
    if isinstance(view, ErrorCode):
        entry["error_code"] = view
        return None
    if isinstance(view, NotFound):
        entry["error_code"] = ErrorCode.group_id_not_found
        entry["error_message"] = view.message
        return None
    return view
