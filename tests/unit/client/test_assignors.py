"""The consumer protocol blobs and the three assignors, as pure functions."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.client.assignors import (
    Assignment,
    Subscription,
    cooperative_sticky_assign,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
    round_robin_assign,
    sticky_assign,
)
from lockgate.client.cluster import TopicPartition

T = TopicPartition


def subscribed(*members: str, topics: tuple[str, ...] = ("t",)) -> dict[str, Subscription]:
    return {m: Subscription(topics) for m in members}


def test_subscription_and_assignment_round_trip() -> None:
    subscription = Subscription(("b", "a"), (T("a", 1), T("b", 0)), b"user", -1)
    decoded = decode_subscription(encode_subscription(subscription))
    assert decoded.topics == ("a", "b")
    assert decoded.owned_partitions == (T("a", 1), T("b", 0))
    assert decoded.user_data == b"user"
    assignment = Assignment((T("x", 2), T("x", 0)), None)
    assert decode_assignment(encode_assignment(assignment)).partitions == (T("x", 0), T("x", 2))
    assert decode_assignment(b"").partitions == ()


def test_a_version_0_subscription_from_another_client_is_read() -> None:
    blob = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    assert decode_subscription(blob) == Subscription(("t",), (), None, -1)


def test_range_gives_the_first_members_one_more() -> None:
    plan = range_assign(subscribed("c", "a", "b"), {"t": 7})
    assert plan == {
        "a": [T("t", 0), T("t", 1), T("t", 2)],
        "b": [T("t", 3), T("t", 4)],
        "c": [T("t", 5), T("t", 6)],
    }


def test_round_robin_deals_across_topics_skipping_unsubscribed_members() -> None:
    subscriptions = {
        "a": Subscription(("t", "u")),
        "b": Subscription(("t",)),
    }
    plan = round_robin_assign(subscriptions, {"t": 3, "u": 2})
    assert plan == {"a": [T("t", 0), T("t", 2), T("u", 0), T("u", 1)], "b": [T("t", 1)]}


def test_cooperative_sticky_keeps_owned_and_holds_back_moving_partitions() -> None:
    owned = tuple(T("t", p) for p in range(4))
    subscriptions = {"a": Subscription(("t",), owned, None, 1), "b": Subscription(("t",))}
    target = sticky_assign(subscriptions, {"t": 4})
    assert sorted(len(v) for v in target.values()) == [2, 2]
    assert set(target["a"]) <= set(owned)
    first_round = cooperative_sticky_assign(subscriptions, {"t": 4})
    assert first_round["b"] == []  # a must revoke them first
    assert first_round["a"] == target["a"]
    after_revoke = {
        "a": Subscription(("t",), tuple(target["a"]), None, 2),
        "b": Subscription(("t",), (), None, 2),
    }
    assert cooperative_sticky_assign(after_revoke, {"t": 4}) == target


@settings(max_examples=200, deadline=None)
@given(
    members=st.integers(1, 6),
    partitions=st.integers(0, 20),
    owned_seed=st.lists(st.integers(0, 5), max_size=20),
)
def test_sticky_is_complete_balanced_and_keeps_what_balance_allows(
    members: int, partitions: int, owned_seed: list[int]
) -> None:
    names = [f"m{i}" for i in range(members)]
    owned: dict[str, list[TopicPartition]] = {name: [] for name in names}
    for partition, owner in enumerate(owned_seed[:partitions]):
        owned[names[owner % members]].append(T("t", partition))
    subscriptions = {n: Subscription(("t",), tuple(owned[n]), None, 1) for n in names}
    plan = sticky_assign(subscriptions, {"t": partitions})
    assigned = Counter(tp for tps in plan.values() for tp in tps)
    assert set(assigned) == {T("t", p) for p in range(partitions)}
    assert all(count == 1 for count in assigned.values())
    sizes = [len(plan[n]) for n in names]
    assert max(sizes) - min(sizes) <= 1
    ceiling = -(-partitions // members)
    for name in names:  # a member keeps its owned partitions up to its fair share
        kept = set(plan[name]) & set(owned[name])
        assert len(kept) >= min(len(owned[name]), ceiling) - 1 or len(kept) == len(plan[name])
