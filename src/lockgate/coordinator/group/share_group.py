# Share groups (KIP-932) as a pure state machine: (group, request, topics, now) → (new group,
# response, records, share partitions to initialize). The same shape as the consumer group
# protocol (consumer_group.py) with no revocation phase: a partition may be held by several
# members at once, so a member whose epoch differs from the target assignment's jumps straight
# to its target.
#
# Invariants:
# - the member id is the client's own (any non-empty string); the coordinator never makes one;
# - only *initialized* share partitions (those the share coordinator holds state for, record
#   15's InitializedTopics) are assignable: a subscription to a topic first marks its partitions
#   initializing (record 15) and asks for their initialization (ShareOutcome.initialize); the
#   runtime calls the persister, then `initialized` or `uninitialized` moves them on, and a later
#   heartbeat sees "initialized but unassigned" partitions, bumps the group epoch and assigns
#   them (as Kafka 4.4: the first member of a fresh group gets its partitions on its second
#   heartbeat);
# - an initializing entry older than the retry interval is asked for again; every write of
#   record 15 restarts its entries' clocks (as Kafka), but entries restored by a load are due at
#   once: no initialization of the new coordinator is under way, and waiting the interval after
#   each restart could keep them unassignable for as long as restarts come faster;
# - the group epoch is bumped by a member joining, leaving or changing its subscription, by a
#   change of the subscribed topics' metadata (the metadata hash), and by initialized partitions
#   the target assignment does not cover yet;
# - functions never mutate the group they are given: they return a new one.
from __future__ import annotations

import enum
import hashlib
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from lockgate.coordinator.group.assignors import EMPTY, Assignment
from lockgate.protocol.errors import ErrorCode

LEAVE_EPOCH = -1
JOIN_EPOCH = 0
STABLE = 0  # ShareGroupCurrentMemberAssignmentValue.State: share members are always STABLE
UNINITIALIZED_START_OFFSET = -1  # the share-partition leader resolves it (share.auto.offset.reset)
DUE_MS = -(1 << 62)  # the stamp of a loaded initializing entry: older than any retry interval
MAX_MEMBER_ID_CHARS = 36

# topic name → (topic id, partition count), of the topics that exist
Topics = Mapping[str, tuple[uuid.UUID, int]]


class ShareRecordKind(enum.IntEnum):
    """Record types (key versions) of share groups in __consumer_offsets."""

    MEMBER = 10  # ShareGroupMemberMetadata
    GROUP_EPOCH = 11  # ShareGroupMetadata
    TARGET_EPOCH = 12  # ShareGroupTargetAssignmentMetadata
    TARGET_MEMBER = 13  # ShareGroupTargetAssignmentMember
    CURRENT_ASSIGNMENT = 14  # ShareGroupCurrentMemberAssignment
    STATE_PARTITIONS = 15  # ShareGroupStatePartitionMetadata


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = STABLE
    assigned: Assignment = field(default_factory=dict)

    def metadata(self) -> tuple[object, ...]:
        """What record 10 holds of the member."""
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names)


@dataclass(frozen=True, slots=True)
class TopicInit:
    """A topic's share partitions in record 15, and (initializing ones) since when."""

    name: str
    partitions: frozenset[int]
    since_ms: int = 0


