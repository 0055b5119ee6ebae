"""KIP-1251 in the consumer group state machine: each partition a member holds keeps the epoch
at which it was assigned to the member, and an offset commit carrying an epoch older than the
member's is accepted when every committed partition was the member's at that epoch already
(assignment epoch <= commit epoch <= member epoch). Kafka 4.4's ConsumerGroup and
OffsetMetadataManager are the reference for every branch; OffsetFetch stays exact."""

from __future__ import annotations

import struct
import uuid
from dataclasses import replace

import pytest

from lockgate.coordinator.group import consumer_records
from lockgate.coordinator.group.consumer_group import (
    STATIC_LEAVE_EPOCH,
    ClassicMember,
    ClassicState,
    ConsumerGroup,
    ConsumerMember,
    ConsumerRecord,
    MemberState,
    RecordKind,
    convert_classic,
    validate_offset_commit,
    validate_offset_fetch,
)
from lockgate.protocol.errors import ErrorCode
from tests.unit.coordinator.group.test_consumer_group import beat, join, ok

ALL = frozenset(range(4))


def three_epochs() -> tuple[ConsumerGroup, frozenset[int], frozenset[int]]:
    """m1 takes all four partitions at epoch 2, hands half to m2 (epoch 3), and gets them back
    when m2 leaves (epoch 4): (group, the partitions m1 kept since epoch 2, those it got back
    at epoch 4)."""
    group = ok(join(ok(join(None, "m1")), "m2"))
    group = ok(beat(group, "m1", 2, {"t": ALL}))  # asked to revoke m2's half
    kept = group.members["m1"].assigned["t"]
    group = ok(beat(group, "m1", 2, {"t": kept}))  # revoked: epoch 3
    group = ok(beat(group, "m2", 3, {}))  # m2 gets its half
    group = ok(beat(group, "m2", -1, None))  # m2 leaves: epoch 4
    group = ok(beat(group, "m1", 3, {"t": kept}))
    assert group.members["m1"].member_epoch == 4 and group.members["m1"].assigned == {"t": ALL}
    return group, kept, ALL - kept


def commit(
    group: ConsumerGroup,
    epoch: int,
    partitions: frozenset[int] | set[int],
    *,
    member: str = "m1",
    transactional: bool = False,
    api_version: int = 10,
    instance: str | None = None,
) -> ErrorCode:
    return validate_offset_commit(
        group, member, instance, epoch, [("t", p) for p in sorted(partitions)],
        transactional=transactional, api_version=api_version,
    )  # fmt: skip


# -- assignment epochs -------------------------------------------------------------------------


def test_partitions_keep_the_epoch_they_were_assigned_at() -> None:
    group = ok(join(None, "m1"))
    assert group.members["m1"].assignment_epochs == {"t": dict.fromkeys(ALL, 2)}
    group = ok(join(group, "m2"))
    group = ok(beat(group, "m1", 2, {"t": ALL}))
    m1 = group.members["m1"]
    # while revoking, both the kept and the pending partitions keep epoch 2
    assert m1.state == MemberState.UNREVOKED_PARTITIONS and m1.member_epoch == 2
    assert m1.held_epochs() == {"t": dict.fromkeys(ALL, 2)}
    kept = m1.assigned["t"]
    group = ok(beat(group, "m1", 2, {"t": kept}))
    m1 = group.members["m1"]
    assert m1.member_epoch == 3 and m1.assignment_epochs == {"t": dict.fromkeys(kept, 2)}
    group = ok(beat(group, "m2", 3, {}))
    assert group.members["m2"].assignment_epochs == {"t": dict.fromkeys(ALL - kept, 3)}
    group, kept, returned = three_epochs()
    assert group.members["m1"].assignment_epochs == {
        "t": {**dict.fromkeys(kept, 2), **dict.fromkeys(returned, 4)}
    }


