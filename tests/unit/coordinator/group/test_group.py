"""Group.select_protocol (Kafka's vote), Group.supports, Group.check_member (the membership
rule of JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and KIP-447's
TxnOffsetCommit) and Group.check_offset_commit (Kafka 4.4's rules for commits into a classic
group)."""

from __future__ import annotations

import pytest

from lockgate.coordinator.group.group import Group, Member
from lockgate.coordinator.group.state import GroupState
from lockgate.protocol.errors import ErrorCode


def member(member_id: str, *protocols: str, instance: str | None = None) -> Member:
    return Member(
        member_id,
        instance,
        "client",
        "127.0.0.1",
        30_000,
        10_000,
        "consumer",
        [(name, f"{member_id}:{name}".encode()) for name in protocols],
    )


def group_of(*members: Member, generation: int = 3) -> Group:
    group = Group("g", protocol_type="consumer", generation=generation)
    for m in members:
        group.members[m.member_id] = m
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    return group


# -- select_protocol ---------------------------------------------------------------------------


def test_no_members_no_protocol() -> None:
    assert Group("g").select_protocol() is None


def test_single_member_gets_its_first_choice() -> None:
    assert group_of(member("a", "cooperative-sticky", "range")).select_protocol() == (
        "cooperative-sticky"
    )


def test_most_preferred_protocol_wins() -> None:
    group = group_of(
        member("a", "range", "roundrobin"),
        member("b", "roundrobin", "range"),
        member("c", "roundrobin", "range"),
    )
    assert group.select_protocol() == "roundrobin"


def test_only_protocols_every_member_supports_are_candidates() -> None:
    # two members prefer "sticky", but "c" does not support it: their votes go to their
    # first choice among the common protocols
    group = group_of(
        member("a", "sticky", "range", "roundrobin"),
        member("b", "sticky", "range", "roundrobin"),
        member("c", "roundrobin", "range"),
    )
    assert group.select_protocol() == "range"


def test_no_common_protocol() -> None:
    assert group_of(member("a", "range"), member("b", "roundrobin")).select_protocol() is None


def test_a_tie_is_broken_the_same_way_every_time() -> None:
    one = group_of(member("a", "range", "roundrobin"), member("b", "roundrobin", "range"))
    two = group_of(member("b", "roundrobin", "range"), member("a", "range", "roundrobin"))
    assert one.select_protocol() == two.select_protocol() == "range"


def test_metadata_for_the_chosen_protocol() -> None:
    m = member("a", "range", "roundrobin")
    assert m.metadata_for("roundrobin") == b"a:roundrobin"
    assert m.metadata_for("sticky") == b""
    assert m.metadata_for(None) == b""


# -- supports ----------------------------------------------------------------------------------


def test_an_empty_group_needs_a_protocol_type_and_a_protocol() -> None:
    assert Group("g").supports("consumer", [("range", b"")])
    assert not Group("g").supports("", [("range", b"")])
    assert not Group("g").supports("consumer", [])


def test_a_joiner_must_share_a_protocol_with_every_member() -> None:
    group = group_of(member("a", "range", "roundrobin"), member("b", "roundrobin"))
    assert group.supports("consumer", [("roundrobin", b"")])
    assert not group.supports("consumer", [("range", b"")])  # b lacks it
    assert not group.supports("connect", [("roundrobin", b"")])  # another protocol type


# -- check_member ------------------------------------------------------------------------------


@pytest.fixture
def group() -> Group:
    return group_of(member("dyn-1", "range"), member("static-1", "range", instance="inst-1"))


def test_current_members(group: Group) -> None:
    assert group.check_member("dyn-1", None, 3) is ErrorCode.none
    assert group.check_member("static-1", "inst-1", 3) is ErrorCode.none
    assert group.check_member("dyn-1", None, None) is ErrorCode.none  # no generation to check


def test_unknown_member(group: Group) -> None:
    assert group.check_member("gone", None, 3) is ErrorCode.unknown_member_id
    assert group.check_member("", None, 3) is ErrorCode.unknown_member_id


def test_stale_or_future_generation(group: Group) -> None:
    assert group.check_member("dyn-1", None, 2) is ErrorCode.illegal_generation
    assert group.check_member("dyn-1", None, 4) is ErrorCode.illegal_generation
    assert group.check_member("static-1", "inst-1", 2) is ErrorCode.illegal_generation


