"""Server-side assignors: uniform (balanced, sticky) and range (contiguous, co-partitioned)."""

from __future__ import annotations

from lockgate.coordinator.group.assignors import Assignment, Subscription, range_, uniform


def _count(assignment: Assignment) -> int:
    return sum(len(parts) for parts in assignment.values())


def _every_partition_once(result: dict[str, Assignment], topics: dict[str, int]) -> None:
    seen = [(t, p) for a in result.values() for t, parts in a.items() for p in parts]
    assert sorted(seen) == sorted((t, p) for t, n in topics.items() for p in range(n))


def test_uniform_balances_homogeneous_subscriptions() -> None:
    topics = {"a": 5, "b": 2}
    subs = {m: Subscription(frozenset(topics)) for m in ("m1", "m2", "m3")}
    result = uniform(subs, topics, {})
    _every_partition_once(result, topics)
    assert sorted(_count(a) for a in result.values()) == [2, 2, 3]


def test_uniform_is_sticky_when_a_member_joins() -> None:
    topics = {"a": 6}
    subs = {m: Subscription(frozenset(topics)) for m in ("m1", "m2")}
    first = uniform(subs, topics, {})
    second = uniform({**subs, "m3": Subscription(frozenset(topics))}, topics, first)
    _every_partition_once(second, topics)
    assert [_count(second[m]) for m in ("m1", "m2", "m3")] == [2, 2, 2]
    for member in ("m1", "m2"):  # the old members only lose partitions, never trade them
        assert second[member]["a"] <= first[member]["a"]


def test_uniform_heterogeneous_subscriptions_only_subscribed_topics() -> None:
    topics = {"a": 4, "b": 4}
    subs = {
        "m1": Subscription(frozenset({"a"})),
        "m2": Subscription(frozenset({"a", "b"})),
        "m3": Subscription(frozenset({"b"})),
    }
    result = uniform(subs, topics, {})
    _every_partition_once(result, topics)
    assert set(result["m1"]) <= {"a"} and set(result["m3"]) <= {"b"}
    counts = sorted(_count(a) for a in result.values())
    assert counts[-1] - counts[0] <= 1


def test_uniform_drops_partitions_of_unsubscribed_or_deleted_topics() -> None:
    previous: dict[str, Assignment] = {"m1": {"a": frozenset({0, 1}), "gone": frozenset({0})}}
    result = uniform({"m1": Subscription(frozenset({"a"}))}, {"a": 2}, previous)
    assert result == {"m1": {"a": frozenset({0, 1})}}


def test_uniform_leaves_unsubscribed_topics_unassigned() -> None:
    result = uniform({"m1": Subscription(frozenset({"a"}))}, {"a": 1, "b": 3}, {})
    assert result == {"m1": {"a": frozenset({0})}}


def test_range_gives_contiguous_ranges_in_member_order() -> None:
    topics = {"a": 5, "b": 5}
    subs = {m: Subscription(frozenset(topics)) for m in ("m2", "m1")}
    result = range_(subs, topics, {})
    assert result["m1"] == {"a": frozenset({0, 1, 2}), "b": frozenset({0, 1, 2})}
    assert result["m2"] == {"a": frozenset({3, 4}), "b": frozenset({3, 4})}


def test_range_more_members_than_partitions() -> None:
    subs = {m: Subscription(frozenset({"a"})) for m in ("m1", "m2", "m3")}
    result = range_(subs, {"a": 2}, {})
    assert result == {"m1": {"a": frozenset({0})}, "m2": {"a": frozenset({1})}, "m3": {}}
