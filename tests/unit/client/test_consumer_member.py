"""The KIP-848 membership of lockgate's consumer without sockets: the reconciliation step
(revoke, add, names not resolved yet), full and incremental heartbeats, the answers' errors
(lost partitions, fatal errors, a broker without the protocol), and join → acknowledge → leave
against a scripted coordinator."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from lockgate.client.cluster import ClusterMetadata, TopicInfo, TopicPartition
from lockgate.client.consumer_member import (
    CONSUMER_GROUP_HEARTBEAT,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerMember,
    ConsumerProtocolUnsupportedError,
    HeartbeatFields,
    TopicIdPartition,
    heartbeat_body,
    reconcile,
)
from lockgate.client.errors import ErrorCode, KafkaError

A, B = uuid.uuid4(), uuid.uuid4()
NAMES = {A: "a", B: "b"}


def parts(*items: tuple[uuid.UUID, int]) -> frozenset[TopicIdPartition]:
    return frozenset(TopicIdPartition(t, p) for t, p in items)


def tps(*items: tuple[str, int]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(t, p) for t, p in items)


# ---------------------------------------------------------------------------------------------
# Reconciliation


def test_reconcile_revokes_what_the_target_dropped_and_adds_what_is_new() -> None:
    step = reconcile(parts((A, 0), (A, 1)), parts((A, 1), (B, 0)), NAMES)
    assert step.revoked == tps(("a", 0))
    assert step.assigned == tps(("b", 0))
    assert step.owned == parts((A, 1), (B, 0))
    assert step.complete


def test_reconcile_with_the_target_reached_changes_nothing() -> None:
    step = reconcile(parts((A, 0)), parts((A, 0)), NAMES)
    assert (step.revoked, step.assigned, step.owned, step.complete) == ((), (), parts((A, 0)), True)


def test_partitions_of_an_unknown_topic_id_wait_for_the_metadata() -> None:
    unknown = uuid.uuid4()
    step = reconcile(parts((A, 0)), parts((B, 0), (unknown, 0)), NAMES)
    assert step.revoked == tps(("a", 0))  # revocation never waits
    assert step.assigned == tps(("b", 0))
    assert step.owned == parts((B, 0))
    assert not step.complete


# ---------------------------------------------------------------------------------------------
# Heartbeat bodies

FIELDS = HeartbeatFields("static-1", None, 30_000, ("a", "b"), None, "uniform", parts((A, 0)))


def test_a_full_heartbeat_says_everything() -> None:
    body = heartbeat_body("g", "m", 0, FIELDS, None)
    assert body["instance_id"] == "static-1"
    assert body["rebalance_timeout"] == 30_000
    assert body["subscribed_topic_names"] == ["a", "b"]
    assert body["server_assignor"] == "uniform"
    assert body["topic_partitions"] == [{"topic_id": A, "partitions": [0]}]


def test_an_incremental_heartbeat_sends_only_what_changed() -> None:
    same = heartbeat_body("g", "m", 4, FIELDS, FIELDS)
    assert same["member_epoch"] == 4
    assert same["instance_id"] == "static-1"  # static members are found by it
    assert same["rebalance_timeout"] == -1
    assert same["subscribed_topic_names"] is None
    assert same["server_assignor"] is None
    assert same["topic_partitions"] is None
    acked = HeartbeatFields(
        "static-1", None, 30_000, ("a",), None, "uniform", parts((A, 0), (B, 1))
    )
    changed = heartbeat_body("g", "m", 4, acked, FIELDS)
    assert changed["subscribed_topic_names"] == ["a"]
    assert {t["topic_id"]: t["partitions"] for t in changed["topic_partitions"]} == {
        A: [0],
        B: [1],
    }
    assert changed["rebalance_timeout"] == -1


# ---------------------------------------------------------------------------------------------
# Answers, through a scripted coordinator


class FakeCluster:
    request_timeout_ms = 1_000

    def __init__(self) -> None:
        topics = {name: TopicInfo(name, topic_id, False, ()) for topic_id, name in NAMES.items()}
        self.metadata = ClusterMetadata(topics=topics)

    async def refresh_metadata(self, topics: object = None) -> ClusterMetadata:
        return self.metadata

    def backoff_s(self, attempt: int) -> float:
        return 0.0


class FakeConnection:
    address = "fake:9092"

    def __init__(self, versions: int | None = 1) -> None:
        self.versions = versions

    def version_for(self, api_key: int, **_: Any) -> int:
        if self.versions is None:
            from lockgate.client.errors import UnsupportedVersionError

            raise UnsupportedVersionError("API 68 not at all")
        return self.versions


def answer(
    code: ErrorCode = ErrorCode.none,
    epoch: int = 1,
    assignment: frozenset[TopicIdPartition] | None = None,
) -> SimpleNamespace:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for p in sorted(assignment or ()):
        by_topic.setdefault(p.topic_id, []).append(p.partition)
    return SimpleNamespace(
        error_code=code,
        error_message=None,
        member_id="",
        member_epoch=epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=250),
        assignment=None
        if assignment is None
        else SimpleNamespace(
            topic_partitions=[
                SimpleNamespace(topic_id=t, partitions=ps) for t, ps in by_topic.items()
            ]
        ),
    )


class ScriptedMember(ConsumerMember):
    def __init__(self, answers: list[SimpleNamespace], **options: Any) -> None:
        super().__init__(FakeCluster(), "g", **options)  # type: ignore[arg-type]
        self.answers = answers
        self.sent: list[Mapping[str, Any]] = []
        self.connection = FakeConnection()

    async def coordinator(self) -> Any:
        return self.connection

    async def _request(self, api_key: int, body: Mapping[str, Any], **options: Any) -> Any:
        assert api_key == CONSUMER_GROUP_HEARTBEAT
        self.sent.append(body)
        return self.answers.pop(0) if self.answers else answer(epoch=self.generation_id)

    def _start_heartbeat(self) -> None:  # the test sends each heartbeat itself
        pass


async def test_join_reconcile_acknowledge_then_static_leave() -> None:
    member = ScriptedMember(
        [answer(epoch=1, assignment=parts((A, 0), (A, 1)))], group_instance_id="static-1"
    )
    rebalance = await member.join(["a"], deadline=float("inf"))
    join = member.sent[0]
    assert join["member_epoch"] == 0
    assert join["topic_partitions"] == []  # a join owns nothing
    assert join["member_id"]  # v1: the member's own id
    assert rebalance.assigned == tps(("a", 0), ("a", 1))
    assert member.assignment == tps(("a", 0), ("a", 1))
    assert member.heartbeat_interval_ms == 250
    assert not member.rejoin_needed
    await member._heartbeat(member.generation_id)
    assert member.sent[1]["topic_partitions"] is None  # not applied yet: nothing to ack
    member.reconciled()
    await member._heartbeat(member.generation_id)
    ack = member.sent[2]
    assert ack["topic_partitions"] == [{"topic_id": A, "partitions": [0, 1]}]
    assert ack["subscribed_topic_names"] is None  # unchanged since the join
    metadata = member.metadata()
    assert (metadata.generation_id, metadata.member_id) == (1, join["member_id"])
    await member.leave()
    assert member.sent[-1]["member_epoch"] == STATIC_LEAVE_EPOCH
    assert not member.joined


async def test_a_new_target_revokes_first_and_a_dynamic_member_leaves_with_minus_one() -> None:
    member = ScriptedMember([answer(epoch=1, assignment=parts((A, 0), (A, 1)))])
    await member.join(["a"], deadline=float("inf"))
    member.reconciled()
    member.answers.append(answer(epoch=1, assignment=parts((A, 1))))
    await member._heartbeat(1)
    assert member.rejoin_needed
    step = await member.join(["a"], deadline=float("inf"))
    assert (step.revoked, step.assigned) == (tps(("a", 0)), ())
    await member.leave()
    assert member.sent[-1]["member_epoch"] == LEAVE_EPOCH


@pytest.mark.parametrize("code", [ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id])
async def test_a_fenced_member_loses_everything_and_joins_with_epoch_zero(code: ErrorCode) -> None:
    member = ScriptedMember([answer(epoch=3, assignment=parts((B, 2)))])
    await member.join(["b"], deadline=float("inf"))
    member.reconciled()
    member.answers.append(answer(code))
    with pytest.raises(KafkaError):
        await member._heartbeat(3)
    assert not member.joined and member.assignment == ()
    member.answers.append(answer(epoch=5, assignment=parts((B, 0))))
    step = await member.join(["b"], deadline=float("inf"))
    assert step.lost == tps(("b", 2))
    assert step.revoked == ()  # lost partitions are not revoked (no commit)
    assert step.assigned == tps(("b", 0))
    rejoin = member.sent[-1]
    assert rejoin["member_epoch"] == 0 and rejoin["topic_partitions"] == []
    assert rejoin["subscribed_topic_names"] == ["b"]  # a full heartbeat again


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.group_max_size_reached,
        ErrorCode.unsupported_assignor,
        ErrorCode.invalid_request,
        ErrorCode.unreleased_instance_id,
    ],
)
async def test_errors_the_user_must_fix_are_raised(code: ErrorCode) -> None:
    member = ScriptedMember([answer(code)])
    with pytest.raises(KafkaError) as raised:
        await member.join(["a"], deadline=float("inf"))
    assert raised.value.code == code
    assert member.fatal is raised.value
    with pytest.raises(KafkaError):
        await member.join(["a"], deadline=float("inf"))


async def test_a_broker_without_the_consumer_protocol_says_so() -> None:
    member = ScriptedMember([])
    member.connection = FakeConnection(versions=None)
    with pytest.raises(ConsumerProtocolUnsupportedError, match="group_protocol='classic'"):
        await member.join(["a"], deadline=float("inf"))


async def test_a_moved_coordinator_is_looked_up_again_and_the_join_retried() -> None:
    member = ScriptedMember([answer(ErrorCode.not_coordinator), answer(epoch=1)])
    member._coordinator_id = 7
    await member.join(["a"], deadline=float("inf"))
    assert member.joined and member._coordinator_id is None
    assert len(member.sent) == 2 and member.sent[1]["member_epoch"] == 0


def test_unknown_remote_assignor_is_refused() -> None:
    with pytest.raises(ValueError, match="group_remote_assignor"):
        ConsumerMember(FakeCluster(), "g", remote_assignor="sticky")  # type: ignore[arg-type]
