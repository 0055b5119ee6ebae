# The consumer group protocol (KIP-848) as a pure state machine: (group, request, now) →
# (new group, response, records). Members heartbeat; the coordinator keeps a group epoch
# (bumped by any change of membership, subscriptions or subscribed topics' partitions), a target
# assignment computed by a server-side assignor at that epoch, and moves each member toward its
# target incrementally.
#
# Invariants:
# - a partition is never handed to a member while another member still holds it (assigned or
#   pending revocation): it is withheld ("unreleased") until the holder's heartbeat no longer
#   lists it, or the holder leaves (a static member leaving with epoch -2 releases its pending
#   partitions and keeps only its assigned ones);
# - a member's epoch only moves to the target assignment epoch once it holds no partition the
#   target takes away (it stays at its epoch, in UNREVOKED_PARTITIONS, until it has revoked them);
# - every partition a member holds (assigned or pending revocation) has the epoch at which it
#   was assigned to the member (KIP-1251): a partition it keeps across epochs keeps its epoch,
#   one added is stamped with the target assignment epoch;
# - functions never mutate the group they are given: they return a new one.
from __future__ import annotations

import enum
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from lockgate.coordinator.group.assignors import ASSIGNORS, EMPTY, Assignment, Subscription
from lockgate.protocol.errors import ErrorCode

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
JOIN_EPOCH = 0

# topic → partition → the epoch at which the member was given the partition
PartitionEpochs = Mapping[str, Mapping[int, int]]


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class RecordKind(enum.IntEnum):
    """Kafka's __consumer_offsets key versions of the consumer protocol's records."""

    GROUP_EPOCH = 3  # ConsumerGroupMetadata
    PARTITION_METADATA = 4  # ConsumerGroupPartitionMetadata
    MEMBER = 5  # ConsumerGroupMemberMetadata
    TARGET_EPOCH = 6  # ConsumerGroupTargetAssignmentMetadata
    TARGET_MEMBER = 7  # ConsumerGroupTargetAssignmentMember
    CURRENT_ASSIGNMENT = 8  # ConsumerGroupCurrentMemberAssignment


@dataclass(frozen=True, slots=True)
class ClassicMember:
    """What a member speaking the classic protocol inside a consumer-protocol group (Kafka 4's
    mixed groups) said in its JoinGroup."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # while UNREVOKED_PARTITIONS: when the member is fenced if it has not revoked (-1 otherwise)
    revocation_deadline_ms: int = -1
    classic: ClassicMember | None = None  # set: the member speaks the classic protocol
    # of the partitions in `assigned` and `pending_revocation` (KIP-1251); one missing counts
    # as assigned at the member's epoch, the conservative reading Kafka gives older records
    assignment_epochs: PartitionEpochs = field(default_factory=dict)

    def assignment_epoch(self, topic: str, partition: int) -> int | None:
        """The epoch at which the member was given a partition it holds (assigned or pending
        revocation); None: it holds no such partition."""
        return self.held_epochs().get(topic, {}).get(partition)

    def held_epochs(self) -> dict[str, dict[int, int]]:
        """The assignment epoch of every partition the member holds (what its current
        assignment record carries)."""
        epochs: dict[str, dict[int, int]] = {}
        for assignment in (self.assigned, self.pending_revocation):
            for topic, parts in sorted(assignment.items()):
                had = self.assignment_epochs.get(topic, {})
                for p in sorted(parts):
                    epochs.setdefault(topic, {})[p] = had.get(p, max(self.member_epoch, 0))
        return epochs

    def needs_rejoin(self, assignment_epoch: int) -> bool:
        """A classic member learns of a new assignment only by rejoining (REBALANCE_IN_PROGRESS
        on its Heartbeat): it must until it is stable at the target assignment epoch."""
        return self.member_epoch != assignment_epoch or self.state != MemberState.STABLE

    def subscribed(self, topics: Mapping[str, int]) -> frozenset[str]:
        """The existing topics the member subscribes to, by name or by its regex."""
        names = {t for t in self.subscribed_topic_names if t in topics}
        if self.subscribed_topic_regex:
            pattern = re.compile(self.subscribed_topic_regex)
            names |= {t for t in topics if pattern.fullmatch(t) and not t.startswith("__")}
        return frozenset(names)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One change to persist: `value` is None for a tombstone, else an int epoch (group and
    target epochs), the partition counts (metadata), a ConsumerMember (member and current
    assignment) or an Assignment (target member)."""

    kind: RecordKind
    group_id: str
    member_id: str | None
    value: object | None


