"""The __consumer_offsets record layout (Kafka's OffsetCommitKey/Value and
GroupMetadataKey/Value), checked against bytes built by hand from Kafka's schemas, round trips,
older value versions that Kafka may have written, damage, subscribed_topics() on
consumer-protocol subscriptions, and the load's check of offset commits a run at a time
(protocol.fastpath.apply_offset_commits) against offset_commit's, record by record."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.coordinator.group.records import (
    CommittedOffset,
    GroupRecord,
    MemberRecord,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key,
    group_value,
    offset_commit,
    offset_key,
    offset_value,
    subscribed_topics,
)
from lockgate.protocol import fastpath


def i16(value: int) -> bytes:
    return struct.pack(">h", value)


def i32(value: int) -> bytes:
    return struct.pack(">i", value)


def i64(value: int) -> bytes:
    return struct.pack(">q", value)


def s(value: str | None) -> bytes:
    if value is None:
        return i16(-1)
    raw = value.encode()
    return i16(len(raw)) + raw


def b(value: bytes) -> bytes:
    return i32(len(value)) + value


# -- keys --------------------------------------------------------------------------------------


def test_offset_key_layout() -> None:
    key = offset_key("payments", "orders", 7)
    assert key == i16(1) + s("payments") + s("orders") + i32(7)
    assert decode_key(key) == ("payments", "orders", 7)


def test_version_0_offset_key_is_read_too() -> None:
    assert decode_key(i16(0) + s("g") + s("t") + i32(0)) == ("g", "t", 0)


def test_group_key_layout() -> None:
    key = group_key("payments")
    assert key == i16(2) + s("payments")
    assert decode_key(key) == "payments"


def test_non_ascii_names_round_trip() -> None:
    assert decode_key(offset_key("grüppe", "tøpic", 0)) == ("grüppe", "tøpic", 0)
    assert decode_key(group_key("grüppe")) == "grüppe"


@pytest.mark.parametrize("version", [3, 4, -1, 99])
def test_unknown_key_versions_are_refused(version: int) -> None:
    with pytest.raises(ValueError, match="key version"):
        decode_key(i16(version) + s("g"))


# -- offset values -----------------------------------------------------------------------------


def test_offset_value_layout_v3() -> None:
    committed = CommittedOffset(1234, 5, "checkpoint", 1_700_000_000_000)
    value = offset_value(committed)
    assert value == i16(3) + i64(1234) + i32(5) + s("checkpoint") + i64(1_700_000_000_000)
    assert decode_offset_value(value) == committed


@pytest.mark.parametrize(
    "committed",
    [
        CommittedOffset(0, -1, "", 0),
        CommittedOffset(2**62, 2**31 - 1, "m" * 4096, 2**50),
        CommittedOffset(-1, -1, "ünïcode ✓", 1),
    ],
)
def test_offset_value_round_trip(committed: CommittedOffset) -> None:
    assert decode_offset_value(offset_value(committed)) == committed


def test_older_offset_values() -> None:
    # v0: offset, metadata, commit timestamp
    assert decode_offset_value(i16(0) + i64(10) + s("m") + i64(99)) == CommittedOffset(
        10, -1, "m", 99
    )
    # v1 adds an expire timestamp at the end (ignored)
    assert decode_offset_value(i16(1) + i64(11) + s("") + i64(98) + i64(500)) == CommittedOffset(
        11, -1, "", 98
    )
    # v2: offset, metadata, commit timestamp
    assert decode_offset_value(i16(2) + i64(12) + s(None) + i64(97)) == CommittedOffset(
        12, -1, "", 97
    )


# -- group metadata values ---------------------------------------------------------------------

STATIC = MemberRecord("m-1", "instance-1", "client-a", "/127.0.0.1", 30_000, 10_000, b"sub", b"as")
DYNAMIC = MemberRecord("m-2", None, "client-b", "/127.0.0.2", 60_000, 45_000, b"", b"")


def test_group_value_layout_v3() -> None:
    record = GroupRecord("consumer", 4, "range", "m-1", 1_700_000_000_000, (STATIC, DYNAMIC))
    expected = (
        i16(3)
        + s("consumer")
        + i32(4)
        + s("range")
        + s("m-1")
        + i64(1_700_000_000_000)
        + i32(2)
        + s("m-1")
        + s("instance-1")
        + s("client-a")
        + s("/127.0.0.1")
        + i32(30_000)
        + i32(10_000)
        + b(b"sub")
        + b(b"as")
        + s("m-2")
        + s(None)
        + s("client-b")
        + s("/127.0.0.2")
        + i32(60_000)
        + i32(45_000)
        + b(b"")
        + b(b"")
    )
    assert group_value(record) == expected
    assert decode_group_value(expected) == record


def test_empty_group_round_trip() -> None:
    record = GroupRecord("consumer", 9, None, None, 5, ())
    assert decode_group_value(group_value(record)) == record


def test_older_group_values() -> None:
    member_v0 = s("m-1") + s("c") + s("h") + i32(10_000) + b(b"sub") + b(b"as")
    v0 = i16(0) + s("consumer") + i32(2) + s("range") + s("m-1") + i32(1) + member_v0
    decoded = decode_group_value(v0)
    assert decoded == GroupRecord(
        "consumer",
        2,
        "range",
        "m-1",
        -1,
        (MemberRecord("m-1", None, "c", "h", 0, 10_000, b"sub", b"as"),),
    )
    member_v1 = s("m-1") + s("c") + s("h") + i32(20_000) + i32(10_000) + b(b"sub") + b(b"as")
    v1 = i16(1) + s("consumer") + i32(2) + s("range") + s("m-1") + i32(1) + member_v1
    assert decode_group_value(v1).members[0].rebalance_timeout_ms == 20_000
    v2 = i16(2) + s("consumer") + i32(2) + s("range") + s("m-1") + i64(77) + i32(1) + member_v1
    decoded = decode_group_value(v2)
    assert decoded.state_timestamp == 77
    assert decoded.members[0] == MemberRecord("m-1", None, "c", "h", 20_000, 10_000, b"sub", b"as")


def test_newer_group_value_versions_are_refused() -> None:
    with pytest.raises(ValueError, match="version 4"):
        decode_group_value(i16(4) + s("consumer") + i32(1))


@pytest.mark.parametrize("cut", [1, 3, 9, 20, 40])
def test_truncated_values_raise_value_error(cut: int) -> None:
    """A damaged record must raise ValueError, which the coordinator's replay skips; any other
    exception would abort the whole load of __consumer_offsets."""
    group = group_value(GroupRecord("consumer", 4, "range", "m-1", 1, (STATIC,)))
    offset = offset_value(CommittedOffset(1, 2, "meta", 3))
    with pytest.raises(ValueError):
        decode_group_value(group[:cut])
    if cut < len(offset) - 8:
        with pytest.raises(ValueError):
            decode_offset_value(offset[:cut])
    with pytest.raises(ValueError):
        decode_key(offset_key("group", "topic", 1)[: min(cut, 12)])


# -- consumer-protocol subscriptions -----------------------------------------------------------


def test_subscribed_topics_v0() -> None:
    subscription = i16(0) + i32(2) + s("orders") + s("payments") + i32(-1)
    assert subscribed_topics(subscription) == {"orders", "payments"}


def test_subscribed_topics_v1_with_owned_partitions() -> None:
    owned = i32(1) + s("orders") + i32(2) + i32(0) + i32(1)
    subscription = i16(1) + i32(1) + s("orders") + b(b"user") + owned
    assert subscribed_topics(subscription) == {"orders"}


def test_subscribed_topics_of_garbage_is_empty() -> None:
    assert subscribed_topics(b"") == set()
    assert subscribed_topics(b"\x00") == set()
    assert subscribed_topics(i16(0) + i32(3) + s("only-one")) == set()
    assert subscribed_topics(i16(0) + i32(1) + i16(2) + b"\xff\xfe") == set()


def test_a_cut_string_is_damage_not_a_shorter_name() -> None:
    with pytest.raises(ValueError):
        decode_key(group_key("payments")[:-3])
    with pytest.raises(ValueError):
        decode_offset_value(i16(3) + i64(1) + i32(0) + i16(10) + b"short")


# -- a load's check of offset commits, a run at a time (protocol.fastpath) ------------------------

names = st.sampled_from(["g", "grüß", "", None])


def raw_key(version: int, group: str | None, topic: str | None, partition: int) -> bytes:
    return i16(version) + s(group) + s(topic) + i32(partition)


def raw_value(version: int, metadata: str | None) -> bytes:
    epoch = i32(7) if version >= 3 else b""
    return i16(version) + i64(5) + epoch + s(metadata) + i64(1_700_000_000_000)


keys = st.builds(raw_key, st.sampled_from([1, 1, 0, 2, 3]), names, names, st.integers(-1, 3))
values = st.one_of(
    st.none(), st.builds(raw_value, st.sampled_from([3, 2, 1, 0, 4, -1]), names), st.binary()
)


def damaged(data: bytes, at: int, byte: int, cut: int, extra: bytes) -> bytes:
    changed = bytearray(data)
    if changed and at >= 0:
        changed[at % len(changed)] = byte
    return bytes(changed[: max(len(changed) - cut, 0)]) + extra


spots, bytes_ = st.integers(-40, 40), st.integers(0, 255)
damaged_keys = st.builds(
    damaged, keys, spots, bytes_, st.sampled_from([0, 0, 0, 1, 2, 5]), st.sampled_from([b"", b"\0"])
)
damaged_values = st.builds(
    damaged, values.filter(bool), spots, bytes_, st.integers(0, 9), st.just(b"")
)


@settings(max_examples=600, deadline=None)
@given(key=damaged_keys, value=st.one_of(values, damaged_values), pure=st.booleans())
def test_a_load_applies_exactly_the_commits_offset_commit_passes_in_lockgates_form(
    key: bytes, value: bytes | None, pure: bool
) -> None:
    """apply_offset_commits (compiled or pure) puts a record in its group's records exactly
    when offset_commit passes it and gives it back as its own key (the form lockgate writes);
    every other record is left to the replay record by record."""
    impl = fastpath.load(pure)
    try:
        commit = offset_commit(key, value)
    except ValueError:
        commit = None
    known = {"g", "grüß", ""} | ({commit[0]} if commit is not None else set())
    groups: dict[str, dict[bytes, bytes]] = {name: {} for name in known}
    applied = impl.apply_offset_commits([(0, 0, key, value)], 0, groups) == 1
    assert applied == (commit is not None and commit[1] == key)
    if applied and commit is not None:
        held = {key: value} if value is not None else {}
        assert groups == {**{name: {} for name in known}, commit[0]: held}