@dataclass(frozen=True, slots=True)
class StatePartitions:
    """Record 15: the group's share partitions by state, by topic id."""

    initializing: Mapping[uuid.UUID, TopicInit] = field(default_factory=dict)
    initialized: Mapping[uuid.UUID, TopicInit] = field(default_factory=dict)
    deleting: Mapping[uuid.UUID, str] = field(default_factory=dict)

    def stamped(self, now_ms: int) -> StatePartitions:
        return replace(
            self,
            initializing={t: replace(e, since_ms=now_ms) for t, e in self.initializing.items()},
        )


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One change to persist: `value` None for a tombstone, else an int epoch
    (TARGET_EPOCH), (epoch, metadata hash) (GROUP_EPOCH), (epoch, timestamp) (TARGET_EPOCH),
    a ShareMember (MEMBER, CURRENT_ASSIGNMENT), an Assignment (TARGET_MEMBER) or a
    StatePartitions (STATE_PARTITIONS)."""

    kind: ShareRecordKind
    group_id: str
    member_id: str | None
    value: object | None


@dataclass(frozen=True, slots=True)
class ShareGroup:
    """A new group is at group and assignment epoch 1 (an empty assignment), as Kafka 4.4
    (KAFKA-20268): its first member joins at epoch 2."""

    group_id: str
    group_epoch: int = 1
    metadata_hash: int = 0
    assignment_epoch: int = 1
    assignment_timestamp_ms: int = 0  # 0: the next assignment need not wait for the interval
    members: Mapping[str, ShareMember] = field(default_factory=dict)
    target: Mapping[str, Assignment] = field(default_factory=dict)
    partitions: StatePartitions | None = None  # record 15, if written

    @property
    def state(self) -> str:
        """ShareGroupDescribe's and ListGroups' state."""
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscribed_topic_names)

    def share_partitions(self) -> dict[uuid.UUID, frozenset[int]]:
        """The share partitions with state (initialized or initializing), for deletion."""
        held: dict[uuid.UUID, frozenset[int]] = {}
        if self.partitions is not None:
            for entries in (self.partitions.initialized, self.partitions.initializing):
                for topic_id, entry in entries.items():
                    held[topic_id] = held.get(topic_id, frozenset()) | entry.partitions
        return held


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    heartbeat_interval_ms: int = 5000
    max_size: int = 200
    assignment_interval_ms: int = 1000
    initialize_retry_interval_ms: int = 30000


@dataclass(frozen=True, slots=True)
class ShareHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResponse:
    error: ErrorCode
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class InitializeRequest:
    """Share partitions to initialize: state epoch = the group epoch; per topic id its name,
    partitions and start offset (-1: a topic new to the group, resolved by the leader with
    share.auto.offset.reset; 0: new partitions of a topic the group knows, so that nothing
    produced before their initialization is skipped)."""

    group_id: str
    state_epoch: int
    topics: Mapping[uuid.UUID, tuple[str, frozenset[int], int]]


@dataclass(frozen=True, slots=True)
class ShareOutcome:
    group: ShareGroup | None  # None: unchanged
    response: ShareHeartbeatResponse
    records: tuple[ShareRecord, ...] = ()
    initialize: InitializeRequest | None = None


def _error(
    request: ShareHeartbeatRequest, code: ErrorCode, message: str, interval_ms: int = 0
) -> ShareOutcome:
    return ShareOutcome(
        None,
        ShareHeartbeatResponse(
            code, request.member_id, request.member_epoch, interval_ms, None, message
        ),
    )


def validate(request: ShareHeartbeatRequest) -> tuple[ErrorCode, str]:
    """Kafka's request checks (INVALID_REQUEST), in its order."""
    if not request.member_id:
        return ErrorCode.invalid_request, "MemberId can't be empty."
    if not request.group_id:
        return ErrorCode.invalid_request, "GroupId can't be empty."
    if request.rack_id is not None and not request.rack_id:
        return ErrorCode.invalid_request, "RackId can't be empty."
    if request.member_epoch == JOIN_EPOCH:
        if not request.subscribed_topic_names:
            return ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request."
    elif request.member_epoch < LEAVE_EPOCH:
        return ErrorCode.invalid_request, "MemberEpoch is invalid."
    return ErrorCode.none, ""


def metadata_hash(subscribed: Iterable[str], topics: Topics) -> int:
    """A signed 64-bit digest of the subscribed topics that exist (name, id, partitions): a
    change bumps the group epoch. (Kafka's value differs; it is only compared with itself.)"""
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(set(subscribed)):
        if name in topics:
            topic_id, count = topics[name]
            digest.update(f"{name}\0{topic_id}\0{count}\n".encode())
    if digest.digest() == hashlib.blake2b(digest_size=8).digest():
        return 0  # nothing subscribed exists
    return int.from_bytes(digest.digest(), "big", signed=True)


