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
        self.min_versions: dict[int, int] = {}

    def version_for(self, api_key: int, *, min_version: int = 0, **_: Any) -> int:
        self.min_versions[api_key] = min_version
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


class OffsetsMember(ScriptedMember):
    """Answers OffsetCommit/OffsetFetch from a script; a heartbeat between two tries moves
    the member epoch on, as the coordinator's answer would."""

    def __init__(self, commit_codes: list[ErrorCode]) -> None:
        super().__init__([])
        self.commit_codes = commit_codes
        self.requests: list[tuple[int, Mapping[str, Any], int]] = []
        self.generation_id, self.member_id = 4, "member-1"
        self.heartbeats = 0

    async def _request(self, api_key: int, body: Mapping[str, Any], **options: Any) -> Any:
        self.requests.append((api_key, body, options["version"]))
        if api_key == 8:
            code = self.commit_codes.pop(0)
            partition = SimpleNamespace(partition_index=0, error_code=code)
            return SimpleNamespace(topics=[SimpleNamespace(name="a", partitions=[partition])])
        entry = SimpleNamespace(
            error_code=0,
            topics=[
                SimpleNamespace(
                    name="a",
                    partitions=[
                        SimpleNamespace(
                            partition_index=0, committed_offset=7, metadata="", error_code=0
                        )
                    ],
                )
            ],
        )
        return SimpleNamespace(groups=[entry])

    async def _stale_epoch(self) -> bool:
        self.heartbeats += 1
        self.generation_id += 1
        return True


class TopicsCluster(FakeCluster):
    async def topic(self, name: str) -> TopicInfo:
        return self.metadata.topics[name]


async def test_commits_carry_the_member_epoch_and_a_stale_one_is_retried() -> None:
    from lockgate.client.transactions import OffsetAndMetadata

    member = OffsetsMember([ErrorCode.stale_member_epoch, ErrorCode.none])
    member.cluster = TopicsCluster()  # type: ignore[assignment]
    await member.commit({TopicPartition("a", 0): OffsetAndMetadata(7)})
    (_, first, _), (_, second, _) = member.requests
    assert member.connection.min_versions[8] == 9  # OffsetCommit v9+: the member epoch
    assert (first["member_id"], first["generation_id_or_member_epoch"]) == ("member-1", 4)
    assert second["generation_id_or_member_epoch"] == 5  # after the heartbeat
    assert member.heartbeats == 1
    found = await member.committed(
        [TopicPartition("a", 0)], require_stable=True, deadline=float("inf")
    )
    assert member.connection.min_versions[9] == 9  # OffsetFetch v9+ likewise
    group = member.requests[-1][1]["groups"][0]
    assert (group["member_id"], group["member_epoch"]) == ("member-1", 5)
    assert found[TopicPartition("a", 0)] == OffsetAndMetadata(7, "", -1)


async def test_a_commit_fenced_for_good_is_raised() -> None:
    from lockgate.client.transactions import OffsetAndMetadata

    member = OffsetsMember([ErrorCode.fenced_member_epoch])
    member.cluster = TopicsCluster()  # type: ignore[assignment]
    with pytest.raises(KafkaError) as raised:
        await member.commit({TopicPartition("a", 0): OffsetAndMetadata(7)})
    assert raised.value.code == ErrorCode.fenced_member_epoch