def test_old_incarnation_of_a_static_member_is_fenced(group: Group) -> None:
    # the instance id now belongs to static-1: an older member id claiming it is a zombie,
    # whatever its generation (fencing wins over the unknown-member and generation checks)
    assert group.check_member("static-0", "inst-1", 3) is ErrorCode.fenced_instance_id
    assert group.check_member("static-0", "inst-1", 1) is ErrorCode.fenced_instance_id
    assert group.check_member("dyn-1", "inst-1", 3) is ErrorCode.fenced_instance_id


def test_an_unknown_instance_id_is_an_unknown_member_even_for_a_known_member_id(
    group: Group,
) -> None:
    """As Kafka 4.4 (ClassicGroup.validateMember): the instance id is looked up first; one the
    group does not know names no member, whatever the member id and generation."""
    assert group.check_member("static-0", "inst-9", 3) is ErrorCode.unknown_member_id
    assert group.check_member("dyn-1", "inst-9", 3) is ErrorCode.unknown_member_id
    assert group.check_member("static-1", "inst-9", 3) is ErrorCode.unknown_member_id
    assert group.check_member("dyn-1", "inst-9", None) is ErrorCode.unknown_member_id


# -- check_offset_commit (OffsetCommit and TxnOffsetCommit into a classic group) ---------------


def test_an_empty_group_takes_generation_minus_one_from_anyone() -> None:
    empty = Group("g", generation=4)
    for transactional in (False, True):
        for member_id, instance in (("", None), ("ghost", None), ("ghost", "i"), ("", "i")):
            assert empty.check_offset_commit(
                member_id, instance, -1, transactional=transactional
            ) is ErrorCode.none  # fmt: skip
        # a generation is checked: the group has no such member
        assert empty.check_offset_commit("ghost", None, 4, transactional=transactional) is (
            ErrorCode.unknown_member_id
        )


def test_a_commit_naming_nobody_into_a_group_with_members(group: Group) -> None:
    group.state = GroupState.STABLE
    # a plain commit is refused, a transactional one (no group metadata passed) is not fenced
    assert group.check_offset_commit("", None, -1, transactional=False) is (
        ErrorCode.unknown_member_id
    )
    assert group.check_offset_commit("", None, -1, transactional=True) is ErrorCode.none


@pytest.mark.parametrize("transactional", [False, True])
def test_a_commit_naming_a_member_is_checked_as_check_member(
    group: Group, transactional: bool
) -> None:
    group.state = GroupState.STABLE

    def check(member_id: str, instance: str | None, generation: int) -> ErrorCode:
        return group.check_offset_commit(
            member_id, instance, generation, transactional=transactional
        )

    assert check("dyn-1", None, 3) is ErrorCode.none
    assert check("static-1", "inst-1", 3) is ErrorCode.none
    # generation -1 with a member id is compared too
    assert check("dyn-1", None, -1) is ErrorCode.illegal_generation
    assert check("dyn-1", None, 2) is ErrorCode.illegal_generation
    assert check("dyn-1", "inst-9", 3) is ErrorCode.unknown_member_id
    assert check("static-0", "inst-1", 3) is ErrorCode.fenced_instance_id
    assert check("ghost", None, 3) is ErrorCode.unknown_member_id


def test_between_join_and_sync_only_transactional_commits_go_through(group: Group) -> None:
    group.state = GroupState.COMPLETING_REBALANCE
    assert group.check_offset_commit("dyn-1", None, 3, transactional=False) is (
        ErrorCode.rebalance_in_progress
    )
    assert group.check_offset_commit("dyn-1", None, 3, transactional=True) is ErrorCode.none
    # the membership check comes first
    assert group.check_offset_commit("ghost", None, 3, transactional=False) is (
        ErrorCode.unknown_member_id
    )
    group.state = GroupState.PREPARING_REBALANCE  # consumers commit while they revoke
    assert group.check_offset_commit("dyn-1", None, 3, transactional=False) is ErrorCode.none


def test_all_joined_and_max_rebalance_timeout() -> None:
    a, b = member("a", "range"), member("b", "range")
    b.rebalance_timeout_ms = 45_000
    group = group_of(a, b)
    assert group.max_rebalance_timeout_ms == 45_000
    assert Group("g").max_rebalance_timeout_ms == 0
    assert not group.all_joined()