@dataclass(frozen=True, slots=True)
class ConsumerGroup:
    """A new group is at group and assignment epoch 1 (an empty assignment), as Kafka 4.4
    (KAFKA-20268): its first member's heartbeat bumps it to 2, the first computed assignment,
    so members start at epoch 2 (0 is the join epoch). A group replayed from the log or
    converted from a classic group takes its epochs from the record or the generation."""

    group_id: str
    group_epoch: int = 1
    assignment_epoch: int = 1
    members: Mapping[str, ConsumerMember] = field(default_factory=dict)
    static_members: Mapping[str, str] = field(default_factory=dict)  # instance id → member id
    target: Mapping[str, Assignment] = field(default_factory=dict)
    partition_counts: Mapping[str, int] = field(default_factory=dict)  # subscribed topics
    assignor: str = ""

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(
            m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
            for m in self.members.values()
            if m.member_epoch != STATIC_LEAVE_EPOCH
        ):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def holders(self) -> dict[tuple[str, int], str]:
        """Who holds each partition (assigned or pending revocation)."""
        held: dict[tuple[str, int], str] = {}
        for member in self.members.values():
            for assignment in (member.assigned, member.pending_revocation):
                for topic, parts in assignment.items():
                    held.update(dict.fromkeys(((topic, p) for p in parts), member.member_id))
        return held


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""
    # set: a classic member's JoinGroup (its owned partitions are in `owned`, epoch 0)
    classic: ClassicMember | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorCode
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    group: ConsumerGroup | None  # None: the group is unchanged (or, with no response, gone)
    response: HeartbeatResponse
    records: tuple[ConsumerRecord, ...] = ()


def _error(
    request: HeartbeatRequest, code: ErrorCode, message: str, config: ConsumerGroupConfig
) -> Outcome:
    return Outcome(
        None,
        HeartbeatResponse(
            code, request.member_id, request.member_epoch, config.heartbeat_interval_ms, None,
            message,
        ),
    )  # fmt: skip