def test_a_partition_revoked_and_given_back_gets_the_new_epoch() -> None:
    group = ok(join(ok(join(None, "m1")), "m2"))
    group = ok(beat(group, "m1", 2, {"t": ALL}))
    pending = group.members["m1"].pending_revocation["t"]
    kept = group.members["m1"].assigned["t"]
    # m2 leaves before m1 revokes: the new target gives m1 everything back at epoch 4
    group = ok(beat(group, "m2", -1, None))
    group = ok(beat(group, "m1", 2, {"t": kept}))  # it had revoked them meanwhile
    m1 = group.members["m1"]
    assert m1.member_epoch == 4 and m1.assigned == {"t": ALL}
    assert m1.assignment_epochs == {"t": {**dict.fromkeys(kept, 2), **dict.fromkeys(pending, 4)}}


def test_a_static_member_that_leaves_holds_its_partitions_at_epoch_zero() -> None:
    """As Kafka: the instance that restarts takes them over at the group's epoch and may
    commit them at once."""
    group = ok(join(None, "m1", instance="i1"))
    group = ok(beat(group, "m1", STATIC_LEAVE_EPOCH, None, instance="i1"))
    assert group.members["m1"].assignment_epochs == {"t": dict.fromkeys(ALL, 0)}
    outcome = join(group, "m1b", instance="i1")
    restarted = ok(outcome).members["m1b"]
    assert restarted.member_epoch == 2 and restarted.assignment_epochs == {
        "t": dict.fromkeys(ALL, 0)
    }
    assert commit(ok(outcome), 0, ALL, member="m1b") == ErrorCode.none  # 0 <= 0 <= 2
    assert commit(ok(outcome), 2, ALL, member="m1b") == ErrorCode.none
    assert commit(ok(outcome), 2, ALL, member="m1") == ErrorCode.unknown_member_id  # replaced
    # one that leaves while revoking: the partitions still to revoke are released, so only
    # its assigned ones keep an epoch (0)
    group = ok(join(ok(join(None, "m1", instance="i1")), "m2"))
    group = ok(beat(group, "m1", 2, {"t": ALL}, instance="i1"))
    m1 = group.members["m1"]
    assert m1.pending_revocation and m1.assignment_epochs == {"t": dict.fromkeys(ALL, 2)}
    group = ok(beat(group, "m1", STATIC_LEAVE_EPOCH, None, instance="i1"))
    away = group.members["m1"]
    assert away.pending_revocation == {} and away.assigned == m1.assigned
    assert away.assignment_epochs == {"t": dict.fromkeys(m1.assigned["t"], 0)}


def test_a_converted_classic_group_holds_its_partitions_at_its_generation() -> None:
    state = ClassicState(
        "c1", None, "client", "host", 5000, ClassicMember(5000, (("range", b""),)), ("t",),
        {"t": frozenset({0, 1})},
    )  # fmt: skip
    group, _records = convert_classic("g", 7, [state], {"t": 4})
    assert group.members["c1"].assignment_epochs == {"t": {0: 7, 1: 7}}


def test_a_member_without_recorded_epochs_holds_its_partitions_at_its_epoch() -> None:
    member = ConsumerMember(
        "m", member_epoch=5, assigned={"t": frozenset({0})},
        pending_revocation={"t": frozenset({1})}, assignment_epochs={"t": {1: 2}},
    )  # fmt: skip
    assert member.assignment_epoch("t", 0) == 5
    assert member.assignment_epoch("t", 1) == 2
    assert member.assignment_epoch("t", 2) is None
    assert member.assignment_epoch("u", 0) is None
    assert member.held_epochs() == {"t": {0: 5, 1: 2}}
    # a static member that left (epoch -2) reads as holding them at 0
    away = replace(member, member_epoch=STATIC_LEAVE_EPOCH, assignment_epochs={})
    assert away.held_epochs() == {"t": {0: 0, 1: 0}}


# -- OffsetCommit ------------------------------------------------------------------------------


def test_the_members_epoch_commits_anything() -> None:
    group, _kept, _returned = three_epochs()
    assert commit(group, 4, ALL) == ErrorCode.none
    assert commit(group, 4, {9}) == ErrorCode.none  # no partition check at the member's epoch


