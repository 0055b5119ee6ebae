# client/assignors.py — the "consumer" protocol of classic groups: the subscription and
# assignment blobs every member exchanges through JoinGroup/SyncGroup (the Java client's
# ConsumerProtocolSubscription / ConsumerProtocolAssignment layouts), and the range, roundrobin
# and cooperative-sticky assignors under the names librdkafka and the Java client use, so that
# lockgate consumers share groups with them.
#
# Assignors are pure: (subscriptions, partition counts) → assignment. Every one is
# deterministic (sorted inputs), so any member elected leader computes the same thing.
from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from lockgate.client.cluster import TopicPartition
from lockgate.protocol.frame import MalformedFrame

SUBSCRIPTION_VERSION = 1  # v1 carries the owned partitions that cooperative rebalancing needs
ASSIGNMENT_VERSION = 1
RANGE, ROUND_ROBIN, COOPERATIVE_STICKY = "range", "roundrobin", "cooperative-sticky"
COOPERATIVE = frozenset({COOPERATIVE_STICKY})


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes | None = None
    generation_id: int = -1


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


# ---------------------------------------------------------------------------------------------
# Encoding (classic, non-flexible: int16 string lengths, int32 array and bytes lengths)


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _bytes(value: bytes | None) -> bytes:
    return struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value