# -- the simple assignor ---------------------------------------------------------------------------

TP = tuple[str, int]


def _share_out(
    members: list[str],
    partitions: list[TP],
    current: Mapping[str, set[TP]],
) -> dict[str, set[TP]]:
    """Kafka's simple assignor on one set of partitions and the members that may take them:
    each partition goes to S = ceil(M / P) members, member i wants ceil((i+1)x) - ceil(ix)
    partitions (x = S*P/M); existing assignments are kept up to each member's quota, then
    over-shared partitions are taken back, then under-shared ones handed to members below
    their quota (a member never gets a partition twice; a slight imbalance is tolerated)."""
    if not members or not partitions:
        return {m: set() for m in members}
    count_m, count_p = len(members), len(partitions)
    sharing = (count_m + count_p - 1) // count_p
    precise = sharing * count_p / count_m
    desired = {
        m: math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i, m in enumerate(members)
    }
    targets = set(partitions)
    by_member: dict[str, set[TP]] = {}
    by_partition: dict[TP, list[str]] = {tp: [] for tp in partitions}
    for m in members:  # keep what is still assignable, then trim members over their quota
        kept = sorted(tp for tp in current.get(m, set()) if tp in targets)[: desired[m]]
        by_member[m] = set(kept)
        for tp in kept:
            by_partition[tp].append(m)
    for tp in partitions:  # take back from partitions shared by more than S
        while len(by_partition[tp]) > sharing:
            gone = by_partition[tp].pop()
            by_member[gone].discard(tp)
    unfilled = [m for m in members if len(by_member[m]) < desired[m]]
    cursor = 0
    for tp in partitions:
        wanted = sharing - len(by_partition[tp])
        tried = 0
        while wanted > 0 and unfilled and tried < len(unfilled):
            m = unfilled[cursor % len(unfilled)]
            if m in by_partition[tp]:
                cursor += 1
                tried += 1
                continue
            by_member[m].add(tp)
            by_partition[tp].append(m)
            wanted -= 1
            tried = 0
            if len(by_member[m]) >= desired[m]:
                unfilled.remove(m)
            else:
                cursor += 1
        if not unfilled:
            break
    return by_member


