"""Share groups (KIP-932) at the state-machine level: the simple assignor, epochs, the initialize
step, leave and session expiry, the heartbeat's errors in Kafka 4.4's order, and replay of the
records (what a load or a snapshot's image restores) equal to the live state."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.coordinator.group import share_records
from lockgate.coordinator.group.share_group import (
    DUE_MS,
    InitializeRequest,
    ShareGroup,
    ShareGroupConfig,
    ShareHeartbeatRequest,
    ShareOutcome,
    ShareRecord,
    ShareRecordKind,
    StatePartitions,
    TopicInit,
    Topics,
    group_tombstones,
    heartbeat,
    initialized,
    remove_member,
    replay,
    simple_assign,
    uninitialized,
    without_topics,
)
from lockgate.protocol.errors import ErrorCode

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
TOPICS: Topics = {"t": (T1, 2), "u": (T2, 6)}
CONFIG = ShareGroupConfig(heartbeat_interval_ms=5000, max_size=3, assignment_interval_ms=0)


def hb(
    group: ShareGroup | None,
    member: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
    now: int = 1000,
    config: ShareGroupConfig = CONFIG,
    meta: Topics = TOPICS,
    **kw: object,
) -> ShareOutcome:
    request = ShareHeartbeatRequest("g", member, epoch, subscribed_topic_names=topics, **kw)  # type: ignore[arg-type]
    return heartbeat(group, request, meta, config, now)


def init_all(outcome: ShareOutcome, now: int = 1000) -> tuple[ShareGroup, list[ShareRecord]]:
    """The persister initialized what the heartbeat asked for."""
    assert outcome.group is not None and outcome.initialize is not None
    done = {t: parts for t, (_n, parts, _o) in outcome.initialize.topics.items()}
    return initialized(outcome.group, done, TOPICS, now)


def counts(assignment: Mapping[str, Mapping[str, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(p) for p in a.values()) for m, a in assignment.items()}


# -- the simple assignor ----------------------------------------------------------------------


def test_four_members_one_partition_all_share_it() -> None:
    members = {m: frozenset({"t"}) for m in "abcd"}
    result = simple_assign(members, {"t": frozenset({0})}, {})
    assert result == {m: {"t": frozenset({0})} for m in "abcd"}


def test_three_members_six_partitions_two_each() -> None:
    members = {m: frozenset({"u"}) for m in "abc"}
    result = simple_assign(members, {"u": frozenset(range(6))}, {})
    assert counts(result) == {"a": 2, "b": 2, "c": 2}
    every = [p for a in result.values() for p in a["u"]]
    assert sorted(every) == list(range(6))  # each partition once (S = 1)


def test_fewer_members_than_partitions_each_partition_once() -> None:
    members = {m: frozenset({"u"}) for m in "ab"}
    result = simple_assign(members, {"u": frozenset(range(5))}, {})
    assert sorted(counts(result).values()) == [2, 3]
    assert sorted(p for a in result.values() for p in a["u"]) == list(range(5))


def test_five_members_two_partitions_share_each_three_times_at_most() -> None:
    members = {m: frozenset({"t"}) for m in "abcde"}
    result = simple_assign(members, {"t": frozenset({0, 1})}, {})
    per_partition = {p: sum(p in a.get("t", ()) for a in result.values()) for p in (0, 1)}
    assert all(n <= 3 for n in per_partition.values())  # S = ceil(5/2)
    assert all(counts(result)[m] >= 1 for m in "abcde")


def test_sticky_when_a_member_joins() -> None:
    before = {"a": {"u": frozenset({0, 1, 2})}, "b": {"u": frozenset({3, 4, 5})}}
    members = {m: frozenset({"u"}) for m in "abc"}
    after = simple_assign(members, {"u": frozenset(range(6))}, before)
    assert counts(after) == {"a": 2, "b": 2, "c": 2}
    assert after["a"]["u"] <= before["a"]["u"] and after["b"]["u"] <= before["b"]["u"]


def test_heterogeneous_balances_each_topic_among_its_subscribers() -> None:
    members = {"a": frozenset({"t"}), "b": frozenset({"u"}), "c": frozenset({"t", "u"})}
    result = simple_assign(members, {"t": frozenset({0, 1}), "u": frozenset(range(6))}, {})
    assert set(result["a"]) == {"t"} and set(result["b"]) == {"u"}
    assert len(result["a"]["t"]) == 1 and len(result["c"]["t"]) == 1
    assert len(result["b"]["u"]) == 3 and len(result["c"]["u"]) == 3


def test_only_assignable_partitions_are_assigned() -> None:
    members = {m: frozenset({"t"}) for m in "ab"}
    assert simple_assign(members, {}, {}) == {"a": {}, "b": {}}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 9), st.randoms(use_true_random=False))
def test_assignor_properties(members: int, partitions: int, rnd: object) -> None:
    """Every partition assigned, to at most S distinct members; members' loads within one."""
    ids = [f"m{i}" for i in range(members)]
    subs = {m: frozenset({"u"}) for m in ids}
    previous = {m: {"u": frozenset(p for p in range(partitions) if hash((m, p)) % 3 == 0)}
                for m in ids}  # fmt: skip
    result = simple_assign(subs, {"u": frozenset(range(partitions))}, previous)
    sharing = -(-members // partitions)
    holders = {p: [m for m in ids if p in result[m].get("u", ())] for p in range(partitions)}
    assert all(1 <= len(h) <= sharing for h in holders.values())
    loads = counts(result).values()
    assert max(loads) - min(loads) <= 1


# -- heartbeat: join, initialize, assignment --------------------------------------------------


def test_first_join_initializes_then_a_later_heartbeat_assigns() -> None:
    first = hb(None, "m1", 0, ("t",))
    assert first.response.error == ErrorCode.none
    assert first.response.member_epoch == 2
    assert first.response.assignment == {}  # nothing initialized yet (trap 2)
    assert first.initialize == InitializeRequest("g", 2, {T1: ("t", frozenset({0, 1}), -1)})
    group = first.group
    assert group is not None and group.partitions is not None
    assert set(group.partitions.initializing) == {T1}
    kinds = [r.kind for r in first.records]
    assert kinds == [
        ShareRecordKind.MEMBER, ShareRecordKind.GROUP_EPOCH, ShareRecordKind.TARGET_MEMBER,
        ShareRecordKind.TARGET_EPOCH, ShareRecordKind.CURRENT_ASSIGNMENT,
        ShareRecordKind.STATE_PARTITIONS,
    ]  # fmt: skip
    group, records = init_all(first)
    assert [r.kind for r in records] == [ShareRecordKind.STATE_PARTITIONS]
    assert group.partitions is not None and not group.partitions.initializing
    assert group.partitions.initialized[T1].partitions == frozenset({0, 1})
    second = hb(group, "m1", 2)
    assert second.response.member_epoch == 3  # initialized but unassigned: epoch bumped
    assert second.response.assignment == {"t": frozenset({0, 1})}
    assert second.initialize is None
    third = hb(second.group, "m1", 3)
    assert third.response.assignment is None and third.records == ()  # nothing changed


def test_initializing_is_not_asked_again_until_the_retry_interval() -> None:
    config = replace(CONFIG, initialize_retry_interval_ms=30_000)
    first = hb(None, "m1", 0, ("t",), now=1000, config=config)
    again = hb(first.group, "m1", 2, now=20_000, config=config)
    assert again.initialize is None
    late = hb(first.group, "m1", 2, now=31_001, config=config)
    assert late.initialize is not None and late.initialize.topics[T1][1] == frozenset({0, 1})


def test_initializing_restored_by_a_load_is_asked_again_at_once() -> None:
    """An initialization cut by a crash: after the restart, the first heartbeat asks again,
    not a retry interval later (restarts faster than it would leave it unassignable)."""
    config = replace(CONFIG, initialize_retry_interval_ms=30_000)
    first = hb(None, "m1", 0, ("t",), now=1000, config=config)
    restored = replayed(first.records)
    assert restored is not None and restored.partitions is not None
    assert T1 in restored.partitions.initializing
    again = hb(restored, "m1", 2, now=1001, config=config)
    assert again.initialize is not None and again.initialize.topics[T1][1] == frozenset({0, 1})


def test_failed_initialization_removes_the_initializing_entries() -> None:
    first = hb(None, "m1", 0, ("t",))
    assert first.group is not None
    group, records = uninitialized(first.group, {T1: frozenset({0, 1})}, 2000)
    assert group.partitions is not None and not group.partitions.initializing
    assert [r.kind for r in records] == [ShareRecordKind.STATE_PARTITIONS]
    retry = hb(group, "m1", 2)
    assert retry.initialize is not None  # asked again at the next heartbeat


def test_new_partitions_of_a_known_topic_start_at_zero() -> None:
    group, _ = init_all(hb(None, "m1", 0, ("t",)))
    grown = {**TOPICS, "t": (T1, 3)}
    outcome = hb(group, "m1", 2, meta=grown)
    assert outcome.initialize is not None
    assert outcome.initialize.topics == {T1: ("t", frozenset({2}), 0)}
    assert outcome.initialize.state_epoch == outcome.response.member_epoch


def test_subscription_change_bumps_and_asks_for_the_new_topic() -> None:
    initial, _ = init_all(hb(None, "m1", 0, ("t",)))
    group = hb(initial, "m1", 2).group
    assert group is not None
    changed = hb(group, "m1", 3, ("t", "u"))
    assert changed.response.member_epoch == 4
    assert changed.initialize is not None and set(changed.initialize.topics) == {T2}
    assert changed.initialize.topics[T2][2] == -1  # a topic new to the group


def test_two_members_share_out_and_leave_rebalances() -> None:
    initial, _ = init_all(hb(None, "a", 0, ("u",)))
    b = hb(hb(initial, "a", 2).group, "b", 0, ("u",))
    assert b.group is not None
    assert sum(len(p) for p in (b.response.assignment or {}).values()) == 3
    a2 = hb(b.group, "a", 3)
    assert a2.response.assignment is not None and len(a2.response.assignment["u"]) == 3
    left = hb(a2.group, "b", -1)
    assert (left.response.error, left.response.member_epoch) == (ErrorCode.none, -1)
    assert left.group is not None and set(left.group.members) == {"a"}
    tombstones = [(r.kind, r.value) for r in left.records[:3]]
    assert all(value is None for _, value in tombstones)
    a3 = hb(left.group, "a", a2.response.member_epoch)
    assert a3.response.assignment == {"u": frozenset(range(6))}


def test_last_member_leaving_sets_the_assignment_epoch() -> None:
    group = hb(None, "a", 0, ("t",)).group
    assert group is not None
    outcome = remove_member(group, "a", TOPICS)
    assert outcome.group is not None
    assert outcome.group.assignment_epoch == outcome.group.group_epoch == 3
    assert outcome.group.state == "Empty"
    assert outcome.records[-1] == ShareRecord(ShareRecordKind.TARGET_EPOCH, "g", None, (3, 0))


def test_previous_epoch_accepted_and_rejoin_with_zero_accepted() -> None:
    group, _ = init_all(hb(None, "m", 0, ("t",)))
    bumped = hb(group, "m", 2)
    assert bumped.response.member_epoch == 3
    lost = hb(bumped.group, "m", 2)  # the bumped answer was lost
    assert lost.response.error == ErrorCode.none and lost.response.member_epoch == 3
    rejoin = hb(bumped.group, "m", 0, ("t",))
    assert rejoin.response.error == ErrorCode.none
    assert rejoin.response.assignment == {"t": frozenset({0, 1})}


def test_assignment_interval_defers_the_new_target() -> None:
    config = replace(CONFIG, assignment_interval_ms=1000)
    group, _ = init_all(hb(None, "a", 0, ("u",), now=1000, config=config))
    early = hb(group, "a", 2, now=1500, config=config)
    assert early.group is not None
    assert early.group.group_epoch == 3 and early.group.assignment_epoch == 2
    assert early.response.member_epoch == 2 and early.response.assignment is None
    later = hb(early.group, "a", 2, now=2000, config=config)
    assert later.response.member_epoch == 3 and later.response.assignment is not None


# -- heartbeat errors in Kafka's order ----------------------------------------------------------


def error(outcome: ShareOutcome) -> ErrorCode:
    return outcome.response.error


def test_request_validation() -> None:
    assert error(hb(None, "", 0, ("t",))) == ErrorCode.invalid_request
    request = ShareHeartbeatRequest("", "m", 0, subscribed_topic_names=("t",))
    assert error(heartbeat(None, request, TOPICS, CONFIG, 0)) == ErrorCode.invalid_request
    assert error(hb(None, "m", 0, ("t",), rack_id="")) == ErrorCode.invalid_request
    assert error(hb(None, "m", 0, None)) == ErrorCode.invalid_request
    assert error(hb(None, "m", 0, ())) == ErrorCode.invalid_request
    assert error(hb(None, "m", -2)) == ErrorCode.invalid_request
    assert hb(None, "m", 0, ("t",), rack_id="r1").response.error == ErrorCode.none


def test_leave_errors() -> None:
    assert error(hb(None, "m", -1)) == ErrorCode.group_id_not_found
    group = hb(None, "a", 0, ("t",)).group
    assert error(hb(group, "m", -1)) == ErrorCode.unknown_member_id
    other = heartbeat(None, ShareHeartbeatRequest("g", "m", -1), TOPICS, CONFIG, 0,
                      other_type_group=True)  # fmt: skip
    assert error(other) == ErrorCode.group_id_not_found


def test_group_and_member_errors() -> None:
    assert error(hb(None, "m", 3)) == ErrorCode.group_id_not_found
    other = heartbeat(None, ShareHeartbeatRequest("g", "m", 0, subscribed_topic_names=("t",)),
                      TOPICS, CONFIG, 0, other_type_group=True)  # fmt: skip
    assert error(other) == ErrorCode.group_id_not_found
    assert other.response.message == "Group g is not a share group."
    group = hb(None, "a", 0, ("t",)).group
    assert error(hb(group, "b", 1)) == ErrorCode.unknown_member_id
    assert error(hb(group, "a", 5)) == ErrorCode.fenced_member_epoch
    group = hb(group, "b", 0, ("t",)).group
    assert group is not None and group.members["a"].member_epoch == 2
    # "a" is at 1 with previous 0; a stale epoch that is not its previous one is fenced
    staled = replace(group, members={**group.members, "a": replace(group.members["a"],
                     member_epoch=4, previous_member_epoch=3)})  # fmt: skip
    assert error(hb(staled, "a", 2)) == ErrorCode.fenced_member_epoch
    assert error(hb(staled, "a", 3)) == ErrorCode.none


def test_group_max_size() -> None:
    group = None
    for m in ("a", "b", "c"):
        group = hb(group, m, 0, ("t",)).group
    full = hb(group, "d", 0, ("t",))
    assert error(full) == ErrorCode.group_max_size_reached
    assert error(hb(group, "a", 0, ("t",))) == ErrorCode.none  # a member rejoins
    # the size check comes before the member check (Kafka's order)
    assert error(hb(group, "d", 7)) == ErrorCode.group_max_size_reached


# -- records: replay equals state; exact bytes --------------------------------------------------


def replayed(records: Iterable[ShareRecord]) -> ShareGroup | None:
    """Encodes and decodes each record, then replays it, latest value per key (the snapshot's
    image), in reverse key order to show the order of keys does not matter."""
    ids = {name: tid for name, (tid, _c) in TOPICS.items()}
    names = {tid: name for name, tid in ids.items()}
    latest: dict[bytes, bytes | None] = {}
    for record in records:
        key, value = share_records.encode(record, ids)
        latest[key] = value
    group: ShareGroup | None = None
    for key in sorted(latest, reverse=True):
        group = replay(group, share_records.decode(key, latest[key], names))
    return group


def test_replay_equals_state_through_a_life() -> None:
    log: list[ShareRecord] = []
    outcome = hb(None, "a", 0, ("t", "u"))
    log += outcome.records
    group, more = init_all(outcome)
    log += more
    steps: list[Callable[[ShareGroup], ShareOutcome]] = [
        lambda g: hb(g, "a", 2),
        lambda g: hb(g, "b", 0, ("u",), rack_id="r"),
        lambda g: hb(g, "a", 3),
        lambda g: hb(g, "b", 4, ("t",)),
        lambda g: hb(g, "c", 0, ("t",)),
        lambda g: hb(g, "a", -1),
    ]
    for step in steps:
        out = step(group)
        assert out.response.error == ErrorCode.none, out.response
        assert out.group is not None
        group = out.group
        log += out.records
        if out.initialize is not None:
            group, more = init_all(out)
            log += more
        assert replayed(log) == group


def test_group_tombstones_delete_the_group() -> None:
    group = hb(None, "a", 0, ("t",)).group
    assert group is not None
    empty = remove_member(group, "a", TOPICS)
    assert empty.group is not None
    log = [*hb(None, "a", 0, ("t",)).records, *empty.records, *group_tombstones(empty.group)]
    assert replayed(log) is None


def test_tombstone_of_an_unknown_group_is_passed_over() -> None:
    record = ShareRecord(ShareRecordKind.STATE_PARTITIONS, "g", None, None)
    assert replay(None, record) is None


def test_a_deleted_topic_leaves_record_15_in_every_state() -> None:
    """Kafka's maybeCleanupShareGroupState: the topic id goes from the initializing,
    initialized and deleting topics, in one record 15; another topic stays as it was."""
    t3 = uuid.UUID(int=3)
    group = ShareGroup(
        "g",
        partitions=StatePartitions(
            initializing={T1: TopicInit("t", frozenset({1}), 5),
                          T2: TopicInit("u", frozenset({0}), 5)},
            initialized={T1: TopicInit("t", frozenset({0})), t3: TopicInit("v", frozenset({0}))},
            deleting={T1: "t", t3: "v"},
        ),
    )  # fmt: skip
    left, records = without_topics(group, (T1,), 2000)
    assert left.partitions == StatePartitions(
        initializing={T2: TopicInit("u", frozenset({0}), 2000)},
        initialized={t3: TopicInit("v", frozenset({0}))},
        deleting={t3: "v"},
    )
    assert records == [ShareRecord(ShareRecordKind.STATE_PARTITIONS, "g", None, left.partitions)]
    assert replayed([*hb(None, "a", 0, ("t",)).records, *records]) == replace(
        hb(None, "a", 0, ("t",)).group or group, partitions=left.partitions.stamped(DUE_MS)
    )
    only_deleting = replace(group, partitions=StatePartitions(deleting={T1: "t"}))
    assert without_topics(only_deleting, (T1,), 0)[0].partitions == StatePartitions()


def test_a_deleted_topic_record_15_does_not_name_writes_nothing() -> None:
    held = StatePartitions(initialized={T2: TopicInit("u", frozenset({0}))})
    group = ShareGroup("g", partitions=held)
    assert without_topics(group, (T1,), 0) == (group, [])
    assert without_topics(ShareGroup("g"), (T1,), 0) == (ShareGroup("g"), [])


# exact bytes, field by field from Kafka 4.4's ShareGroup*.json schemas: keys are the int16
# record type then classic strings (int16 length); values the int16 version 0, then compact
# fields (uvarint length + 1), uuids as 16 bytes, and an empty tagged-field section (0x00)
IDS = {"t": T1}
G = b"\x00\x01g"  # classic string "g"
M = b"\x00\x01m"


def encoded(kind: ShareRecordKind, member: str | None, value: object) -> tuple[bytes, bytes | None]:
    return share_records.encode(ShareRecord(kind, "g", member, value), IDS)


def test_bytes_of_member_metadata_10() -> None:
    from lockgate.coordinator.group.share_group import ShareMember

    member = ShareMember("m", rack_id=None, client_id="c", client_host="h",
                         subscribed_topic_names=("t", "uu"))  # fmt: skip
    key, value = encoded(ShareRecordKind.MEMBER, "m", member)
    assert key == b"\x00\x0a" + G + M
    assert value == b"\x00\x00" + b"\x00" + b"\x02c" + b"\x02h" + b"\x03" + b"\x02t\x03uu" + b"\x00"
    racked = replace(member, rack_id="r")
    assert encoded(ShareRecordKind.MEMBER, "m", racked)[1] == (
        b"\x00\x00" + b"\x02r" + b"\x02c" + b"\x02h" + b"\x03\x02t\x03uu" + b"\x00"
    )


def test_bytes_of_group_metadata_11() -> None:
    key, value = encoded(ShareRecordKind.GROUP_EPOCH, None, (7, -2))
    assert key == b"\x00\x0b" + G
    assert value == b"\x00\x00" + b"\x00\x00\x00\x07" + b"\xff" * 7 + b"\xfe" + b"\x00"


def test_bytes_of_target_assignment_metadata_12_with_its_tagged_timestamp() -> None:
    key, value = encoded(ShareRecordKind.TARGET_EPOCH, None, (3, 0))
    assert key == b"\x00\x0c" + G
    assert value == b"\x00\x00" + b"\x00\x00\x00\x03" + b"\x00"  # timestamp 0: not written
    _, stamped = encoded(ShareRecordKind.TARGET_EPOCH, None, (3, 258))
    assert stamped == (
        b"\x00\x00" + b"\x00\x00\x00\x03"
        + b"\x01" + b"\x00" + b"\x08" + (258).to_bytes(8, "big")  # 1 tag: 0, 8 bytes
    )  # fmt: skip
    names = {T1: "t"}
    assert share_records.decode(key, stamped, names).value == (3, 258)


def test_bytes_of_target_assignment_member_13() -> None:
    key, value = encoded(ShareRecordKind.TARGET_MEMBER, "m", {"t": frozenset({1, 0})})
    assert key == b"\x00\x0d" + G + M
    assert value == (
        b"\x00\x00" + b"\x02" + T1.bytes + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x01"
        + b"\x00" + b"\x00"
    )  # fmt: skip


def test_bytes_of_current_member_assignment_14() -> None:
    from lockgate.coordinator.group.share_group import ShareMember

    member = ShareMember("m", member_epoch=5, previous_member_epoch=4,
                         assigned={"t": frozenset({2})})  # fmt: skip
    key, value = encoded(ShareRecordKind.CURRENT_ASSIGNMENT, "m", member)
    assert key == b"\x00\x0e" + G + M
    assert value == (
        b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00\x00\x00\x04" + b"\x00"
        + b"\x02" + T1.bytes + b"\x02\x00\x00\x00\x02" + b"\x00" + b"\x00"
    )  # fmt: skip


def test_bytes_of_state_partition_metadata_15() -> None:
    from lockgate.coordinator.group.share_group import StatePartitions, TopicInit

    state = StatePartitions(
        initializing={T1: TopicInit("t", frozenset({1}), 99)},
        initialized={T2: TopicInit("u", frozenset({0}))},
        deleting={uuid.UUID(int=3): "x"},
    )
    key, value = encoded(ShareRecordKind.STATE_PARTITIONS, None, state)
    assert key == b"\x00\x0f" + G
    assert value == (
        b"\x00\x00"
        + b"\x02" + T1.bytes + b"\x02t" + b"\x02\x00\x00\x00\x01" + b"\x00"
        + b"\x02" + T2.bytes + b"\x02u" + b"\x02\x00\x00\x00\x00" + b"\x00"
        + b"\x02" + uuid.UUID(int=3).bytes + b"\x02x" + b"\x00"
        + b"\x00"
    )  # fmt: skip
    decoded = share_records.decode(key, value, {}).value
    assert decoded == replace(state, initializing={T1: TopicInit("t", frozenset({1}))})


def test_tombstones_have_no_value_and_kafkas_keys() -> None:
    assert encoded(ShareRecordKind.MEMBER, "m", None) == (b"\x00\x0a" + G + M, None)
    assert encoded(ShareRecordKind.STATE_PARTITIONS, None, None) == (b"\x00\x0f" + G, None)
    assert share_records.record_kind(b"\x00\x0f" + G) == ShareRecordKind.STATE_PARTITIONS
    assert share_records.record_kind(b"\x00\x03" + G) is None  # a consumer-group record


def test_an_initialization_answered_after_its_topic_was_deleted_does_not_bring_it_back() -> None:
    """The persister answers for a topic deleted meanwhile (a heartbeat's initialization, or
    AlterShareGroupOffsets'): the deletion took it out of record 15, and it stays out."""
    group = ShareGroup(
        "g", partitions=StatePartitions(initializing={T2: TopicInit("u", frozenset({0}), 5)})
    )
    without_t = {"u": TOPICS["u"]}  # "t" (T1) is gone
    done, records = initialized(group, {T1: frozenset({0}), T2: frozenset({0})}, without_t, 9)
    assert done.partitions == StatePartitions(initialized={T2: TopicInit("u", frozenset({0}))})
    assert len(records) == 1
    assert initialized(group, {T1: frozenset({0})}, without_t, 9) == (group, [])