def _validate(request: HeartbeatRequest, config: ConsumerGroupConfig) -> tuple[ErrorCode, str]:
    """Kafka's request checks: INVALID_REQUEST for missing or contradictory fields."""
    if not request.group_id:
        return ErrorCode.invalid_request, "GroupId can't be empty."
    if request.instance_id is not None and not request.instance_id:
        return ErrorCode.invalid_request, "InstanceId can't be empty."
    if not request.member_id:
        return ErrorCode.invalid_request, "MemberId can't be empty."
    epoch = request.member_epoch
    if epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms == -1:
            return (
                ErrorCode.invalid_request,
                "RebalanceTimeoutMs must be provided in first request.",
            )
        if request.owned and request.classic is None:
            return ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            return (
                ErrorCode.invalid_request,
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            )
    elif epoch == STATIC_LEAVE_EPOCH:
        if request.instance_id is None:
            return ErrorCode.invalid_request, "InstanceId can't be null."
    elif epoch < STATIC_LEAVE_EPOCH:
        return ErrorCode.invalid_request, f"MemberEpoch {epoch} is invalid."
    if request.subscribed_topic_regex is not None:
        try:
            re.compile(request.subscribed_topic_regex)
        except re.error as exc:
            return ErrorCode.invalid_regular_expression, f"SubscribedTopicRegex: {exc}"
    if request.server_assignor is not None and request.server_assignor not in config.assignors:
        return (
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
            + ", ".join(config.assignors),
        )
    return ErrorCode.none, ""


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(parts <= assigned.get(topic, frozenset()) for topic, parts in owned.items())


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still holds some of `partitions`: unknown (None) counts as yes."""
    if owned is None:
        return True
    return any(parts & owned.get(topic, frozenset()) for topic, parts in partitions.items())


def heartbeat(
    group: ConsumerGroup | None,
    request: HeartbeatRequest,
    topics: Mapping[str, int],
    config: ConsumerGroupConfig,
    now_ms: int,
    *,
    other_protocol_group: bool = False,
) -> Outcome:
    """ConsumerGroupHeartbeat. `topics`: every topic's partition count; `other_protocol_group`:
    a classic group with members has this id."""
    code, message = _validate(request, config)
    if code:
        return _error(request, code, message, config)
    if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
        return _leave(group, request, topics, config)
    joining = request.member_epoch == JOIN_EPOCH
    if group is None or other_protocol_group:
        if not joining or other_protocol_group:
            what = "is not a consumer group" if other_protocol_group else "not found"
            return _error(
                request, ErrorCode.group_id_not_found, f"Group {request.group_id} {what}.", config
            )
        group = ConsumerGroup(request.group_id)
    records: list[ConsumerRecord] = []
    members = dict(group.members)
    static_members = dict(group.static_members)
    target = dict(group.target)

    # -- the member ------------------------------------------------------------------------------
    member = members.get(request.member_id)
    replaced_static = False
    if request.instance_id is not None:
        holder = static_members.get(request.instance_id)
        if joining and holder is not None and holder != request.member_id:
            old = members[holder]
            # a classic static member that restarts fences its old incarnation (KIP-345), as
            # in a classic group; a consumer-protocol one must have left with epoch -2
            if old.member_epoch != STATIC_LEAVE_EPOCH and request.classic is None:
                return _error(
                    request, ErrorCode.unreleased_instance_id,
                    f"Static member {holder} with instance id {request.instance_id} is present.",
                    config,
                )  # fmt: skip
            # the restarted static member takes its predecessor's place and assignment, as a
            # new member at epoch 0 whose previous epoch is 0 too (as Kafka 4.4); its target
            # and current assignment are written under its new id at once, so a restart
            # finds them even when its reconciliation changes nothing
            del members[holder]
            records += member_tombstones(group.group_id, holder)
            member = replace(
                old,
                member_id=request.member_id,
                member_epoch=JOIN_EPOCH,
                previous_member_epoch=JOIN_EPOCH,
            )
            replaced_static = True
            if holder in target:
                target[request.member_id] = target.pop(holder)
                records.append(
                    ConsumerRecord(RecordKind.TARGET_MEMBER, group.group_id, request.member_id,
                                   target[request.member_id])
                )  # fmt: skip
            records.append(
                ConsumerRecord(RecordKind.CURRENT_ASSIGNMENT, group.group_id, request.member_id,
                               member)
            )  # fmt: skip
        elif not joining and holder is None:
            return _error(request, ErrorCode.unknown_member_id, "Unknown static member.", config)
        elif not joining and holder != request.member_id:
            return _error(request, ErrorCode.fenced_instance_id, "Instance id is fenced.", config)
    if member is None:
        if not joining:
            return _error(
                request, ErrorCode.unknown_member_id,
                f"Member {request.member_id} is not a member of group {group.group_id}.", config,
            )  # fmt: skip
        if len(members) >= config.max_size:
            return _error(
                request, ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {config.max_size} "
                "members.", config,
            )  # fmt: skip
        member = ConsumerMember(request.member_id)
        new_member = True
    else:
        new_member = request.member_id not in group.members and not replaced_static
        if request.member_epoch > member.member_epoch:
            return _error(request, ErrorCode.fenced_member_epoch,
                          f"Member epoch {request.member_epoch} is ahead of "
                          f"{member.member_epoch}.", config)  # fmt: skip
        if 0 < request.member_epoch < member.member_epoch and (
            request.member_epoch != member.previous_member_epoch
            or not _is_subset(request.owned, member.assigned)
        ):
            return _error(request, ErrorCode.fenced_member_epoch,
                          f"Member epoch {request.member_epoch} is behind "
                          f"{member.member_epoch}.", config)  # fmt: skip
    updated = replace(
        member,
        instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
        rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            request.rebalance_timeout_ms
            if request.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        subscribed_topic_names=(
            tuple(sorted(set(request.subscribed_topic_names)))
            if request.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        subscribed_topic_regex=(
            (request.subscribed_topic_regex or None)
            if request.subscribed_topic_regex is not None
            else member.subscribed_topic_regex
        ),
        server_assignor=(
            request.server_assignor
            if request.server_assignor is not None
            else member.server_assignor
        ),
        client_id=request.client_id,
        client_host=request.client_host,
        classic=request.classic if request.classic is not None else member.classic,
    )
    bump = new_member or (
        (
            updated.subscribed_topic_names,
            updated.subscribed_topic_regex,
            updated.server_assignor,
        )
        != (
            member.subscribed_topic_names,
            member.subscribed_topic_regex,
            member.server_assignor,
        )
    )
    if updated != member or new_member or replaced_static:
        records.append(
            ConsumerRecord(RecordKind.MEMBER, group.group_id, updated.member_id, updated)
        )
    members[updated.member_id] = updated
    if updated.instance_id is not None:
        static_members[updated.instance_id] = updated.member_id
    group = replace(group, members=members, static_members=static_members, target=target)

    # -- group epoch and target assignment -----------------------------------------------------
    group, more = _refresh(group, topics, config, force_bump=bump)
    records += more
    # -- reconciliation --------------------------------------------------------------------------
    before = group.members[updated.member_id]
    reconciled = reconcile(group, before, request.owned, now_ms)
    if reconciled != before:
        group = replace(group, members={**group.members, reconciled.member_id: reconciled})
        records.append(ConsumerRecord(RecordKind.CURRENT_ASSIGNMENT, group.group_id,
                                      reconciled.member_id, reconciled))  # fmt: skip
    full_request = (
        joining
        or request.classic is not None
        or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
    )
    changed = reconciled.assigned != member.assigned or new_member or replaced_static
    return Outcome(
        group,
        HeartbeatResponse(
            ErrorCode.none,
            reconciled.member_id,
            reconciled.member_epoch,
            config.heartbeat_interval_ms,
            reconciled.assigned if full_request or changed else None,
        ),
        tuple(records),
    )


def member_tombstones(group_id: str, member_id: str) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(RecordKind.CURRENT_ASSIGNMENT, group_id, member_id, None),
        ConsumerRecord(RecordKind.TARGET_MEMBER, group_id, member_id, None),
        ConsumerRecord(RecordKind.MEMBER, group_id, member_id, None),
    ]


def _leave(
    group: ConsumerGroup | None,
    request: HeartbeatRequest,
    topics: Mapping[str, int],
    config: ConsumerGroupConfig,
) -> Outcome:
    if group is None:
        return _error(
            request, ErrorCode.group_id_not_found, f"Group {request.group_id} not found.", config
        )
    if request.instance_id is not None:
        holder = group.static_members.get(request.instance_id)
        if holder is None:
            return _error(request, ErrorCode.unknown_member_id, "Unknown static member.", config)
        if holder != request.member_id:
            return _error(request, ErrorCode.fenced_instance_id, "Instance id is fenced.", config)
    member = group.members.get(request.member_id)
    if member is None:
        return _error(
            request, ErrorCode.unknown_member_id,
            f"Member {request.member_id} is not a member of group {group.group_id}.", config,
        )  # fmt: skip
    answer = HeartbeatResponse(
        ErrorCode.none, request.member_id, request.member_epoch, config.heartbeat_interval_ms
    )
    if request.member_epoch == STATIC_LEAVE_EPOCH:
        # KIP-848 static membership: the member keeps its place and assignment for a while
        # (its session), so that a restart does not move partitions; as Kafka, its assigned
        # partitions count as assigned at epoch 0 from now on, so the restarted instance, which
        # takes them over at whatever epoch, may commit them. Partitions it was still to
        # revoke are released at once (a process that left no longer consumes them), so the
        # members waiting for them get them on their next heartbeat; and it is not fenced for
        # not revoking them (Kafka's rebalance timeout ignores a member that left its epoch).
        away = replace(
            member,
            member_epoch=STATIC_LEAVE_EPOCH,
            pending_revocation={},
            revocation_deadline_ms=-1,
            assignment_epochs={
                t: dict.fromkeys(sorted(parts), 0) for t, parts in sorted(member.assigned.items())
            },
        )
        group = replace(group, members={**group.members, member.member_id: away})
        record = ConsumerRecord(
            RecordKind.CURRENT_ASSIGNMENT, group.group_id, member.member_id, away
        )
        return Outcome(group, answer, (record,))
    removed = remove_member(group, member.member_id, topics, config)
    return Outcome(removed.group, answer, removed.records)


def remove_member(
    group: ConsumerGroup,
    member_id: str,
    topics: Mapping[str, int],
    config: ConsumerGroupConfig,
) -> Outcome:
    """A member leaves or is fenced (session or revocation timeout): the group epoch moves on
    and the others get a new target assignment without it."""
    member = group.members.get(member_id)
    if member is None:
        return _no_change(group, member_id, config)
    members = {m: v for m, v in group.members.items() if m != member_id}
    static_members = {i: m for i, m in group.static_members.items() if m != member_id}
    target = {m: a for m, a in group.target.items() if m != member_id}
    records = member_tombstones(group.group_id, member_id)
    group = replace(group, members=members, static_members=static_members, target=target)
    group, more = _refresh(group, topics, config, force_bump=True)
    return Outcome(
        group,
        HeartbeatResponse(ErrorCode.none, member_id, LEAVE_EPOCH, config.heartbeat_interval_ms),
        tuple(records + more),
    )


def _no_change(group: ConsumerGroup, member_id: str, config: ConsumerGroupConfig) -> Outcome:
    return Outcome(
        None,
        HeartbeatResponse(
            ErrorCode.unknown_member_id, member_id, LEAVE_EPOCH, config.heartbeat_interval_ms
        ),
    )


def expire_revocation(
    group: ConsumerGroup,
    member_id: str,
    topics: Mapping[str, int],
    config: ConsumerGroupConfig,
    now_ms: int,
) -> Outcome:
    """The rebalance timeout: a member still holding partitions it was asked to revoke by its
    deadline is removed from the group (fenced), so the others can get them."""
    member = group.members.get(member_id)
    if (
        member is None
        or member.state != MemberState.UNREVOKED_PARTITIONS
        or member.revocation_deadline_ms < 0
        or member.revocation_deadline_ms > now_ms
    ):
        return _no_change(group, member_id, config)
    return remove_member(group, member_id, topics, config)


def rearm_revocations(group: ConsumerGroup, now_ms: int) -> ConsumerGroup:
    """The coordinator has loaded the group (a restart, or a broker taking the offsets
    partition over): revocation deadlines are not persisted, so, as Kafka 4.4, every member
    whose current assignment says it is still revoking (UNREVOKED_PARTITIONS) is given its full
    rebalance timeout again from now. A static member that had left (epoch -2) while it was
    revoking is among them, as in Kafka: it is fenced at that deadline unless its restarted
    instance has replaced it (before the load it was not timed out)."""
    members = {
        member_id: replace(
            member, revocation_deadline_ms=now_ms + max(member.rebalance_timeout_ms, 0)
        )
        if member.state == MemberState.UNREVOKED_PARTITIONS
        else member
        for member_id, member in group.members.items()
    }
    return replace(group, members=members)


def refresh_metadata(
    group: ConsumerGroup, topics: Mapping[str, int], config: ConsumerGroupConfig
) -> Outcome:
    """Topics created, deleted or grown: a change in the subscribed topics' partition counts
    bumps the group epoch and computes a new target assignment."""
    refreshed, records = _refresh(group, topics, config, force_bump=False)
    return Outcome(
        refreshed if records else None,
        HeartbeatResponse(ErrorCode.none, "", group.group_epoch, config.heartbeat_interval_ms),
        tuple(records),
    )


def _refresh(
    group: ConsumerGroup,
    topics: Mapping[str, int],
    config: ConsumerGroupConfig,
    *,
    force_bump: bool,
) -> tuple[ConsumerGroup, list[ConsumerRecord]]:
    records: list[ConsumerRecord] = []
    subscribed: set[str] = set()
    for m in group.members.values():
        subscribed |= m.subscribed(topics)
    counts = {t: topics[t] for t in sorted(subscribed)}
    bump = force_bump
    if counts != dict(group.partition_counts):
        bump = True
        group = replace(group, partition_counts=counts)
        records.append(ConsumerRecord(RecordKind.PARTITION_METADATA, group.group_id, None, counts))
    if bump:
        group = replace(group, group_epoch=group.group_epoch + 1)
        records.append(
            ConsumerRecord(RecordKind.GROUP_EPOCH, group.group_id, None, group.group_epoch)
        )
    if group.group_epoch > group.assignment_epoch:
        group, more = _assign(group, topics, config)
        records += more
    return group, records


def choose_assignor(group: ConsumerGroup, config: ConsumerGroupConfig) -> str:
    """The assignor most members ask for (ties: the configured order), else the default."""
    wanted = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
    if not wanted:
        return config.assignors[0]
    return max(config.assignors, key=lambda name: (wanted[name], -config.assignors.index(name)))


def _assign(
    group: ConsumerGroup, topics: Mapping[str, int], config: ConsumerGroupConfig
) -> tuple[ConsumerGroup, list[ConsumerRecord]]:
    name = choose_assignor(group, config)
    subscriptions = {
        m.member_id: Subscription(m.subscribed(topics), m.rack_id) for m in group.members.values()
    }
    counts = {t: topics[t] for t in group.partition_counts if t in topics}
    target = ASSIGNORS[name](subscriptions, counts, group.target)
    records = [
        ConsumerRecord(RecordKind.TARGET_MEMBER, group.group_id, member_id, assignment)
        for member_id, assignment in sorted(target.items())
        if dict(group.target.get(member_id, EMPTY)) != dict(assignment)
    ]
    records.append(ConsumerRecord(RecordKind.TARGET_EPOCH, group.group_id, None, group.group_epoch))
    return (
        replace(group, target=target, assignment_epoch=group.group_epoch, assignor=name),
        records,
    )


def reconcile(
    group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None, now_ms: int
) -> ConsumerMember:
    """One step of the member toward its target assignment (Kafka's current assignment
    builder). `owned`: the partitions the member reports holding (None: not reported)."""
    if member.member_epoch == STATIC_LEAVE_EPOCH:
        return member
    target_epoch = group.assignment_epoch
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(group, member, min(member.member_epoch + 1, target_epoch), owned, now_ms)
    if member.state == MemberState.UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
        return _next(group, member, member.member_epoch, owned, now_ms)
    return member


def _next(
    group: ConsumerGroup,
    member: ConsumerMember,
    member_epoch: int,
    owned: Assignment | None,
    now_ms: int,
) -> ConsumerMember:
    target = group.target.get(member.member_id, EMPTY)
    keep: dict[str, frozenset[int]] = {}
    revoke: dict[str, frozenset[int]] = {}
    add: dict[str, frozenset[int]] = {}
    unreleased = False
    holders = group.holders()
    for topic in sorted(set(target) | set(member.assigned)):
        wanted = target.get(topic, frozenset())
        current = member.assigned.get(topic, frozenset())
        kept = current & wanted
        if kept:
            keep[topic] = kept
        if current - kept:
            revoke[topic] = current - kept
        free = set()
        for p in sorted(wanted - kept):
            holder = holders.get((topic, p))
            if holder is not None and holder != member.member_id:
                unreleased = True
            else:
                free.add(p)
        if free:
            add[topic] = frozenset(free)
    epoch_moves = member.member_epoch != member_epoch
    if revoke and _owns_any(owned, revoke):
        # as Kafka, the rebalance timeout runs from the moment the member is asked to revoke
        # at this epoch: again in full when it moves on to another epoch with more to revoke
        deadline = member.revocation_deadline_ms
        if member.state != MemberState.UNREVOKED_PARTITIONS or deadline < 0 or epoch_moves:
            deadline = now_ms + max(member.rebalance_timeout_ms, 0)
        return replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            member_epoch=member_epoch,
            previous_member_epoch=member.previous_member_epoch
            if not epoch_moves
            else member.member_epoch,
            assigned=keep,
            pending_revocation=revoke,
            revocation_deadline_ms=deadline,
            assignment_epochs=_stamp(member, (keep, revoke), {}, member_epoch),
        )
    assigned = {t: keep.get(t, frozenset()) | add.get(t, frozenset()) for t in set(keep) | set(add)}
    target_epoch = group.assignment_epoch
    return replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        member_epoch=target_epoch,
        previous_member_epoch=member.member_epoch
        if member.member_epoch != target_epoch
        else member.previous_member_epoch,
        assigned=dict(sorted(assigned.items())),
        pending_revocation={},
        revocation_deadline_ms=-1,
        assignment_epochs=_stamp(member, (keep,), add, target_epoch),
    )


def _stamp(
    member: ConsumerMember, kept: Iterable[Assignment], added: Assignment, epoch: int
) -> dict[str, dict[int, int]]:
    """The assignment epochs after a reconciliation step (`kept`: partitions the member had
    and still holds, whether it keeps them or has to revoke them; `added`: partitions it gets
    at `epoch`). A partition it had revoked and gets back counts as added."""
    held = member.held_epochs()
    epochs: dict[str, dict[int, int]] = {}
    for assignment in kept:
        for topic, parts in sorted(assignment.items()):
            for p in sorted(parts):
                epochs.setdefault(topic, {})[p] = held[topic][p]
    for topic, parts in sorted(added.items()):
        for p in sorted(parts):
            epochs.setdefault(topic, {})[p] = epoch
    return epochs


def validate_offset_commit(
    group: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    member_epoch: int,
    partitions: Iterable[tuple[str, int]],
    *,
    transactional: bool,
    api_version: int,
) -> ErrorCode:
    """Kafka's checks of an OffsetCommit or TxnOffsetCommit to the group, one answer for the
    whole request. `partitions`: those the commit would write (known topics, metadata not too
    large). The member's epoch is accepted, and so is an older one (KIP-1251: its heartbeat's
    answer may not have reached the client yet) when every partition is one the member holds
    and was given at that epoch or before; a classic member (mixed groups) is answered
    ILLEGAL_GENERATION where a consumer-protocol one gets STALE_MEMBER_EPOCH. A transactional
    commit's STALE_MEMBER_EPOCH is the caller's to map (TxnOffsetCommit before v6 has none)."""
    # the admin client and consumers without group management: only into an empty group
    if member_epoch < 0 and not group.members:
        return ErrorCode.none
    # a producer that did not pass the consumer's group metadata (no generation, member or
    # instance) is not fenced (KIP-447)
    if transactional and member_epoch == -1 and not member_id and instance_id is None:
        return ErrorCode.none
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    classic = member.classic is not None
    if not transactional and not classic and api_version < 9:
        return ErrorCode.unsupported_version  # KIP-848 members commit with v9+
    if member_epoch == member.member_epoch:
        return ErrorCode.none
    stale = ErrorCode.illegal_generation if classic else ErrorCode.stale_member_epoch
    if member_epoch > member.member_epoch:
        return stale
    for topic, partition in partitions:
        assigned_at = member.assignment_epoch(topic, partition)
        if assigned_at is None or member_epoch < assigned_at:
            return stale
    return ErrorCode.none


def validate_offset_fetch(
    group: ConsumerGroup, member_id: str | None, member_epoch: int
) -> ErrorCode:
    """Kafka's checks of an OffsetFetch (v9+) to the group: without a member id and epoch (the
    admin client) anyone may read; otherwise the member must exist at exactly its epoch
    (KIP-1251 relaxes commits only)."""
    if member_id is None and member_epoch < 0:
        return ErrorCode.none
    member = group.members.get(member_id) if member_id is not None else None
    if member is None:
        return ErrorCode.unknown_member_id
    if member_epoch != member.member_epoch:
        return (
            ErrorCode.illegal_generation
            if member.classic is not None
            else ErrorCode.stale_member_epoch
        )
    return ErrorCode.none


def replay(group: ConsumerGroup | None, record: ConsumerRecord) -> ConsumerGroup | None:
    """Applies one persisted record (start-up replay); None: the group was deleted."""
    value = record.value
    if record.kind == RecordKind.GROUP_EPOCH and value is None:
        return None
    group = group or ConsumerGroup(record.group_id)
    member_id = record.member_id or ""
    if record.kind == RecordKind.GROUP_EPOCH:
        assert isinstance(value, int)
        return replace(group, group_epoch=value)
    if record.kind == RecordKind.TARGET_EPOCH:
        return replace(group, assignment_epoch=value if isinstance(value, int) else 0)
    if record.kind == RecordKind.PARTITION_METADATA:
        return replace(group, partition_counts=dict(value) if isinstance(value, dict) else {})
    if record.kind == RecordKind.TARGET_MEMBER:
        target = {m: a for m, a in group.target.items() if m != member_id}
        if isinstance(value, dict):
            target[member_id] = value
        return replace(group, target=target)
    members = dict(group.members)
    static_members = dict(group.static_members)
    if value is None:
        if record.kind == RecordKind.MEMBER:
            gone = members.pop(member_id, None)
            if gone is not None and gone.instance_id is not None:
                static_members.pop(gone.instance_id, None)
        return replace(group, members=members, static_members=static_members)
    assert isinstance(value, ConsumerMember)
    current = members.get(member_id, ConsumerMember(member_id))
    if record.kind == RecordKind.MEMBER:
        current = replace(
            current,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            subscribed_topic_names=value.subscribed_topic_names,
            subscribed_topic_regex=value.subscribed_topic_regex,
            server_assignor=value.server_assignor,
            classic=value.classic,
        )
        if current.instance_id is not None:
            static_members[current.instance_id] = member_id
    else:
        current = replace(
            current,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=value.state,
            assigned=value.assigned,
            pending_revocation=value.pending_revocation,
            assignment_epochs=value.assignment_epochs,
        )
    members[member_id] = current
    return replace(group, members=members, static_members=static_members)


@dataclass(frozen=True, slots=True)
class ClassicState:
    """A member of a classic group, as the conversion to the consumer protocol needs it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    classic: ClassicMember
    subscribed_topic_names: tuple[str, ...]
    assigned: Assignment