def test_an_older_epoch_commits_partitions_held_since_then() -> None:
    group, kept, _returned = three_epochs()
    assert commit(group, 3, kept) == ErrorCode.none
    assert commit(group, 2, kept) == ErrorCode.none  # assigned at exactly that epoch
    assert commit(group, 3, set()) == ErrorCode.none


def test_an_older_epoch_is_stale_for_partitions_assigned_later() -> None:
    group, kept, returned = three_epochs()
    assert commit(group, 3, returned) == ErrorCode.stale_member_epoch
    assert commit(group, 1, kept) == ErrorCode.stale_member_epoch  # before epoch 2
    assert commit(group, -1, kept) == ErrorCode.stale_member_epoch  # a member with epoch -1
    # one partition of the request is enough to refuse all of it
    assert commit(group, 3, kept | {min(returned)}) == ErrorCode.stale_member_epoch


def test_an_older_epoch_is_stale_for_partitions_not_held() -> None:
    group, _kept, _returned = three_epochs()
    assert commit(group, 3, {7}) == ErrorCode.stale_member_epoch  # no such partition
    assert (
        validate_offset_commit(
            group, "m1", None, 3, [("other", 0)], transactional=False, api_version=10
        )
        == ErrorCode.stale_member_epoch
    )


def test_partitions_pending_revocation_may_be_committed_with_an_older_epoch() -> None:
    member = ConsumerMember(
        "m1", member_epoch=5, previous_member_epoch=4, state=MemberState.UNREVOKED_PARTITIONS,
        assigned={"t": frozenset({0})}, pending_revocation={"t": frozenset({1})},
        assignment_epochs={"t": {0: 2, 1: 3}},
    )  # fmt: skip
    group = ConsumerGroup("g", 6, 6, {"m1": member})
    assert commit(group, 3, {0, 1}) == ErrorCode.none
    assert commit(group, 2, {1}) == ErrorCode.stale_member_epoch  # assigned at 3
    assert commit(group, 2, {0}) == ErrorCode.none


def test_a_newer_epoch_is_stale() -> None:
    group, _kept, _returned = three_epochs()
    assert commit(group, 5, ALL) == ErrorCode.stale_member_epoch
    assert commit(group, 5, set()) == ErrorCode.stale_member_epoch


def test_unknown_members_and_the_admin_client() -> None:
    group, kept, _returned = three_epochs()
    assert commit(group, 4, kept, member="ghost") == ErrorCode.unknown_member_id
    assert commit(group, 3, kept, member="ghost") == ErrorCode.unknown_member_id
    # epoch -1 without a member: the admin client, only while the group has no members
    assert commit(group, -1, kept, member="") == ErrorCode.unknown_member_id
    empty = ConsumerGroup("g", 3, 3)
    assert commit(empty, -1, kept, member="") == ErrorCode.none
    assert commit(empty, -1, kept, member="ghost") == ErrorCode.none
    assert commit(empty, 3, kept, member="ghost") == ErrorCode.unknown_member_id


def test_consumer_members_must_commit_with_v9_or_later() -> None:
    group, kept, _returned = three_epochs()
    assert commit(group, 4, kept, api_version=8) == ErrorCode.unsupported_version
    assert commit(group, 3, kept, api_version=9) == ErrorCode.none
    # before the epoch is looked at
    assert commit(group, 9, kept, api_version=8) == ErrorCode.unsupported_version


@pytest.fixture
def mixed() -> ConsumerGroup:
    """A classic member (Kafka 4's mixed groups) at epoch 5 holding partition 0 since epoch 3
    and partition 1 since epoch 5."""
    member = ConsumerMember(
        "c1", member_epoch=5, previous_member_epoch=3,
        classic=ClassicMember(5000, (("range", b""),)),
        assigned={"t": frozenset({0, 1})}, assignment_epochs={"t": {0: 3, 1: 5}},
    )  # fmt: skip
    return ConsumerGroup("g", 5, 5, {"c1": member})