def simple_assign(
    subscriptions: Mapping[str, frozenset[str]],
    assignable: Mapping[str, frozenset[int]],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """The target assignment of every member: `subscriptions` member → topics, `assignable`
    topic → its initialized partitions, `previous` the current target assignment. All members
    subscribed to the same topics: one balance over all their partitions; otherwise each
    topic is balanced among its subscribers and the results combined (Kafka's heterogeneous
    builder)."""
    members = sorted(subscriptions)
    current = {
        m: {(t, p) for t, parts in previous.get(m, EMPTY).items() for p in parts} for m in members
    }
    result: dict[str, set[TP]] = {m: set() for m in members}
    homogeneous = len({subscriptions[m] for m in members}) <= 1
    if homogeneous and members:
        topics = sorted(subscriptions[members[0]])
        parts = [(t, p) for t in topics for p in sorted(assignable.get(t, frozenset()))]
        result = _share_out(members, parts, current)
    else:
        for topic in sorted({t for subs in subscriptions.values() for t in subs}):
            subscribers = [m for m in members if topic in subscriptions[m]]
            parts = [(topic, p) for p in sorted(assignable.get(topic, frozenset()))]
            on_topic = {m: {tp for tp in current[m] if tp[0] == topic} for m in subscribers}
            for m, got in _share_out(subscribers, parts, on_topic).items():
                result[m] |= got
    assignment: dict[str, Assignment] = {}
    for m in members:
        by_topic: dict[str, set[int]] = {}
        for t, p in result[m]:
            by_topic.setdefault(t, set()).add(p)
        assignment[m] = {t: frozenset(ps) for t, ps in sorted(by_topic.items())}
    return assignment


# -- the heartbeat ---------------------------------------------------------------------------------


def assignable_partitions(group: ShareGroup, topics: Topics) -> dict[str, frozenset[int]]:
    """Initialized share partitions of subscribed topics, by topic name (a topic recreated
    under the same name has another id: its old entry does not count)."""
    if group.partitions is None:
        return {}
    subscribed = group.subscribed_topics()
    result: dict[str, frozenset[int]] = {}
    for topic_id, entry in group.partitions.initialized.items():
        known = topics.get(entry.name)
        if entry.name in subscribed and known is not None and known[0] == topic_id:
            parts = frozenset(p for p in entry.partitions if p < known[1])
            if parts:
                result[entry.name] = parts
    return result


def _initialized_assignment_pending(group: ShareGroup, topics: Topics) -> bool:
    """Members, and initialized partitions of a subscribed topic the target assignment does
    not exactly cover: a new assignment is needed."""
    if not group.members or group.partitions is None or not group.partitions.initialized:
        return False
    subscribed = group.subscribed_topics()
    covered: dict[str, set[int]] = {}
    for assignment in group.target.values():
        for topic, parts in assignment.items():
            covered.setdefault(topic, set()).update(parts)
    for topic_id, entry in group.partitions.initialized.items():
        if entry.name not in subscribed:
            continue
        known = topics.get(entry.name)
        if known is None or known[0] != topic_id:
            continue
        if covered.get(entry.name) != set(entry.partitions):
            return True
    return False


def _filter(assignment: Assignment, subscribed: tuple[str, ...]) -> Assignment:
    return {t: parts for t, parts in assignment.items() if t in subscribed and parts}


def _assign(
    group: ShareGroup, topics: Topics, config: ShareGroupConfig, now_ms: int
) -> tuple[ShareGroup, list[ShareRecord]]:
    """A new target assignment at the group epoch, if one is due and the assignment
    interval allows it."""
    if group.assignment_epoch >= group.group_epoch:
        return group, []
    if not (
        group.assignment_timestamp_ms == 0
        or config.assignment_interval_ms == 0
        or now_ms >= group.assignment_timestamp_ms + config.assignment_interval_ms
    ):
        return group, []
    subscriptions = {
        m.member_id: frozenset(t for t in m.subscribed_topic_names if t in topics)
        for m in group.members.values()
    }
    target = simple_assign(subscriptions, assignable_partitions(group, topics), group.target)
    records = [
        ShareRecord(ShareRecordKind.TARGET_MEMBER, group.group_id, member_id, assignment)
        for member_id, assignment in target.items()
        if group.target.get(member_id) != assignment
    ]
    records.append(
        ShareRecord(ShareRecordKind.TARGET_EPOCH, group.group_id, None, (group.group_epoch, now_ms))
    )
    return (
        replace(
            group, target=target, assignment_epoch=group.group_epoch,
            assignment_timestamp_ms=now_ms,
        ),
        records,
    )  # fmt: skip


def _reconcile(member: ShareMember, group: ShareGroup, subscription_changed: bool) -> ShareMember:
    target = _filter(group.target.get(member.member_id, EMPTY), member.subscribed_topic_names)
    if member.member_epoch != group.assignment_epoch:
        return replace(
            member,
            state=STABLE,
            assigned=target,
            previous_member_epoch=member.member_epoch,
            member_epoch=group.assignment_epoch,
        )
    if subscription_changed:
        return replace(member, assigned=target)
    return member


def _to_initialize(
    group: ShareGroup, topics: Topics, config: ShareGroupConfig, now_ms: int
) -> tuple[ShareGroup, list[ShareRecord], InitializeRequest | None]:
    """Subscribed share partitions with no state and none being made (or being made for
    longer than the retry interval): marked initializing (record 15) and to initialize."""
    subscribed = group.subscribed_topics()
    current = group.partitions or StatePartitions()
    change: dict[uuid.UUID, TopicInit] = {}
    for name in sorted(subscribed):
        if name not in topics:
            continue
        topic_id, count = topics[name]
        already: set[int] = set()
        if topic_id in current.initialized:
            already |= current.initialized[topic_id].partitions
        pending = current.initializing.get(topic_id)
        if pending is not None and now_ms - pending.since_ms < config.initialize_retry_interval_ms:
            already |= pending.partitions
        if not already or len(already) < count:
            missing = frozenset(range(count)) - already
            if missing:
                change[topic_id] = TopicInit(name, missing, now_ms)
    if not change:
        return group, [], None
    known = set(current.initialized) | set(current.initializing)
    group, records = add_initializing(group, change, now_ms)
    request = InitializeRequest(
        group.group_id,
        group.group_epoch,
        {
            topic_id: (entry.name, entry.partitions,
                       0 if topic_id in known else UNINITIALIZED_START_OFFSET)
            for topic_id, entry in change.items()
        },
    )  # fmt: skip
    return group, records, request


def add_initializing(
    group: ShareGroup, change: Mapping[uuid.UUID, TopicInit], now_ms: int
) -> tuple[ShareGroup, list[ShareRecord]]:
    """Marks share partitions initializing (record 15): added to the topics' initializing
    entries, and no longer deleting."""
    if not change:
        return group, []
    current = group.partitions or StatePartitions()
    initializing = dict(current.initializing)
    for topic_id, entry in change.items():
        before = initializing.get(topic_id)
        parts = entry.partitions | (before.partitions if before else frozenset())
        initializing[topic_id] = TopicInit(entry.name, parts, now_ms)
    deleting = {t: n for t, n in current.deleting.items() if t not in initializing}
    updated = StatePartitions(initializing, current.initialized, deleting).stamped(now_ms)
    record = ShareRecord(ShareRecordKind.STATE_PARTITIONS, group.group_id, None, updated)
    return replace(group, partitions=updated), [record]


def start_deleting(
    group: ShareGroup, topic_ids: Iterable[uuid.UUID], names: Mapping[uuid.UUID, str], now_ms: int
) -> tuple[ShareGroup, list[ShareRecord]]:
    """DeleteShareGroupOffsets' first step: the topics' initialized share partitions become
    deleting (record 15, written even when nothing changed, as Kafka)."""
    current = group.partitions
    if current is None:
        return group, []
    gone = set(topic_ids)
    initialized_ = {t: e for t, e in current.initialized.items() if t not in gone}
    deleting = dict(current.deleting)
    for topic_id in sorted(gone, key=lambda t: t.bytes):
        if topic_id in current.initialized:
            deleting[topic_id] = names.get(topic_id, current.initialized[topic_id].name)
    updated = StatePartitions(current.initializing, initialized_, deleting).stamped(now_ms)
    record = ShareRecord(ShareRecordKind.STATE_PARTITIONS, group.group_id, None, updated)
    return replace(group, partitions=updated), [record]


def finish_deleting(
    group: ShareGroup, topic_ids: Iterable[uuid.UUID], now_ms: int
) -> tuple[ShareGroup, list[ShareRecord]]:
    """The persister deleted the topics' share state: they leave the deleting state."""
    current = group.partitions
    if current is None:
        return group, []
    done = set(topic_ids)
    deleting = {t: n for t, n in current.deleting.items() if t not in done}
    updated = StatePartitions(current.initializing, current.initialized, deleting).stamped(now_ms)
    record = ShareRecord(ShareRecordKind.STATE_PARTITIONS, group.group_id, None, updated)
    return replace(group, partitions=updated), [record]


def without_topics(
    group: ShareGroup, topic_ids: Iterable[uuid.UUID], now_ms: int
) -> tuple[ShareGroup, list[ShareRecord]]:
    """Deleted topics (Kafka's maybeCleanupShareGroupState for one group): record 15 again
    without them, whether initializing, initialized or deleting (their share state goes with
    the topic: nothing is left for DeleteShareGroupOffsets to delete); no record when it
    names none of them."""
    current = group.partitions
    gone = set(topic_ids)
    if current is None or not any(
        not gone.isdisjoint(entries)
        for entries in (current.initializing, current.initialized, current.deleting)
    ):
        return group, []
    updated = StatePartitions(
        {t: e for t, e in current.initializing.items() if t not in gone},
        {t: e for t, e in current.initialized.items() if t not in gone},
        {t: n for t, n in current.deleting.items() if t not in gone},
    ).stamped(now_ms)
    record = ShareRecord(ShareRecordKind.STATE_PARTITIONS, group.group_id, None, updated)
    return replace(group, partitions=updated), [record]


def heartbeat(
    group: ShareGroup | None,
    request: ShareHeartbeatRequest,
    topics: Topics,
    config: ShareGroupConfig,
    now_ms: int,
    *,
    other_type_group: bool = False,
) -> ShareOutcome:
    """ShareGroupHeartbeat, after the handler's checks (authorization, member id length).
    `topics`: every topic that exists; `other_type_group`: a group of another type (classic
    or consumer) has this id."""
    code, message = validate(request)
    if code:
        return _error(request, code, message)
    group_id, member_id, epoch = request.group_id, request.member_id, request.member_epoch
    if epoch == LEAVE_EPOCH:
        if group is None or other_type_group:
            what = "is not a share group" if other_type_group else "not found"
            return _error(request, ErrorCode.group_id_not_found, f"Group {group_id} {what}.")
        if member_id not in group.members:
            return _error(
                request, ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of group {group_id}.",
            )  # fmt: skip
        outcome = remove_member(group, member_id, topics)
        response = ShareHeartbeatResponse(ErrorCode.none, member_id, LEAVE_EPOCH, 0)
        return replace(outcome, response=response)
    if other_type_group:
        return _error(
            request, ErrorCode.group_id_not_found, f"Group {group_id} is not a share group."
        )
    if group is None:
        if epoch != JOIN_EPOCH:
            return _error(
                request, ErrorCode.group_id_not_found, f"Share group {group_id} not found."
            )
        group = ShareGroup(group_id)
    if len(group.members) >= config.max_size and member_id not in group.members:
        return _error(
            request, ErrorCode.group_max_size_reached,
            f"The share group has reached its maximum capacity of {config.max_size} members.",
        )  # fmt: skip
    member = group.members.get(member_id)
    new_member = member is None
    if member is None:
        if epoch != JOIN_EPOCH:
            return _error(
                request, ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of group {group_id}.",
            )  # fmt: skip
        member = ShareMember(member_id)
    elif epoch != JOIN_EPOCH:
        if epoch > member.member_epoch:
            return _error(
                request, ErrorCode.fenced_member_epoch,
                f"The share group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}).",
            )  # fmt: skip
        if epoch < member.member_epoch and epoch != member.previous_member_epoch:
            return _error(
                request, ErrorCode.fenced_member_epoch,
                f"The share group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.member_epoch}), and it does not "
                f"match the previous member epoch ({member.previous_member_epoch}).",
            )  # fmt: skip
    records: list[ShareRecord] = []
    updated = replace(
        member,
        rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
        subscribed_topic_names=(
            tuple(sorted(set(request.subscribed_topic_names)))
            if request.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        client_id=request.client_id,
        client_host=request.client_host,
    )
    subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names
    if new_member or updated.metadata() != member.metadata():
        records.append(ShareRecord(ShareRecordKind.MEMBER, group_id, member_id, updated))
    bump = subscription_changed or new_member
    if group.assignment_epoch >= group.group_epoch:
        bump |= _initialized_assignment_pending(group, topics)
    group = replace(group, members={**group.members, member_id: updated})
    new_hash = metadata_hash(group.subscribed_topics(), topics)
    bump |= new_hash != group.metadata_hash
    if bump:
        group = replace(group, group_epoch=group.group_epoch + 1, metadata_hash=new_hash)
        records.append(
            ShareRecord(ShareRecordKind.GROUP_EPOCH, group_id, None, (group.group_epoch, new_hash))
        )
    group, more = _assign(group, topics, config, now_ms)
    records += more
    reconciled = _reconcile(updated, group, bump)
    if reconciled != updated or new_member:
        group = replace(group, members={**group.members, member_id: reconciled})
        records.append(
            ShareRecord(ShareRecordKind.CURRENT_ASSIGNMENT, group_id, member_id, reconciled)
        )
    group, more, initialize = _to_initialize(group, topics, config, now_ms)
    records += more
    full = epoch == JOIN_EPOCH or request.subscribed_topic_names is not None
    changed = reconciled.assigned != member.assigned
    return ShareOutcome(
        group,
        ShareHeartbeatResponse(
            ErrorCode.none, member_id, reconciled.member_epoch, config.heartbeat_interval_ms,
            reconciled.assigned if full or changed or new_member else None,
        ),
        tuple(records),
        initialize,
    )  # fmt: skip


def member_tombstones(group_id: str, member_id: str) -> list[ShareRecord]:
    return [
        ShareRecord(ShareRecordKind.CURRENT_ASSIGNMENT, group_id, member_id, None),
        ShareRecord(ShareRecordKind.TARGET_MEMBER, group_id, member_id, None),
        ShareRecord(ShareRecordKind.MEMBER, group_id, member_id, None),
    ]


def remove_member(group: ShareGroup, member_id: str, topics: Topics) -> ShareOutcome:
    """A member leaves (epoch -1) or its session expires: its records are deleted and the
    group epoch bumped; the last member's leaving also sets the assignment epoch (timestamp 0,
    so that the next assignment need not wait for the interval)."""
    records = member_tombstones(group.group_id, member_id)
    members = {m: v for m, v in group.members.items() if m != member_id}
    target = {m: a for m, a in group.target.items() if m != member_id}
    rest = replace(group, members=members, target=target)
    new_hash = metadata_hash(rest.subscribed_topics(), topics)
    epoch = group.group_epoch + 1
    rest = replace(rest, group_epoch=epoch, metadata_hash=new_hash)
    records.append(
        ShareRecord(ShareRecordKind.GROUP_EPOCH, group.group_id, None, (epoch, new_hash))
    )
    if not members:
        rest = replace(rest, assignment_epoch=epoch, assignment_timestamp_ms=0)
        records.append(ShareRecord(ShareRecordKind.TARGET_EPOCH, group.group_id, None, (epoch, 0)))
    placeholder = ShareHeartbeatResponse(ErrorCode.none, member_id, LEAVE_EPOCH, 0)
    return ShareOutcome(rest, placeholder, tuple(records))


# -- after the persister ---------------------------------------------------------------------------


def initialized(
    group: ShareGroup, done: Mapping[uuid.UUID, frozenset[int]], topics: Topics, now_ms: int
) -> tuple[ShareGroup, list[ShareRecord]]:
    """The share coordinator initialized these partitions: they move from initializing to
    initialized (and become assignable at the next heartbeat). A topic no longer in `topics`
    (deleted while its partitions were initialized) is left out: its deletion already took it
    out of record 15, and it must not come back."""
    names = {topic_id: name for name, (topic_id, _count) in topics.items()}
    done = {topic_id: parts for topic_id, parts in done.items() if topic_id in names}
    if not done:
        return group, []
    current = group.partitions or StatePartitions()
    initialized_ = dict(current.initialized)
    initializing = dict(current.initializing)
    for topic_id, parts in done.items():
        before = initialized_.get(topic_id)
        pending = initializing.get(topic_id)
        name = names[topic_id]
        initialized_[topic_id] = TopicInit(
            name, parts | (before.partitions if before else frozenset())
        )
        if pending is not None:
            left = pending.partitions - parts
            if left:
                initializing[topic_id] = replace(pending, partitions=left)
            else:
                del initializing[topic_id]
    updated = StatePartitions(initializing, initialized_, current.deleting).stamped(now_ms)
    record = ShareRecord(ShareRecordKind.STATE_PARTITIONS, group.group_id, None, updated)
    return replace(group, partitions=updated), [record]


def uninitialized(
    group: ShareGroup, failed: Mapping[uuid.UUID, frozenset[int]], now_ms: int
) -> tuple[ShareGroup, list[ShareRecord]]:
    """The initialization failed: the partitions leave the initializing state (the next
    heartbeat asks again)."""
    current = group.partitions
    if current is None or not current.initializing or not failed:
        return group, []
    initializing = {}
    for topic_id, entry in current.initializing.items():
        left = entry.partitions - failed.get(topic_id, frozenset())
        if left:
            initializing[topic_id] = replace(entry, partitions=left)
    updated = StatePartitions(initializing, current.initialized, current.deleting).stamped(now_ms)
    record = ShareRecord(ShareRecordKind.STATE_PARTITIONS, group.group_id, None, updated)
    return replace(group, partitions=updated), [record]


def group_tombstones(group: ShareGroup) -> list[ShareRecord]:
    """Deletes an (empty) share group's records, in Kafka's order."""
    gid = group.group_id
    records = [ShareRecord(ShareRecordKind.CURRENT_ASSIGNMENT, gid, m, None) for m in group.members]
    records += [ShareRecord(ShareRecordKind.TARGET_MEMBER, gid, m, None) for m in group.members]
    records.append(ShareRecord(ShareRecordKind.TARGET_EPOCH, gid, None, None))
    records += [ShareRecord(ShareRecordKind.MEMBER, gid, m, None) for m in group.members]
    records.append(ShareRecord(ShareRecordKind.STATE_PARTITIONS, gid, None, None))
    records.append(ShareRecord(ShareRecordKind.GROUP_EPOCH, gid, None, None))
    return records


# -- replay ----------------------------------------------------------------------------------------


def replay(group: ShareGroup | None, record: ShareRecord) -> ShareGroup | None:
    """Applies one persisted record (a load, or a snapshot's image: any order of keys gives
    the same group); None: the group was deleted (its epoch record's tombstone). Initializing
    entries come back due: the next heartbeat asks for them again."""
    value = record.value
    if value is None and (group is None or record.kind == ShareRecordKind.GROUP_EPOCH):
        return None  # (a tombstone of a group already gone is passed over, as Kafka)
    group = group or ShareGroup(record.group_id)
    member_id = record.member_id or ""
    if record.kind == ShareRecordKind.GROUP_EPOCH:
        assert isinstance(value, tuple)
        epoch, hash_ = value
        return replace(group, group_epoch=int(epoch), metadata_hash=int(hash_))
    if record.kind == ShareRecordKind.TARGET_EPOCH:
        if value is None:
            return replace(group, assignment_epoch=0, assignment_timestamp_ms=0)
        assert isinstance(value, tuple)
        epoch, timestamp = value
        return replace(group, assignment_epoch=int(epoch), assignment_timestamp_ms=int(timestamp))
    if record.kind == ShareRecordKind.STATE_PARTITIONS:
        if value is None:
            return replace(group, partitions=None)
        assert isinstance(value, StatePartitions)
        return replace(group, partitions=value.stamped(DUE_MS))
    if record.kind == ShareRecordKind.TARGET_MEMBER:
        target = {m: a for m, a in group.target.items() if m != member_id}
        if value is not None:
            assert isinstance(value, dict)
            target[member_id] = value
        return replace(group, target=target)
    members = dict(group.members)
    if value is None:
        if record.kind == ShareRecordKind.MEMBER:
            members.pop(member_id, None)
        return replace(group, members=members)
    assert isinstance(value, ShareMember)
    current = members.get(member_id, ShareMember(member_id))
    if record.kind == ShareRecordKind.MEMBER:
        current = replace(
            current, rack_id=value.rack_id, client_id=value.client_id,
            client_host=value.client_host, subscribed_topic_names=value.subscribed_topic_names,
        )  # fmt: skip
    else:
        current = replace(
            current, member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch, state=value.state,
            assigned=value.assigned,
        )  # fmt: skip
    members[member_id] = current
    return replace(group, members=members)
