"""The consumer group protocol (KIP-848) state machine: validation, epochs, target assignment,
incremental reconciliation with pending revocation, leaving, static members, timeouts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lockgate.coordinator.group.assignors import Assignment
from lockgate.coordinator.group.consumer_group import (
    ClassicMember,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    ConsumerMember,
    HeartbeatRequest,
    MemberState,
    Outcome,
    RecordKind,
    expire_revocation,
    heartbeat,
    rearm_revocations,
    refresh_metadata,
    remove_member,
)
from lockgate.protocol.errors import ErrorCode

CONFIG = ConsumerGroupConfig(heartbeat_interval_ms=5000)
TOPICS = {"t": 4}


def join(
    group: ConsumerGroup | None,
    member: str,
    topics: tuple[str, ...] = ("t",),
    *,
    instance: str | None = None,
    assignor: str | None = None,
    known: dict[str, int] | None = None,
    config: ConsumerGroupConfig = CONFIG,
) -> Outcome:
    request = HeartbeatRequest(
        "g", member, 0, instance_id=instance, rebalance_timeout_ms=1000,
        subscribed_topic_names=topics, server_assignor=assignor, owned={},
    )  # fmt: skip
    return heartbeat(group, request, known or TOPICS, config, now_ms=0)


def beat(
    group: ConsumerGroup,
    member: str,
    epoch: int,
    owned: Assignment | None,
    *,
    now: int = 0,
    instance: str | None = None,
    known: dict[str, int] | None = None,
) -> Outcome:
    request = HeartbeatRequest("g", member, epoch, instance_id=instance, owned=owned)
    return heartbeat(group, request, known or TOPICS, CONFIG, now_ms=now)


def ok(outcome: Outcome) -> ConsumerGroup:
    assert outcome.response.error == ErrorCode.none, outcome.response
    assert outcome.group is not None
    return outcome.group


def test_first_member_gets_every_partition_at_epoch_two() -> None:
    outcome = join(None, "m1")
    group = ok(outcome)
    assert outcome.response.member_epoch == 2 and group.group_epoch == 2
    assert outcome.response.assignment == {"t": frozenset(range(4))}
    assert outcome.response.heartbeat_interval_ms == 5000
    assert group.state == ConsumerGroupState.STABLE
    kinds = [r.kind for r in outcome.records]
    for kind in RecordKind:
        assert kind in kinds  # every record type is written for a new group


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (HeartbeatRequest("", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=()), "Group"),
        (HeartbeatRequest("g", "", 0, rebalance_timeout_ms=1, subscribed_topic_names=()), "Member"),
        (HeartbeatRequest("g", "m", 0, subscribed_topic_names=("t",)), "Rebalance"),
        (HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1), "Subscribed"),
        (
            HeartbeatRequest(
                "g",
                "m",
                0,
                rebalance_timeout_ms=1,
                subscribed_topic_names=(),
                owned={"t": frozenset({0})},
            ),
            "TopicPartitions",
        ),
        (HeartbeatRequest("g", "m", -2), "InstanceId"),
        (HeartbeatRequest("g", "m", 1, instance_id=""), "InstanceId"),
    ],
)
def test_invalid_requests(request_: HeartbeatRequest, message: str) -> None:
    outcome = heartbeat(None, request_, TOPICS, CONFIG, 0)
    assert outcome.response.error == ErrorCode.invalid_request
    assert outcome.response.message is not None and message in outcome.response.message
    assert outcome.group is None and not outcome.records


def test_unsupported_assignor() -> None:
    outcome = join(None, "m1", assignor="sticky")
    assert outcome.response.error == ErrorCode.unsupported_assignor


def test_member_chosen_assignor_is_used() -> None:
    group = ok(join(None, "m1", assignor="range"))
    assert group.assignor == "range"
    assert ok(join(None, "m1")).assignor == "uniform"


def test_unknown_group_and_member() -> None:
    assert beat(ConsumerGroup("g"), "m", 3, None).response.error == ErrorCode.unknown_member_id
    outcome = heartbeat(None, HeartbeatRequest("g", "m", 3), TOPICS, CONFIG, 0)
    assert outcome.response.error == ErrorCode.group_id_not_found
    outcome = heartbeat(None, HeartbeatRequest("g", "m", -1), TOPICS, CONFIG, 0)
    assert outcome.response.error == ErrorCode.group_id_not_found


def test_classic_group_with_members_refuses_consumer_members() -> None:
    request = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",))
    outcome = heartbeat(None, request, TOPICS, CONFIG, 0, other_protocol_group=True)
    assert outcome.response.error == ErrorCode.group_id_not_found


def test_group_max_size() -> None:
    small = ConsumerGroupConfig(max_size=1)
    group = ok(join(None, "m1", config=small))
    assert join(group, "m2", config=small).response.error == ErrorCode.group_max_size_reached
    assert join(group, "m1", config=small).response.error == ErrorCode.none  # a member rejoins


def test_epochs_fence_members_ahead_or_behind() -> None:
    group = ok(join(None, "m1"))  # epoch 2
    assert beat(group, "m1", 3, None).response.error == ErrorCode.fenced_member_epoch
    group = ok(join(group, "m2"))  # epoch 3: m1 must revoke first
    group = ok(beat(group, "m1", 2, {"t": frozenset(range(4))}))
    m1 = group.members["m1"]
    assert m1.state == MemberState.UNREVOKED_PARTITIONS and m1.member_epoch == 2
    group = ok(beat(group, "m1", 2, m1.assigned))  # revoked: moves to epoch 3
    assert group.members["m1"].member_epoch == 3
    # the previous epoch is accepted with a subset of the assignment (a lost response)...
    assert beat(group, "m1", 2, group.members["m1"].assigned).response.error == ErrorCode.none
    # ...but not without owned partitions, nor any older epoch
    assert beat(group, "m1", 2, None).response.error == ErrorCode.fenced_member_epoch
    outcome = beat(replace(group, members={**group.members, "m1": replace(m1, member_epoch=6)}),
                   "m1", 4, {})  # fmt: skip
    assert outcome.response.error == ErrorCode.fenced_member_epoch


def test_incremental_reconciliation_withholds_unreleased_partitions() -> None:
    group = ok(join(None, "m1"))
    everything = {"t": frozenset(range(4))}
    outcome = join(group, "m2")
    group = ok(outcome)
    # m2's target partitions are still m1's: it joins at the new epoch with nothing
    assert outcome.response.member_epoch == 3 and outcome.response.assignment == {}
    assert group.members["m2"].state == MemberState.UNRELEASED_PARTITIONS
    assert group.state == ConsumerGroupState.RECONCILING
    target_m2 = group.target["m2"]
    # m1 is asked to revoke m2's partitions and keeps its epoch
    outcome = beat(group, "m1", 2, everything)
    group = ok(outcome)
    assert outcome.response.member_epoch == 2
    assert outcome.response.assignment == group.target["m1"]
    assert group.members["m1"].pending_revocation == target_m2
    # m2 still gets nothing while m1 holds them
    outcome = beat(group, "m2", 3, {})
    group = ok(outcome)
    assert outcome.response.assignment is None and group.members["m2"].assigned == {}
    # m1 acknowledges the revocation (its owned partitions no longer list them)
    outcome = beat(group, "m1", 2, group.target["m1"])
    group = ok(outcome)
    assert outcome.response.member_epoch == 3
    assert group.members["m1"].state == MemberState.STABLE
    # now m2 gets them
    outcome = beat(group, "m2", 3, {})
    group = ok(outcome)
    assert outcome.response.assignment == target_m2
    assert group.state == ConsumerGroupState.STABLE


def test_revocation_unknown_owned_partitions_waits() -> None:
    group = ok(join(join(None, "m1").group, "m2"))
    group = ok(beat(group, "m1", 2, {"t": frozenset(range(4))}))
    outcome = beat(group, "m1", 2, None)  # owned not reported: still holding them
    assert outcome.group is not None
    assert outcome.group.members["m1"].state == MemberState.UNREVOKED_PARTITIONS


def test_member_leaves_and_others_get_its_partitions() -> None:
    group = ok(join(join(None, "m1").group, "m2"))
    group = ok(beat(group, "m1", 2, {"t": frozenset(range(4))}))
    group = ok(beat(group, "m1", 2, group.target["m1"]))
    group = ok(beat(group, "m2", 3, {}))
    outcome = beat(group, "m2", -1, None)
    group = ok(outcome)
    assert outcome.response.member_epoch == -1 and "m2" not in group.members
    assert group.group_epoch == 4 and group.target["m1"] == {"t": frozenset(range(4))}
    outcome = beat(group, "m1", 3, group.members["m1"].assigned)
    assert outcome.response.member_epoch == 4
    assert outcome.response.assignment == {"t": frozenset(range(4))}
    assert beat(group, "m2", -1, None).response.error == ErrorCode.unknown_member_id


def test_static_member_leaves_temporarily_and_keeps_its_assignment() -> None:
    group = ok(join(None, "m1", instance="i1"))
    outcome = beat(group, "m1", -2, None, instance="i1")
    group = ok(outcome)
    assert outcome.response.member_epoch == -2 and group.group_epoch == 2
    assert group.members["m1"].assigned == {"t": frozenset(range(4))}
    # the restarted process joins with a new member id and the same instance id
    outcome = join(group, "m1b", instance="i1")
    group = ok(outcome)
    assert outcome.response.assignment == {"t": frozenset(range(4))}
    assert outcome.response.member_epoch == 2 and group.group_epoch == 2  # no rebalance
    assert set(group.members) == {"m1b"} and group.static_members == {"i1": "m1b"}


def test_static_member_leaving_while_revoking_releases_its_pending_partitions() -> None:
    """As Kafka 4.4: a static member that leaves (epoch -2) keeps its assigned partitions for
    its restart, but those it was still to revoke are released at once, so the member waiting
    for them gets them on its next heartbeat; it is not fenced for not having revoked them."""
    group = ok(join(None, "m1", instance="i1"))
    group = ok(join(group, "m2"))
    group = ok(beat(group, "m1", 2, {"t": frozenset(range(4))}, now=100, instance="i1"))
    m1 = group.members["m1"]
    pending, kept = m1.pending_revocation, m1.assigned
    assert m1.state == MemberState.UNREVOKED_PARTITIONS and pending == group.target["m2"]
    # m2 waits for m1's partitions
    group = ok(beat(group, "m2", 3, {}))
    assert group.members["m2"].state == MemberState.UNRELEASED_PARTITIONS
    assert group.members["m2"].assigned == {}
    outcome = beat(group, "m1", -2, None, instance="i1")
    group = ok(outcome)
    away = group.members["m1"]
    assert outcome.response.member_epoch == -2 and group.group_epoch == 3  # no rebalance
    assert away.assigned == kept and away.pending_revocation == {}
    assert away.revocation_deadline_ms == -1
    [record] = outcome.records
    assert record.kind == RecordKind.CURRENT_ASSIGNMENT and record.value == away
    # its rebalance timeout no longer applies
    assert expire_revocation(group, "m1", TOPICS, CONFIG, 10**9).group is None
    # m2 gets the released partitions
    outcome = beat(group, "m2", 3, {})
    group = ok(outcome)
    assert outcome.response.assignment == pending
    assert group.members["m2"].state == MemberState.STABLE
    # the restarted instance gets the partitions it kept, nothing moves
    outcome = join(group, "m1b", instance="i1")
    group = ok(outcome)
    assert outcome.response.assignment == kept and group.group_epoch == 3
    assert group.members["m1b"].state == MemberState.STABLE
    assert group.state == ConsumerGroupState.STABLE


def test_static_instance_still_in_use() -> None:
    group = ok(join(None, "m1", instance="i1"))
    assert join(group, "m2", instance="i1").response.error == ErrorCode.unreleased_instance_id
    assert beat(group, "m2", 1, None, instance="i1").response.error == (
        ErrorCode.fenced_instance_id
    )
    assert beat(group, "m2", 1, None, instance="i9").response.error == ErrorCode.unknown_member_id
    # a static member leaving for good (-1) is removed
    group = ok(beat(group, "m1", -1, None, instance="i1"))
    assert not group.members and not group.static_members
    assert group.state == ConsumerGroupState.EMPTY


def test_subscription_change_bumps_the_epoch() -> None:
    topics = {"t": 2, "u": 2}
    group = ok(join(None, "m1", known=topics))
    request = HeartbeatRequest("g", "m1", 2, subscribed_topic_names=("t", "u"), owned=None)
    outcome = heartbeat(group, request, topics, CONFIG, 0)
    group = ok(outcome)
    assert group.group_epoch == 3 and outcome.response.member_epoch == 3
    assert outcome.response.assignment == {"t": frozenset({0, 1}), "u": frozenset({0, 1})}


def test_regex_subscription() -> None:
    topics = {"orders-1": 1, "orders-2": 1, "other": 1}
    request = HeartbeatRequest(
        "g", "m1", 0, rebalance_timeout_ms=1, subscribed_topic_regex="orders-.*", owned={}
    )
    outcome = heartbeat(None, request, topics, CONFIG, 0)
    assert outcome.response.assignment == {"orders-1": frozenset({0}), "orders-2": frozenset({0})}
    bad = replace(request, subscribed_topic_regex="(")
    assert heartbeat(None, bad, topics, CONFIG, 0).response.error == (
        ErrorCode.invalid_regular_expression
    )


def test_topic_metadata_changes_bump_the_epoch() -> None:
    group = ok(join(None, "m1"))
    assert refresh_metadata(group, TOPICS, CONFIG).group is None  # nothing changed
    outcome = refresh_metadata(group, {"t": 6}, CONFIG)
    group = ok(outcome)
    assert group.group_epoch == 3 and group.target["m1"] == {"t": frozenset(range(6))}
    # a heartbeat also sees new partitions
    outcome = beat(group, "m1", 2, {"t": frozenset(range(4))}, known={"t": 8})
    assert outcome.response.assignment == {"t": frozenset(range(8))}
    # the topic deleted: nothing left to assign
    outcome = refresh_metadata(ok(outcome), {}, CONFIG)
    assert ok(outcome).target["m1"] == {}


def test_revocation_timeout_fences_the_member() -> None:
    group = ok(join(join(None, "m1").group, "m2"))
    group = ok(beat(group, "m1", 2, {"t": frozenset(range(4))}, now=100))
    deadline = group.members["m1"].revocation_deadline_ms
    assert deadline == 1100  # now + the member's rebalance timeout
    assert expire_revocation(group, "m1", TOPICS, CONFIG, 1099).group is None
    group = ok(expire_revocation(group, "m1", TOPICS, CONFIG, 1100))
    assert set(group.members) == {"m2"} and group.target["m2"] == {"t": frozenset(range(4))}


def test_a_member_revoking_again_at_its_next_epoch_gets_a_new_deadline() -> None:
    """As Kafka (its rebalance timer is scheduled per member epoch): a member that has revoked
    what it was asked to and, at its next epoch, is asked to revoke more gets its full
    rebalance timeout again from then."""
    topics = {"t": 4, "u": 2}
    group = ok(join(join(None, "m1", known=topics).group, "m2", known=topics))
    group = ok(beat(group, "m1", 2, {"t": frozenset(range(4))}, now=100, known=topics))
    m1 = group.members["m1"]
    assert m1.state == MemberState.UNREVOKED_PARTITIONS and m1.revocation_deadline_ms == 1100
    kept = dict(m1.assigned)
    # m1 now subscribes to u only (epoch 4) and reports it has let go of what epoch 3 took
    request = HeartbeatRequest("g", "m1", 2, subscribed_topic_names=("u",), owned=kept)
    group = ok(heartbeat(group, request, topics, CONFIG, now_ms=500))
    m1 = group.members["m1"]
    assert (m1.state, m1.member_epoch, m1.pending_revocation) == (
        MemberState.UNREVOKED_PARTITIONS, 3, kept,
    )  # fmt: skip
    assert m1.revocation_deadline_ms == 1500
    assert expire_revocation(group, "m1", topics, CONFIG, 1100).group is None
    assert "m1" not in ok(expire_revocation(group, "m1", topics, CONFIG, 1500)).members


def test_loading_a_group_rearms_the_revocations_under_way() -> None:
    """The deadlines are not in the records: after a load (replay) every member still revoking
    (UNREVOKED_PARTITIONS) gets its full rebalance timeout from the load, as Kafka 4.4, and is
    fenced at that deadline; members not revoking get none."""
    group = ok(join(join(None, "m1").group, "m2"))
    group = ok(beat(group, "m1", 2, {"t": frozenset(range(4))}, now=100))
    # what a replay rebuilds (test_consumer_runtime.py): the same group without deadlines
    replayed = replace(
        group,
        members={m: replace(v, revocation_deadline_ms=-1) for m, v in group.members.items()},
    )
    assert expire_revocation(replayed, "m1", TOPICS, CONFIG, 10**9).group is None
    loaded = rearm_revocations(replayed, 5_000)
    assert loaded.members["m1"].revocation_deadline_ms == 6_000  # load + rebalance timeout
    assert loaded.members["m2"].revocation_deadline_ms == -1
    assert loaded.members["m2"] == replayed.members["m2"]
    assert expire_revocation(loaded, "m1", TOPICS, CONFIG, 5_999).group is None
    assert set(ok(expire_revocation(loaded, "m1", TOPICS, CONFIG, 6_000)).members) == {"m2"}


def test_a_static_member_away_while_revoking_is_fenced_after_a_load() -> None:
    """Kafka 4.4 keeps the revoking state of a static member that leaves with epoch -2 and
    rearms its rebalance timer at the next load, which then fences it unless its restarted
    instance has replaced it; before the load it is not timed out."""
    group = ok(join(None, "m1", instance="i1"))
    group = ok(join(group, "m2"))
    group = ok(beat(group, "m1", 2, {"t": frozenset(range(4))}, now=100, instance="i1"))
    group = ok(beat(group, "m1", -2, None, instance="i1"))
    away = group.members["m1"]
    assert away.state == MemberState.UNREVOKED_PARTITIONS and away.revocation_deadline_ms == -1
    loaded = rearm_revocations(group, 2_000)
    assert loaded.members["m1"].revocation_deadline_ms == 3_000
    assert set(ok(expire_revocation(loaded, "m1", TOPICS, CONFIG, 3_000)).members) == {"m2"}
    # its restarted instance, there in time, is not fenced
    restarted = ok(join(loaded, "m1b", instance="i1"))
    assert expire_revocation(restarted, "m1", TOPICS, CONFIG, 3_000).group is None
    assert expire_revocation(restarted, "m1b", TOPICS, CONFIG, 10**9).group is None


def test_a_restarted_static_member_starts_with_previous_epoch_zero() -> None:
    """As Kafka 4.4: the replacement of a static member starts at epoch 0 with previous epoch
    0 (not its predecessor's), and its member, target and current assignment records are
    written under its new id at once. Visible when the restarted instance (here a classic
    member of a mixed group, which reports what it owns) must revoke at epoch 0."""
    topics = {"t": 4, "u": 2}
    group = ok(join(None, "m1", instance="i1", known=topics))
    group = ok(join(group, "m2", known=topics))
    group = ok(beat(group, "m1", 2, {"t": frozenset(range(4))}, instance="i1", known=topics))
    group = ok(beat(group, "m1", 2, group.members["m1"].assigned, instance="i1", known=topics))
    m1 = group.members["m1"]
    assert (m1.member_epoch, m1.previous_member_epoch) == (3, 2)
    kept = dict(m1.assigned)
    group = ok(beat(group, "m1", -2, None, instance="i1", known=topics))
    # the restart subscribes to u instead: it must give up the t partitions it still owns
    request = HeartbeatRequest(
        "g", "m1b", 0, instance_id="i1", rebalance_timeout_ms=1000,
        subscribed_topic_names=("u",), owned=kept,
        classic=ClassicMember(10_000, (("range", b""),)),
    )  # fmt: skip
    outcome = heartbeat(group, request, topics, CONFIG, now_ms=0)
    group = ok(outcome)
    restarted = group.members["m1b"]
    assert restarted.state == MemberState.UNREVOKED_PARTITIONS
    assert (restarted.member_epoch, restarted.previous_member_epoch) == (0, 0)
    written = {(r.kind, r.member_id) for r in outcome.records if r.value is not None}
    assert {(RecordKind.MEMBER, "m1b"), (RecordKind.TARGET_MEMBER, "m1b"),
            (RecordKind.CURRENT_ASSIGNMENT, "m1b")} <= written  # fmt: skip
    current = [r.value for r in outcome.records
               if r.kind == RecordKind.CURRENT_ASSIGNMENT and r.member_id == "m1b"]  # fmt: skip
    assert all(isinstance(v, ConsumerMember) and v.previous_member_epoch == 0 for v in current)
    # a consumer-protocol restart reconciles at once, from previous epoch 0 too
    group = ok(join(None, "s1", instance="i2"))
    group = ok(beat(group, "s1", -2, None, instance="i2"))
    outcome = join(group, "s1b", instance="i2")
    replacement = ok(outcome).members["s1b"]
    assert (replacement.member_epoch, replacement.previous_member_epoch) == (2, 0)
    first = next(r.value for r in outcome.records
                 if r.kind == RecordKind.CURRENT_ASSIGNMENT and r.member_id == "s1b")  # fmt: skip
    assert isinstance(first, ConsumerMember)
    assert (first.member_id, first.member_epoch, first.previous_member_epoch) == ("s1b", 0, 0)


def test_session_expiry_removes_member() -> None:
    group = ok(join(join(None, "m1").group, "m2"))
    group = ok(remove_member(group, "m2", TOPICS, CONFIG))
    assert set(group.members) == {"m1"} and group.group_epoch == 4
    assert remove_member(group, "m2", TOPICS, CONFIG).group is None


def test_rejoin_with_epoch_zero_gets_full_assignment() -> None:
    group = ok(join(None, "m1"))
    outcome = join(group, "m1")  # fenced client rejoining with its member id
    assert outcome.response.error == ErrorCode.none
    assert outcome.response.assignment == {"t": frozenset(range(4))}
    assert outcome.response.member_epoch == 2 and ok(outcome).group_epoch == 2


def test_three_members_converge_with_each_partition_once() -> None:
    topics = {"t": 7}
    members = ["m1", "m2", "m3"]
    group: ConsumerGroup | None = None
    for m in members:
        group = ok(join(group, m, known=topics))
    assert group is not None
    owned: dict[str, Assignment] = {m: dict(group.members[m].assigned) for m in members}
    for _ in range(6):  # each member heartbeats, revoking what it was asked to
        for m in members:
            outcome = beat(group, m, group.members[m].member_epoch, owned[m], known=topics)
            group = ok(outcome)
            owned[m] = dict(group.members[m].assigned)
            held = [(t, p) for a in owned.values() for t, ps in a.items() for p in ps]
            assert len(held) == len(set(held))  # never two owners
    assert group.state == ConsumerGroupState.STABLE
    assert sorted(p for a in owned.values() for p in a.get("t", ())) == list(range(7))