def _partitions(partitions: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(partitions):
        by_topic[tp.topic].append(tp.partition)
    out = bytearray(struct.pack(">i", len(by_topic)))
    for topic, indexes in by_topic.items():
        out += _string(topic) + struct.pack(f">i{len(indexes)}i", len(indexes), *indexes)
    return bytes(out)


def encode_subscription(subscription: Subscription) -> bytes:
    topics = sorted(subscription.topics)
    return (
        struct.pack(">hi", SUBSCRIPTION_VERSION, len(topics))
        + b"".join(_string(t) for t in topics)
        + _bytes(subscription.user_data)
        + _partitions(subscription.owned_partitions)
    )


def encode_assignment(assignment: Assignment) -> bytes:
    return (
        struct.pack(">h", ASSIGNMENT_VERSION)
        + _partitions(assignment.partitions)
        + _bytes(assignment.user_data)
    )


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def more(self) -> bool:
        return self.pos < len(self.data)

    def _unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def int16(self) -> int:
        return self._unpack(">h")

    def int32(self) -> int:
        return self._unpack(">i")

    def string(self) -> str:
        size = self.int16()
        if size < 0 or self.pos + size > len(self.data):
            raise MalformedFrame("bad string in a consumer protocol blob")
        value = self.data[self.pos : self.pos + size].decode()
        self.pos += size
        return value

    def nullable_bytes(self) -> bytes | None:
        size = self.int32()
        if size < 0:
            return None
        value = self.data[self.pos : self.pos + size]
        self.pos += size
        return value

    def count(self) -> int:
        size = self.int32()
        if size > len(self.data) - self.pos:
            raise MalformedFrame("array longer than the consumer protocol blob")
        return max(size, 0)

    def partitions(self) -> tuple[TopicPartition, ...]:
        result: list[TopicPartition] = []
        for _ in range(self.count()):
            topic = self.string()
            result.extend(TopicPartition(topic, self.int32()) for _ in range(self.count()))
        return tuple(result)


def decode_subscription(data: bytes) -> Subscription:
    """Any version: fields a newer version adds after the ones read here are ignored, as the
    protocol intends."""
    try:
        reader = _Reader(data)
        version = reader.int16()
        topics = tuple(reader.string() for _ in range(reader.count()))
        user_data = reader.nullable_bytes() if reader.more() else None
        owned = reader.partitions() if version >= 1 and reader.more() else ()
        generation = reader.int32() if version >= 2 and reader.more() else -1
    except (struct.error, UnicodeDecodeError) as exc:
        raise MalformedFrame(f"unreadable consumer subscription: {exc}") from exc
    return Subscription(topics, owned, user_data, generation)


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment(())  # a member the leader gave nothing (or an empty SyncGroup)
    try:
        reader = _Reader(data)
        reader.int16()
        partitions = reader.partitions()
        user_data = reader.nullable_bytes() if reader.more() else None
    except (struct.error, UnicodeDecodeError) as exc:
        raise MalformedFrame(f"unreadable consumer assignment: {exc}") from exc
    return Assignment(partitions, user_data)


# ---------------------------------------------------------------------------------------------
# Assignors

Assignor = Callable[
    [Mapping[str, Subscription], Mapping[str, int]], dict[str, list[TopicPartition]]
]


def _empty(members: Iterable[str]) -> dict[str, list[TopicPartition]]:
    return {member: [] for member in sorted(members)}


def range_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """Per topic, its partitions in contiguous ranges over the subscribed members in member
    id order; the first (partitions mod members) members get one more."""
    result = _empty(subscriptions)
    for topic in sorted(partition_counts):
        members = sorted(m for m, s in subscriptions.items() if topic in s.topics)
        if not members:
            continue
        each, extra = divmod(partition_counts[topic], len(members))
        start = 0
        for index, member in enumerate(members):
            size = each + (1 if index < extra else 0)
            result[member].extend(TopicPartition(topic, p) for p in range(start, start + size))
            start += size
    return result


def round_robin_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """Every partition in (topic, partition) order dealt to the members in member id order,
    skipping members not subscribed to its topic."""
    result = _empty(subscriptions)
    members = sorted(subscriptions)
    if not members:
        return result
    turn = 0
    for topic in sorted(partition_counts):
        for partition in range(partition_counts[topic]):
            for step in range(len(members)):
                member = members[(turn + step) % len(members)]
                if topic in subscriptions[member].topics:
                    result[member].append(TopicPartition(topic, partition))
                    turn = (turn + step + 1) % len(members)
                    break
    return result


@dataclass
class _Sticky:
    subscriptions: Mapping[str, Subscription]
    assignment: dict[str, list[TopicPartition]] = field(default_factory=dict)

    def eligible(self, tp: TopicPartition) -> list[str]:
        return sorted(m for m, s in self.subscriptions.items() if tp.topic in s.topics)

    def least_loaded(self, candidates: list[str]) -> str:
        return min(candidates, key=lambda m: (len(self.assignment[m]), m))


def sticky_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """Balanced (member loads differ by at most one among members that could take each
    other's partitions) while keeping as many owned partitions where they are as balance
    allows. Not yet cooperative: see cooperative_sticky_assign."""
    existing = {
        TopicPartition(topic, p) for topic, count in partition_counts.items() for p in range(count)
    }
    state = _Sticky(subscriptions, _empty(subscriptions))
    claimed: set[TopicPartition] = set()
    # Owned partitions, newest generation first, so a stale claim loses to a fresh one.
    owners = sorted(subscriptions.items(), key=lambda item: (-item[1].generation_id, item[0]))
    for member, subscription in owners:
        for tp in sorted(subscription.owned_partitions):
            if tp in existing and tp not in claimed and tp.topic in subscription.topics:
                state.assignment[member].append(tp)
                claimed.add(tp)
    members = len(subscriptions)
    if members == 0:
        return state.assignment
    ceiling = -(-len(existing) // members)
    for member in sorted(state.assignment):  # give up what is above the ceiling
        kept = state.assignment[member]
        if len(kept) > ceiling:
            for tp in kept[ceiling:]:
                claimed.discard(tp)
            state.assignment[member] = kept[:ceiling]
    for tp in sorted(existing - claimed):
        candidates = state.eligible(tp)
        if candidates:
            state.assignment[state.least_loaded(candidates)].append(tp)
    _balance(state)
    return {member: sorted(tps) for member, tps in state.assignment.items()}


def _balance(state: _Sticky) -> None:
    # Moves one partition at a time from the most to the least loaded member able to take it,
    # until no move narrows the gap; bounded by the number of partitions squared.
    total = sum(len(tps) for tps in state.assignment.values())
    for _ in range(total * total + 1):
        moved = False
        for giver in sorted(state.assignment, key=lambda m: (-len(state.assignment[m]), m)):
            for tp in sorted(state.assignment[giver], reverse=True):
                takers = [m for m in state.eligible(tp) if m != giver]
                if not takers:
                    continue
                taker = state.least_loaded(takers)
                if len(state.assignment[giver]) - len(state.assignment[taker]) > 1:
                    state.assignment[giver].remove(tp)
                    state.assignment[taker].append(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


def cooperative_sticky_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """The sticky assignment minus every partition that changes owner: its current owner
    revokes it first and rejoins, and the follow-up rebalance hands it over (KIP-429)."""
    target = sticky_assign(subscriptions, partition_counts)
    owner = {tp: m for m, s in subscriptions.items() for tp in s.owned_partitions}
    return {
        member: [tp for tp in tps if owner.get(tp, member) == member]
        for member, tps in target.items()
    }


ASSIGNORS: dict[str, Assignor] = {
    RANGE: range_assign,
    ROUND_ROBIN: round_robin_assign,
    COOPERATIVE_STICKY: cooperative_sticky_assign,
}