def test_classic_members_get_illegal_generation(mixed: ConsumerGroup) -> None:
    assert commit(mixed, 5, {0, 1}, member="c1", api_version=2) == ErrorCode.none
    assert commit(mixed, 4, {0}, member="c1", api_version=7) == ErrorCode.none
    assert commit(mixed, 4, {1}, member="c1") == ErrorCode.illegal_generation
    assert commit(mixed, 4, {2}, member="c1") == ErrorCode.illegal_generation
    assert commit(mixed, 6, {0}, member="c1") == ErrorCode.illegal_generation


# -- TxnOffsetCommit ---------------------------------------------------------------------------


def test_transactional_commits_are_checked_alike(mixed: ConsumerGroup) -> None:
    """The caller maps STALE_MEMBER_EPOCH to ILLEGAL_GENERATION (TxnOffsetCommit before v6)."""
    group, kept, returned = three_epochs()

    def txn(group: ConsumerGroup, epoch: int, partitions: frozenset[int], member: str) -> ErrorCode:
        # (no version requirement for a consumer-protocol member's transactional commit)
        return commit(group, epoch, partitions, member=member, transactional=True, api_version=0)

    assert txn(group, 4, kept, "m1") == ErrorCode.none
    assert txn(group, 3, kept, "m1") == ErrorCode.none
    assert txn(group, 3, returned, "m1") == ErrorCode.stale_member_epoch
    assert txn(group, 5, kept, "m1") == ErrorCode.stale_member_epoch
    assert txn(group, 4, kept, "ghost") == ErrorCode.unknown_member_id
    assert txn(mixed, 4, frozenset({1}), "c1") == ErrorCode.illegal_generation


def test_transactional_commits_without_group_metadata_are_not_fenced() -> None:
    group, kept, _returned = three_epochs()
    assert commit(group, -1, kept, member="", transactional=True) == ErrorCode.none
    # naming an instance, or any other epoch, is looking up the (unknown) member ""
    assert commit(group, -1, kept, member="", instance="i", transactional=True) == (
        ErrorCode.unknown_member_id
    )
    assert commit(group, -2, kept, member="", transactional=True) == ErrorCode.unknown_member_id
    assert commit(group, -1, kept, member="", transactional=False) == ErrorCode.unknown_member_id


# -- OffsetFetch -------------------------------------------------------------------------------


def test_offset_fetch_needs_the_members_exact_epoch(mixed: ConsumerGroup) -> None:
    group, _kept, _returned = three_epochs()
    assert validate_offset_fetch(group, None, -1) == ErrorCode.none  # the admin client
    assert validate_offset_fetch(group, "m1", 4) == ErrorCode.none
    assert validate_offset_fetch(group, "m1", 3) == ErrorCode.stale_member_epoch  # no KIP-1251
    assert validate_offset_fetch(group, "m1", 5) == ErrorCode.stale_member_epoch
    assert validate_offset_fetch(group, "ghost", 4) == ErrorCode.unknown_member_id
    assert validate_offset_fetch(group, None, 4) == ErrorCode.unknown_member_id
    assert validate_offset_fetch(ConsumerGroup("g"), "m1", -1) == ErrorCode.unknown_member_id
    assert validate_offset_fetch(mixed, "c1", 4) == ErrorCode.illegal_generation
    assert validate_offset_fetch(mixed, "c1", 5) == ErrorCode.none


# -- the current assignment record -------------------------------------------------------------