def convert_classic(
    group_id: str, generation: int, members: list[ClassicState], topics: Mapping[str, int]
) -> tuple[ConsumerGroup, tuple[ConsumerRecord, ...]]:
    """Kafka 4's online upgrade: a stable classic group whose first consumer-protocol member
    arrives becomes a consumer group at its generation, each member keeping its assignment
    (also as its target), so nothing moves until the next group epoch."""
    converted = {
        m.member_id: ConsumerMember(
            m.member_id,
            m.instance_id,
            None,
            m.client_id,
            m.client_host,
            member_epoch=generation,
            previous_member_epoch=generation,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(m.subscribed_topic_names))),
            assigned={t: p for t, p in m.assigned.items() if t in topics},
            classic=m.classic,
            # what a classic member holds it got at the group's generation at the latest
            assignment_epochs={
                t: dict.fromkeys(sorted(parts), generation)
                for t, parts in m.assigned.items()
                if t in topics
            },
        )
        for m in members
    }
    subscribed = set().union(*(m.subscribed(topics) for m in converted.values()))
    group = ConsumerGroup(
        group_id,
        group_epoch=generation,
        assignment_epoch=generation,
        members=converted,
        static_members={m.instance_id: m.member_id for m in members if m.instance_id},
        target={m: dict(v.assigned) for m, v in converted.items()},
        partition_counts={t: topics[t] for t in sorted(subscribed)},
    )
    records = [
        ConsumerRecord(RecordKind.GROUP_EPOCH, group_id, None, generation),
        ConsumerRecord(RecordKind.PARTITION_METADATA, group_id, None, dict(group.partition_counts)),
    ]
    for member in converted.values():
        records += [
            ConsumerRecord(RecordKind.MEMBER, group_id, member.member_id, member),
            ConsumerRecord(RecordKind.TARGET_MEMBER, group_id, member.member_id, member.assigned),
            ConsumerRecord(RecordKind.CURRENT_ASSIGNMENT, group_id, member.member_id, member),
        ]
    records.append(ConsumerRecord(RecordKind.TARGET_EPOCH, group_id, None, generation))
    return group, tuple(records)
