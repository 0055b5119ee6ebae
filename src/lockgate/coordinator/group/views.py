# What the describing APIs see of the groups (DescribeGroups, ListGroups,
# ConsumerGroupDescribe): pure reads of a group, answered by the coordinator's methods so that
# no handler walks its groups.
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockgate.coordinator.group.consumer_group import ConsumerGroup
from lockgate.coordinator.group.group import Group


@dataclass(frozen=True, slots=True)
class NotFound:
    """GROUP_ID_NOT_FOUND, with Kafka's message for it."""

    message: str


@dataclass(frozen=True, slots=True)
class GroupListing:
    """ListGroups' entry: a consumer-protocol group (KIP-848) is listed with its own state."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str  # "classic", "consumer" or "share"


@dataclass(frozen=True, slots=True)
class ConsumerGroupView:
    """ConsumerGroupDescribe's group: the assignor it uses (the first configured one until it
    chose), and the topics its members subscribe to or are assigned, all of which the asker
    must be allowed to describe."""

    group: ConsumerGroup
    assignor: str
    topics: frozenset[str]


def listing(group: Group) -> GroupListing:
    if group.share is not None:
        return GroupListing(group.group_id, "share", group.share.state, "share")
    consumer = group.consumer
    return GroupListing(
        group.group_id,
        group.protocol_type,
        consumer.state.value if consumer is not None else group.state.value,
        "consumer" if consumer is not None else "classic",
    )


def consumer_view(
    group: ConsumerGroup, default_assignor: str, topic_counts: Mapping[str, int]
) -> ConsumerGroupView:
    topics: set[str] = set()
    for member in group.members.values():
        topics |= set(member.subscribed_topic_names) | member.subscribed(topic_counts)
        topics |= set(member.assigned)
    for assignment in group.target.values():
        topics |= set(assignment)
    return ConsumerGroupView(group, group.assignor or default_assignor, frozenset(topics))