TOPIC_ID = uuid.UUID(bytes=bytes(range(1, 17)))
IDS, NAMES = {"t": TOPIC_ID}, {TOPIC_ID: "t"}
REVOKING = ConsumerMember(
    "m1", member_epoch=5, previous_member_epoch=4, state=MemberState.UNREVOKED_PARTITIONS,
    assigned={"t": frozenset({0, 2})}, pending_revocation={"t": frozenset({1})},
    assignment_epochs={"t": {0: 3, 1: 2, 2: 5}},
)  # fmt: skip
# ConsumerGroupCurrentMemberAssignmentValue v0 of REVOKING as Kafka 4.4's generated class
# serializes it (version prefix included): each topic entry carries tag 0, AssignmentEpochs
KAFKA_BYTES = bytes.fromhex(
    "0000" "00000005" "00000004" "01"
    "02" "0102030405060708090a0b0c0d0e0f10" "03" "00000000" "00000002"
    "01" "00" "09" "03" "00000003" "00000005"
    "02" "0102030405060708090a0b0c0d0e0f10" "02" "00000001"
    "01" "00" "05" "02" "00000002"
    "00"
)  # fmt: skip


def current_assignment(value: bytes, names: dict[uuid.UUID, str] = NAMES) -> ConsumerMember:
    key = struct.pack(">hh", 8, 1) + b"g" + struct.pack(">h", 2) + b"m1"
    decoded = consumer_records.decode(key, value, names).value
    assert isinstance(decoded, ConsumerMember)
    return decoded


def topic_entry(partitions: list[int], tags: bytes = b"\x00") -> bytes:
    """One TopicPartitions entry of the record: topic id, partitions, then `tags`."""
    listed = bytes([len(partitions) + 1]) + b"".join(struct.pack(">i", p) for p in partitions)
    return TOPIC_ID.bytes + listed + tags


def record(epoch: int, assigned: bytes, pending: bytes = b"") -> bytes:
    head = struct.pack(">hiib", 0, epoch, epoch - 1, 0)
    return head + b"\x02" + assigned + (b"\x02" + pending if pending else b"\x01") + b"\x00"


def test_the_record_carries_the_epochs_in_kafkas_layout() -> None:
    _key, value = consumer_records.encode(
        ConsumerRecord(RecordKind.CURRENT_ASSIGNMENT, "g", "m1", REVOKING), IDS
    )
    assert value == KAFKA_BYTES
    decoded = current_assignment(KAFKA_BYTES)
    assert decoded.assignment_epochs == REVOKING.assignment_epochs
    assert (decoded.assigned, decoded.pending_revocation) == (
        REVOKING.assigned, REVOKING.pending_revocation,
    )  # fmt: skip


def test_a_member_without_epochs_is_written_with_its_epoch() -> None:
    plain = replace(REVOKING, assignment_epochs={})
    _key, value = consumer_records.encode(
        ConsumerRecord(RecordKind.CURRENT_ASSIGNMENT, "g", "m1", plain), IDS
    )
    assert value is not None
    assert current_assignment(value).assignment_epochs == {"t": {0: 5, 1: 5, 2: 5}}


def test_records_without_epochs_read_as_assigned_at_the_member_epoch() -> None:
    """Older Kafka and lockgate records: the conservative reading, as Kafka 4.4 loads them."""
    old = record(6, topic_entry([0, 2]), topic_entry([1]))
    member = current_assignment(old)
    assert member.assigned == {"t": frozenset({0, 2})}
    assert member.assignment_epochs == {"t": {0: 6, 1: 6, 2: 6}}
    # a static member that left (epoch -2): at least 0
    assert current_assignment(record(-2, topic_entry([0]))).assignment_epochs == {"t": {0: 0}}


@pytest.mark.parametrize(
    "tags",
    [
        b"\x01\x00\x05\x02\x00\x00\x00\x02",  # one epoch for two partitions
        b"\x01\x00\x01\x00",  # null (the field's default)
        b"\x01\x07\x02\x01\x00",  # another tag only (skipped)
    ],
)
def test_epochs_that_do_not_fit_read_as_the_member_epoch(tags: bytes) -> None:
    member = current_assignment(record(6, topic_entry([0, 2], tags)))
    assert member.assigned == {"t": frozenset({0, 2})}
    assert member.assignment_epochs == {"t": {0: 6, 2: 6}}


def test_epochs_of_a_deleted_topic_are_left_out() -> None:
    assert current_assignment(KAFKA_BYTES, {}).assignment_epochs == {}
