"""lockgate's share consumer and its membership without sockets: a ShareFetch answer becomes
held records and GAP acknowledgements; explicit mode refuses a second final acknowledgement, a
record it does not hold, and a poll before every record was acknowledged; implicit mode
accepts everything at the next poll; acknowledgements go back into the queue after a session
error; ShareGroupHeartbeat answers: the assignment, fencing (join again, same member id),
fatal errors and share groups disabled."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import ErrorCode, KafkaConnectionError, KafkaError
from lockgate.client.share_consumer import ShareConsumer
from lockgate.client.share_member import (
    JOIN_EPOCH,
    ShareGroupsUnsupportedError,
    ShareMember,
    share_heartbeat_body,
)
from lockgate.client.share_session import (
    AcknowledgeType,
    FetchPlan,
    ShareSession,
    TopicIdPartition,
)
from lockgate.protocol.records import assign_offset, build_batch, build_control_batch

TOPIC_ID = uuid.UUID(int=7)
TIP = TopicIdPartition(TOPIC_ID, 0)
TP = TopicPartition("t", 0)
NODE = 1


def consumer(mode: str) -> ShareConsumer:
    made = ShareConsumer("127.0.0.1:1", group_id="g", acknowledgement_mode=mode)
    made._member.names[TOPIC_ID] = "t"
    return made


def fetch_answer(records: bytes, ranges: list[tuple[int, int, int]]) -> Any:
    part = SimpleNamespace(
        partition_index=0,
        error_code=0,
        error_message=None,
        acknowledge_error_code=0,
        acknowledge_error_message=None,
        records=records,
        acquired_records=[
            SimpleNamespace(first_offset=f, last_offset=last, delivery_count=c)
            for f, last, c in ranges
        ],
    )
    return SimpleNamespace(responses=[SimpleNamespace(topic_id=TOPIC_ID, partitions=[part])])


def deliver(made: ShareConsumer) -> list[Any]:
    """Offsets 0-2 acquired: two records, then a commit marker at 2."""
    marker = bytearray(build_control_batch(9, 0, True, 0, 5))
    assign_offset(marker, 2, 0)
    data = build_batch([(None, b"a"), (None, b"b")], base_offset=0) + bytes(marker)
    made._sessions[NODE] = ShareSession(epoch=2, partitions=frozenset({TIP}))
    plan = FetchPlan(1, {TIP: ()}, frozenset())
    return made._received(NODE, plan, {}, fetch_answer(data, [(0, 2, 1)]))


def test_an_answer_becomes_held_records_and_gap_acknowledgements() -> None:
    made = consumer("explicit")
    records = deliver(made)
    assert [(r.offset, r.value, r.delivery_count) for r in records] == [(0, b"a", 1), (1, b"b", 1)]
    assert set(made._held) == {(TP, 0), (TP, 1)}
    assert made._pending == {NODE: {TIP: {2: AcknowledgeType.GAP}}}  # the commit marker


def test_explicit_acknowledgements_are_final_once() -> None:
    made = consumer("explicit")
    records = deliver(made)
    made.acknowledge(records[0], AcknowledgeType.REJECT)
    with pytest.raises(ValueError, match="not a record this consumer holds"):
        made.acknowledge(records[0], AcknowledgeType.ACCEPT)
    with pytest.raises(ValueError, match="GAP"):
        made.acknowledge(records[1], AcknowledgeType.GAP)
    made.acknowledge(records[1], AcknowledgeType.RENEW)
    assert (TP, 1) in made._held  # renewed: still the caller's to settle
    made.acknowledge(records[1], AcknowledgeType.RELEASE)
    assert made._pending[NODE][TIP] == {
        0: AcknowledgeType.REJECT,
        1: AcknowledgeType.RELEASE,
        2: AcknowledgeType.GAP,
    }


def test_explicit_mode_refuses_a_poll_before_every_record_is_acknowledged() -> None:
    made = consumer("explicit")
    made._subscribed = ("t",)
    deliver(made)

    async def poll() -> None:
        await made.poll(10)

    with pytest.raises(ValueError, match="must be acknowledged"):
        asyncio.run(poll())


def test_implicit_mode_accepts_what_it_handed_out_and_refuses_acknowledge() -> None:
    made = consumer("implicit")
    records = deliver(made)
    with pytest.raises(ValueError, match="explicit"):
        made.acknowledge(records[0])
    made._accept_held()
    assert not made._held
    assert made._pending[NODE][TIP] == {
        0: AcknowledgeType.ACCEPT,
        1: AcknowledgeType.ACCEPT,
        2: AcknowledgeType.GAP,
    }


def test_put_back_keeps_newer_acknowledgements() -> None:
    made = consumer("explicit")
    made._queue(NODE, TIP, 5, AcknowledgeType.REJECT)
    made._put_back(NODE, {TIP: {5: AcknowledgeType.ACCEPT, 6: AcknowledgeType.ACCEPT}})
    assert made._pending[NODE][TIP] == {5: AcknowledgeType.REJECT, 6: AcknowledgeType.ACCEPT}


# ---------------------------------------------------------------------------------------------
# Membership


def heartbeat_answer(
    code: int = 0, epoch: int = 1, assignment: list[int] | None = None, message: str | None = None
) -> Any:
    return SimpleNamespace(
        error_code=code,
        error_message=message,
        member_epoch=epoch,
        heartbeat_interval=datetime.timedelta(milliseconds=750),
        assignment=None
        if assignment is None
        else SimpleNamespace(
            topic_partitions=[SimpleNamespace(topic_id=TOPIC_ID, partitions=assignment)]
        ),
    )


def member() -> ShareMember:
    made = ShareMember(SimpleNamespace(), "g")  # type: ignore[arg-type]
    made.names[TOPIC_ID] = "t"
    return made


def test_the_heartbeat_body_joins_with_the_subscription_and_a_client_member_id() -> None:
    made = member()
    assert 0 < len(made.member_id) <= 36
    body = share_heartbeat_body("g", made.member_id, JOIN_EPOCH, ("a", "b"), None)
    assert body == {
        "group_id": "g",
        "member_id": made.member_id,
        "member_epoch": 0,
        "rack_id": None,
        "subscribed_topic_names": ["a", "b"],
    }


def test_an_answer_sets_epoch_interval_and_assignment() -> None:
    made = member()
    asyncio.run(made._apply(heartbeat_answer(epoch=3, assignment=[0, 2]), ("t",)))
    assert made.member_epoch == 3 and made.heartbeat_interval_ms == 750
    assert made.assigned_partitions() == [TopicPartition("t", 0), TopicPartition("t", 2)]
    # a null assignment means "unchanged"
    asyncio.run(made._apply(heartbeat_answer(epoch=3), None))
    assert len(made.assignment) == 2


def test_fencing_drops_the_assignment_and_joins_again_under_the_same_id() -> None:
    made = member()
    member_id = made.member_id
    asyncio.run(made._apply(heartbeat_answer(epoch=3, assignment=[0]), ("t",)))
    with pytest.raises(KafkaError):
        asyncio.run(made._apply(heartbeat_answer(ErrorCode.fenced_member_epoch), None))
    assert made.member_epoch == JOIN_EPOCH and not made.assignment
    assert made.member_id == member_id and made.fatal is None


@pytest.mark.parametrize("code", [ErrorCode.group_authorization_failed, ErrorCode.invalid_request])
def test_errors_no_retry_mends_are_fatal(code: ErrorCode) -> None:
    made = member()
    with pytest.raises(KafkaError):
        asyncio.run(made._apply(heartbeat_answer(code), None))
    assert made.fatal is not None and made.fatal.code == code


def test_share_groups_disabled_is_fatal_and_named() -> None:
    made = member()
    with pytest.raises(ShareGroupsUnsupportedError):
        asyncio.run(made._apply(heartbeat_answer(ErrorCode.unsupported_version), None))


def test_a_moved_coordinator_is_looked_up_again_and_retried() -> None:
    made = member()
    made._coordinator_id = 4
    with pytest.raises(KafkaError) as caught:
        asyncio.run(made._apply(heartbeat_answer(ErrorCode.not_coordinator), None))
    assert caught.value.retriable and made.fatal is None and made._coordinator_id is None


def test_an_unreachable_coordinator_is_looked_up_again() -> None:
    """A killed coordinator: the connection fails, and the next heartbeat asks FindCoordinator
    again instead of dialing the dead broker for ever."""

    async def unreachable(node: int) -> Any:
        raise KafkaConnectionError(f"cannot connect to broker {node}")

    made = ShareMember(SimpleNamespace(connection=unreachable), "g")  # type: ignore[arg-type]
    made._coordinator_id = 4
    with pytest.raises(KafkaConnectionError):
        asyncio.run(made._heartbeat(made.member_epoch))
    assert made._coordinator_id is None and made.fatal is None


def test_a_leader_that_fails_has_its_partitions_metadata_asked_again() -> None:
    """A fetch from a killed leader fails: the topic's metadata is dropped, so that the next
    round fetches from the partition's new leader."""
    made = consumer("explicit")
    made._member.assignment = frozenset({TIP})
    invalidated: list[str] = []

    async def leaders() -> dict[int, set[TopicIdPartition]]:
        return {NODE: {TIP}}

    async def exchange(node: int, wanted: set[TopicIdPartition], max_wait_ms: int) -> Any:
        raise KafkaConnectionError(f"broker {node} is gone")

    made._leaders = leaders  # type: ignore[method-assign]
    made._exchange = exchange  # type: ignore[method-assign]
    made.cluster.invalidate = invalidated.append  # type: ignore[method-assign,assignment]
    made.retry_backoff = 0.0
    assert asyncio.run(made._round(time.monotonic() + 1, fetch=True)) == []
    assert invalidated == ["t"]
