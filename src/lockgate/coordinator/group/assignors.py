# Server-side partition assignors of the consumer group protocol (KIP-848): `uniform` (balanced
# and sticky) and `range` (per topic, contiguous ranges). Pure functions of the members'
# subscriptions, the topics' partition counts and the previous target assignment.
#
# Invariants: every partition of a subscribed topic is assigned to exactly one member subscribed
# to that topic (none when nobody is); the result is deterministic for equal inputs.
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

# topic name → partitions; frozen so that assignments can be compared and shared
Assignment = Mapping[str, frozenset[int]]
EMPTY: Assignment = {}


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: frozenset[str]
    rack: str | None = None


Assignor = Callable[
    [Mapping[str, Subscription], Mapping[str, int], Mapping[str, Assignment]],
    dict[str, Assignment],
]


def _freeze(owned: Mapping[str, set[int]]) -> Assignment:
    return {topic: frozenset(parts) for topic, parts in sorted(owned.items()) if parts}


def uniform(
    members: Mapping[str, Subscription],
    topics: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Balanced (partition counts differ by at most one between members that could take each
    other's partitions) and sticky: a partition stays with its previous member unless that
    member has more than its share. Kafka's uniform assignor aims at the same two properties
    with a different algorithm, so the exact placement may differ from Kafka's."""
    owned: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    count = dict.fromkeys(members, 0)
    taken: set[tuple[str, int]] = set()
    eligible = {
        topic: sorted(m for m, sub in members.items() if topic in sub.topics) for topic in topics
    }
    total = sum(topics[t] for t in topics if eligible[t])
    share = -(-total // len(members)) if members else 0  # ceiling: nobody keeps more
    for member_id in sorted(members):  # keep what is still valid, up to the share
        for topic, parts in sorted(previous.get(member_id, EMPTY).items()):
            if topic not in topics or topic not in members[member_id].topics:
                continue
            for p in sorted(parts):
                if p < topics[topic] and (topic, p) not in taken and count[member_id] < share:
                    owned[member_id].setdefault(topic, set()).add(p)
                    taken.add((topic, p))
                    count[member_id] += 1
    # the rest to the least loaded subscriber; topics with fewer subscribers first, as they
    # have fewer places to go
    for topic in sorted(topics, key=lambda t: (len(eligible[t]), t)):
        for p in range(topics[topic]):
            if (topic, p) in taken or not eligible[topic]:
                continue
            chosen = min(eligible[topic], key=lambda m: (count[m], m))
            owned[chosen].setdefault(topic, set()).add(p)
            taken.add((topic, p))
            count[chosen] += 1
    _rebalance(owned, count, eligible, total)
    return {m: _freeze(owned[m]) for m in members}


def _rebalance(
    owned: dict[str, dict[str, set[int]]],
    count: dict[str, int],
    eligible: Mapping[str, list[str]],
    budget: int,
) -> None:
    """Moves single partitions from the most to the least loaded member able to take them
    while that narrows the gap; at most `budget` moves, so it always ends."""
    for _ in range(budget):
        moved = False
        for donor in sorted(count, key=lambda m: (-count[m], m)):
            for topic in sorted(owned[donor]):
                takers = [m for m in eligible[topic] if count[m] + 1 < count[donor]]
                if not takers or not owned[donor][topic]:
                    continue
                taker = min(takers, key=lambda m: (count[m], m))
                p = max(owned[donor][topic])
                owned[donor][topic].discard(p)
                owned[taker].setdefault(topic, set()).add(p)
                count[donor] -= 1
                count[taker] += 1
                moved = True
                break
            if moved:
                break
        if not moved:
            return


def range_(
    members: Mapping[str, Subscription],
    topics: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Per topic, the subscribers in member id order take contiguous ranges; the first
    (partitions mod subscribers) take one more. Topics with equal partition counts and
    subscribers are therefore co-partitioned. Not sticky (the previous assignment is unused)."""
    owned: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    for topic, partitions in sorted(topics.items()):
        subscribers = sorted(m for m, sub in members.items() if topic in sub.topics)
        if not subscribers:
            continue
        base, extra = divmod(partitions, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            size = base + (1 if index < extra else 0)
            if size:
                owned[member_id][topic] = set(range(start, start + size))
            start += size
    return {m: _freeze(owned[m]) for m in members}


ASSIGNORS: Mapping[str, Assignor] = {"uniform": uniform, "range": range_}
