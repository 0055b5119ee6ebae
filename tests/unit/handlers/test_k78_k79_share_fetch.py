"""ShareFetch (78) and ShareAcknowledge (79) at the handler, against a broker in this process
(memory storage): records produced, the share partition initialized as the group coordinator
does, then share fetches and acknowledgements built and encoded with kio at the version under
test; the acquired records' state through a restart."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import build_batch, iter_records, parse_header
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.session import Session
from lockgate.server.broker import Broker
from lockgate.storage.errors import StorageError
from lockgate.storage.memory import MemoryEngine
from tests.unit.handlers.support import (
    ADMIN,
    ALICE,
    SHARE_SETTINGS,
    call,
    grant,
    running,
    started,
    topic_id,
)

FETCH, ACK = ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE
SETTINGS = {**SHARE_SETTINGS, "group.share.max.share.sessions": "2"}
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
TRANSACTIONAL = 0x10


@pytest.fixture
async def engine() -> MemoryEngine:
    return MemoryEngine()


@pytest.fixture
async def broker(engine: MemoryEngine) -> AsyncIterator[Broker]:
    async with running(engine, SETTINGS) as broker:
        await broker.admin.create("t", 1, 1, {})
        yield broker


async def produce(broker: Broker, *batches: int) -> None:
    """Appends batches of the given record counts to t-0."""
    partition = broker.topics.get("t", 0)
    assert partition is not None
    for count in batches:
        batch = build_batch([(None, b"v%d" % i) for i in range(count)])
        await broker.writer.write(partition, batch)


async def initialize(broker: Broker, start: int = 0, group: str = "g") -> None:
    result = await broker.share_leader.persister.initialize(group, topic_id(broker), 0, 1, start)
    assert result.error == ErrorCode.none


def acks(batches: list[tuple[int, int, list[int]]]) -> list[dict[str, Any]]:
    return [
        {"first_offset": f, "last_offset": last, "acknowledge_types": types}
        for f, last, types in batches
    ]


async def share_fetch(
    broker: Broker,
    epoch: int,
    *,
    member: str = "m1",
    version: int = 2,
    ack: list[tuple[int, int, list[int]]] | None = None,
    max_records: int = 500,
    max_wait: int = 0,
    forget: bool = False,
    listed: bool = True,
    extra: dict[str, Any] | None = None,
    session: Session = ADMIN,
    connection: int = 1,
) -> Any:
    partition: dict[str, Any] = {"partition_index": 0, "acknowledgement_batches": acks(ack or [])}
    body: dict[str, Any] = {
        "group_id": "g",
        "member_id": member,
        "share_session_epoch": epoch,
        "max_wait": max_wait,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": max_records,
        "batch_size": max_records,
        "topics": [{"topic_id": topic_id(broker), "partitions": [partition]}] if listed else [],
        "forgotten_topics_data": (
            [{"topic_id": topic_id(broker), "partitions": [0]}] if forget else []
        ),
        **(extra or {}),
    }
    return await call(broker, FETCH, version, body, session, connection)


async def share_ack(
    broker: Broker,
    epoch: int,
    ack: list[tuple[int, int, list[int]]],
    *,
    member: str = "m1",
    version: int = 2,
    renew: bool = False,
    session: Session = ADMIN,
) -> Any:
    body: dict[str, Any] = {
        "group_id": "g",
        "member_id": member,
        "share_session_epoch": epoch,
        "topics": [
            {
                "topic_id": topic_id(broker),
                "partitions": [{"partition_index": 0, "acknowledgement_batches": acks(ack)}],
            }
        ],
    }
    if version >= 2:
        body["is_renew_ack"] = renew
    return await call(broker, ACK, version, body, session)


def partition_of(answer: Any) -> dict[str, Any]:
    (topic,) = answer["responses"]
    (partition,) = topic["partitions"]
    return dict(partition)


def acquired(answer: Any) -> list[tuple[int, int, int]]:
    return [
        (r["first_offset"], r["last_offset"], r["delivery_count"])
        for r in partition_of(answer)["acquired_records"]
    ]


def offsets_in(records: bytes) -> list[int]:
    """The offsets of the records of whole batches `records`."""
    found: list[int] = []
    position = 0
    while position < len(records):
        header = parse_header(records, position)
        found.extend(o for o, *_ in iter_records(records[position : position + header.size]))
        position += header.size
    return found


async def test_fetch_acquires_whole_batches_and_acks_complete(broker: Broker) -> None:
    await produce(broker, 3, 2, 4)
    await initialize(broker)
    first = await share_fetch(broker, 0, max_records=4)
    assert first["error_code"] == ErrorCode.none
    assert first["acquisition_lock_timeout"] == 30_000
    # batch_optimized: whole log batches, past MaxRecords at a batch boundary
    assert acquired(first) == [(0, 4, 1)]
    assert offsets_in(partition_of(first)["records"]) == [0, 1, 2, 3, 4]
    # another member gets what is left
    other = await share_fetch(broker, 0, member="m2")
    assert acquired(other) == [(5, 8, 1)]
    # piggy-backed acks: accept 0-2, release 3-4 (available again, count kept)
    second = await share_fetch(broker, 1, ack=[(0, 4, [1, 1, 1, 2, 2])])
    assert partition_of(second)["acknowledge_error_code"] == ErrorCode.none
    assert acquired(second) == [(3, 4, 2)]
    # the records the answer carries are whole batches, here only the one holding 3-4
    assert offsets_in(partition_of(second)["records"]) == [3, 4]
    share = broker.share_leader.cached(("g", topic_id(broker), 0))
    assert share is not None and share.start_offset == 3
    # the durable state: the start offset moved, nothing acquired written
    state = await broker.share_leader.persister.read("g", topic_id(broker), 0, 0)
    assert state.start_offset == 3


async def test_acknowledge_errors_per_partition(broker: Broker) -> None:
    await produce(broker, 2)
    await initialize(broker)
    await share_fetch(broker, 0)
    # not acquired by this member: INVALID_RECORD_STATE, nothing applied
    other = await share_fetch(broker, 0, member="m2")
    answer = await share_ack(broker, 1, [(0, 1, [ACCEPT])], member="m2")
    assert partition_of(answer)["error_code"] == ErrorCode.invalid_record_state
    assert acquired(other) == []
    # past the last fetched offset: INVALID_REQUEST
    answer = await share_ack(broker, 1, [(0, 5, [ACCEPT])])
    assert partition_of(answer)["error_code"] == ErrorCode.invalid_request
    # out of order batches, a wrong type count, a bad type, RENEW without IsRenewAck
    cases: list[tuple[list[tuple[int, int, list[int]]], int]] = [
        ([(1, 1, [ACCEPT]), (0, 0, [ACCEPT])], 2),
        ([(0, 1, [ACCEPT, ACCEPT, ACCEPT])], 2),
        ([(0, 1, [RENEW])], 1),
        ([(0, 1, [5])], 2),
        ([(0, 1, [RENEW])], 2),
        ([(1, 0, [ACCEPT])], 2),
        ([(0, 1, [])], 2),
    ]
    for bad, version in cases:
        epoch = broker.share_leader.sessions.get("g", "m1").epoch  # type: ignore[union-attr]
        answer = await share_ack(broker, epoch, bad, version=version)
        assert partition_of(answer)["error_code"] == ErrorCode.invalid_request, bad
    epoch = broker.share_leader.sessions.get("g", "m1").epoch  # type: ignore[union-attr]
    answer = await share_ack(broker, epoch, [(0, 1, [ACCEPT])])
    assert partition_of(answer)["error_code"] == ErrorCode.none
    # already done (below the start offset): ignored, success
    answer = await share_ack(broker, epoch + 1, [(0, 1, [ACCEPT])])
    assert partition_of(answer)["error_code"] == ErrorCode.none


async def test_session_epochs(broker: Broker) -> None:
    await produce(broker, 1)
    await initialize(broker)
    # acknowledge cannot open a session; no session: SHARE_SESSION_NOT_FOUND
    assert (await share_ack(broker, 0, []))["error_code"] == ErrorCode.invalid_share_session_epoch
    assert (await share_ack(broker, 1, []))["error_code"] == ErrorCode.share_session_not_found
    assert (await share_fetch(broker, 1))["error_code"] == ErrorCode.share_session_not_found
    assert (await share_fetch(broker, -1))["error_code"] == ErrorCode.share_session_not_found
    # epoch 0 with acknowledgements: INVALID_REQUEST
    answer = await share_fetch(broker, 0, ack=[(0, 0, [ACCEPT])])
    assert answer["error_code"] == ErrorCode.invalid_request
    assert answer["responses"] == [] and answer["acquisition_lock_timeout"] == 0
    opened = await share_fetch(broker, 0)
    assert acquired(opened) == [(0, 0, 1)]
    assert (await share_fetch(broker, 2))["error_code"] == ErrorCode.invalid_share_session_epoch
    # incremental: an idle partition is left out
    idle = await share_fetch(broker, 1, listed=False)
    assert idle["error_code"] == ErrorCode.none and idle["responses"] == []
    # ShareAcknowledge takes its epoch from the same sequence
    assert (await share_ack(broker, 2, [(0, 0, [ACCEPT])]))["error_code"] == ErrorCode.none
    assert (await share_fetch(broker, 2))["error_code"] == ErrorCode.invalid_share_session_epoch
    assert (await share_fetch(broker, 3, listed=False))["error_code"] == ErrorCode.none
    # the limit (2 sessions): a third member is refused, a member re-opening is not
    assert (await share_fetch(broker, 0, member="m2"))["error_code"] == ErrorCode.none
    limited = await share_fetch(broker, 0, member="m3")
    assert limited["error_code"] == ErrorCode.share_session_limit_reached
    assert (await share_fetch(broker, 0, member="m2"))["error_code"] == ErrorCode.none


async def test_top_level_checks(broker: Broker) -> None:
    await initialize(broker)
    answer = await share_fetch(broker, 0, member="")
    assert answer["error_code"] == ErrorCode.invalid_request
    answer = await share_fetch(broker, 0, member="x" * 37)
    assert answer["error_code"] == ErrorCode.invalid_request
    answer = await share_fetch(broker, 0, extra={"group_id": None})
    assert answer["error_code"] == ErrorCode.invalid_request
    answer = await share_fetch(broker, 0, session=ALICE)
    assert answer["error_code"] == ErrorCode.group_authorization_failed
    # renewing with fetch limits set
    answer = await share_fetch(broker, 0, extra={"is_renew_ack": True})
    assert answer["error_code"] == ErrorCode.invalid_request


async def test_release_on_final_epoch_and_connection_close(broker: Broker) -> None:
    await produce(broker, 2)
    await initialize(broker)
    assert acquired(await share_fetch(broker, 0, connection=7)) == [(0, 1, 1)]
    assert acquired(await share_fetch(broker, 0, member="m2")) == []
    # the connection closed: the records come back, their delivery counted (as Kafka 4.4)
    broker.share_leader.connection_closed(7)
    assert acquired(await share_fetch(broker, 1, member="m2")) == [(0, 1, 2)]
    # epoch -1: the piggy-backed acks applied (0 accepted), 1 released, the session gone
    final = await share_fetch(broker, -1, member="m2", ack=[(0, 0, [ACCEPT])])
    assert partition_of(final)["acknowledge_error_code"] == ErrorCode.none
    assert broker.share_leader.sessions.get("g", "m2") is None
    assert acquired(await share_fetch(broker, 0, member="m3")) == [(1, 1, 3)]


async def test_renew_keeps_the_lock(broker: Broker) -> None:
    await produce(broker, 1)
    await initialize(broker)
    await share_fetch(broker, 0)
    share = broker.share_leader.cached(("g", topic_id(broker), 0))
    assert share is not None
    before = share.state_of(0).deadline_ms  # type: ignore[union-attr]
    answer = await share_fetch(
        broker,
        1,
        ack=[(0, 0, [RENEW])],
        extra={"is_renew_ack": True, "max_bytes": 0, "min_bytes": 0, "max_records": 0},
    )
    assert partition_of(answer)["acknowledge_error_code"] == ErrorCode.none
    assert partition_of(answer)["acquired_records"] == []
    assert share.state_of(0).deadline_ms >= before  # type: ignore[union-attr]
    assert share.state_of(0).member == "m1"  # type: ignore[union-attr]


async def test_uninitialized_and_unknown_partitions(broker: Broker) -> None:
    answer = await share_fetch(broker, 0)  # never initialized: the read is refused
    assert partition_of(answer)["error_code"] == ErrorCode.unknown_server_error
    answer = await share_fetch(
        broker,
        0,
        member="m2",
        listed=False,
        extra={
            "topics": [
                {
                    "topic_id": uuid.uuid4(),
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": []}],
                }
            ]
        },
    )
    assert partition_of(answer)["error_code"] == ErrorCode.unknown_topic_id


async def test_auto_offset_reset_latest_then_kept(broker: Broker) -> None:
    await produce(broker, 2)
    await initialize(broker, start=-1)  # latest (the default): what was there is skipped
    assert acquired(await share_fetch(broker, 0)) == []
    await produce(broker, 1)
    assert acquired(await share_fetch(broker, 1)) == [(2, 2, 1)]
    state = await broker.share_leader.persister.read("g", topic_id(broker), 0, 0)
    assert state.start_offset == 2  # resolved once and written


async def test_restart_redelivers_unacknowledged_and_keeps_acks(engine: MemoryEngine) -> None:
    broker = await started(engine, SETTINGS)
    await broker.admin.create("t", 1, 1, {})
    await produce(broker, 1, 1, 1)
    await initialize(broker)
    assert acquired(await share_fetch(broker, 0)) == [(0, 2, 1)]
    await share_ack(broker, 1, [(1, 1, [ACCEPT])])
    await broker.share_leader.settle()
    await broker.stop()
    broker = await started(engine, SETTINGS)
    try:
        # 1 stays acknowledged; 0 and 2 were only acquired: AVAILABLE again, count not kept
        assert acquired(await share_fetch(broker, 0)) == [(0, 0, 1), (2, 2, 1)]
    finally:
        await broker.stop()


async def test_long_poll_wakes_on_new_data(broker: Broker) -> None:
    await initialize(broker)
    await share_fetch(broker, 0)  # opens the session and loads the share partition
    waiting = asyncio.create_task(share_fetch(broker, 1, listed=False, max_wait=30_000))
    await asyncio.sleep(0)
    assert not waiting.done()
    await produce(broker, 2)
    assert acquired(await asyncio.wait_for(waiting, 30)) == [(0, 1, 1)]


async def test_long_poll_wakes_on_release(broker: Broker) -> None:
    await produce(broker, 1)
    await initialize(broker)
    assert acquired(await share_fetch(broker, 0, connection=3)) == [(0, 0, 1)]
    await share_fetch(broker, 0, member="m2")
    waiting = asyncio.create_task(
        share_fetch(broker, 1, member="m2", listed=False, max_wait=30_000)
    )
    await asyncio.sleep(0)
    assert not waiting.done()
    broker.share_leader.connection_closed(3)
    assert acquired(await asyncio.wait_for(waiting, 30)) == [(0, 0, 2)]


async def test_read_committed_archives_aborted_records(broker: Broker) -> None:
    await broker.group_configs.alter("g", changes=[("share.isolation.level", 0, "read_committed")])
    partition = broker.topics.get("t", 0)
    assert partition is not None
    aborted = build_batch(
        [(None, b"a"), (None, b"b")],
        attributes=TRANSACTIONAL,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
    )
    await broker.writer.write(partition, aborted)
    await broker.writer.write_marker(partition, 7, 0, False, 0, 0, False)
    await produce(broker, 1)
    await initialize(broker)
    answer = await share_fetch(broker, 0)
    # 0-1 aborted: archived, never handed out; the marker (2) stays in the range (a GAP for
    # the client), and the record after it
    assert acquired(answer) == [(2, 3, 1)]
    share = broker.share_leader.cached(("g", topic_id(broker), 0))
    assert share is not None and share.start_offset == 2


async def test_session_epoch_moved_while_waiting(broker: Broker) -> None:
    await initialize(broker)
    await share_fetch(broker, 0)
    waiting = asyncio.create_task(share_fetch(broker, 1, listed=False, max_wait=30_000))
    await asyncio.sleep(0)
    # another request of the session takes the next epoch meanwhile
    assert (await share_ack(broker, 2, []))["error_code"] == ErrorCode.none
    await produce(broker, 1)
    answer = await asyncio.wait_for(waiting, 30)
    assert answer["error_code"] == ErrorCode.invalid_share_session_epoch
    assert answer["responses"] == []


async def test_topic_read_is_checked_per_partition(broker: Broker) -> None:
    await produce(broker, 1)
    await initialize(broker)
    grant(broker, [(ResourceType.GROUP, "g", Operation.READ)])
    answer = await share_fetch(broker, 0, session=ALICE)
    assert answer["error_code"] == ErrorCode.none
    assert partition_of(answer)["error_code"] == ErrorCode.topic_authorization_failed
    assert acquired(answer) == []
    answer = await share_ack(broker, 1, [(0, 0, [ACCEPT])], session=ALICE)
    assert partition_of(answer)["error_code"] == ErrorCode.topic_authorization_failed


async def test_a_reset_through_this_brokers_persister_is_read_at_once(broker: Broker) -> None:
    await produce(broker, 3)
    await initialize(broker)
    assert acquired(await share_fetch(broker, 0)) == [(0, 2, 1)]
    # this broker's group coordinator resets it (AlterShareGroupOffsets to 2): the leader
    # forgets what it had loaded and the next fetch starts from the new state
    again = await broker.share_persister.initialize("g", topic_id(broker), 0, 2, 2)
    assert again.error == ErrorCode.none and not broker.share_leader.partitions
    assert acquired(await share_fetch(broker, 1, listed=False)) == [(2, 2, 1)]


async def test_incremental_answers_a_cleared_error_once(broker: Broker) -> None:
    opened = await share_fetch(broker, 0)  # not initialized yet: an error
    assert partition_of(opened)["error_code"] == ErrorCode.unknown_server_error
    await initialize(broker)
    cleared = await share_fetch(broker, 1, listed=False)
    assert partition_of(cleared)["error_code"] == ErrorCode.none  # the client learns it
    assert (await share_fetch(broker, 2, listed=False))["responses"] == []


async def test_incremental_answers_a_new_partition_once(broker: Broker) -> None:
    await initialize(broker)
    assert (await share_fetch(broker, 0, listed=False))["responses"] == []
    added = await share_fetch(broker, 1)  # listed: joins the session
    assert partition_of(added)["partition_index"] == 0
    assert (await share_fetch(broker, 2, listed=False))["responses"] == []


async def test_a_newer_state_epoch_fences_the_leader(broker: Broker) -> None:
    await produce(broker, 2)
    await initialize(broker)
    assert acquired(await share_fetch(broker, 0)) == [(0, 1, 1)]
    # a group coordinator elsewhere initializes again (AlterShareGroupOffsets): state epoch 2
    # at the share coordinator, which this leader learns from its next write
    again = await broker.shares.initialize("g", topic_id(broker), 0, 2, 1)
    assert again.error == ErrorCode.none
    answer = await share_ack(broker, 1, [(0, 1, [ACCEPT])])
    assert partition_of(answer)["error_code"] == ErrorCode.not_leader_or_follower
    # dropped: the next fetch reads the new state (start offset 1)
    assert acquired(await share_fetch(broker, 2, listed=False)) == [(1, 1, 1)]


async def test_storage_offline_is_a_partition_error(engine: MemoryEngine, broker: Broker) -> None:
    await produce(broker, 1)
    await initialize(broker)
    await share_fetch(broker, 0, max_records=0)  # loads the share partition
    engine.go_offline(StorageError(5, "Input/output error"))
    answer = await share_fetch(broker, 1)
    assert answer["error_code"] == ErrorCode.none
    assert partition_of(answer)["error_code"] == ErrorCode.kafka_storage_error


async def test_not_leader_names_the_leader(broker: Broker) -> None:
    await produce(broker, 1)
    await initialize(broker)
    partition = broker.topics.get("t", 0)
    assert partition is not None
    state = broker.membership.partition("t", 0)
    assert state is not None
    partition.is_leader = False  # as a follower: the metadata names the leader
    try:
        answer = await share_fetch(broker, 0)
    finally:
        partition.is_leader = True
    entry = partition_of(answer)
    assert entry["error_code"] == ErrorCode.not_leader_or_follower
    assert entry["current_leader"] == {
        "leader_id": state.leader,
        "leader_epoch": state.leader_epoch,
    }
    (endpoint,) = answer["node_endpoints"]
    assert endpoint["node_id"] == state.leader and endpoint["port"] > 0


async def test_a_member_alternating_fetch_and_acknowledge_is_served_every_partition(
    broker: Broker,
) -> None:
    """ShareAcknowledge moves the session epoch too: a consumer that fetches, then
    acknowledges, then fetches sees only every other epoch. Where a fetch starts among its
    partitions must move at each fetch regardless, or a partition that always has
    max_records available would keep the others from ever being served."""
    await broker.admin.create("two", 2, 1, {})
    tid = topic_id(broker, "two")
    for index in (0, 1):
        partition = broker.topics.get("two", index)
        assert partition is not None
        await broker.writer.write(partition, build_batch([(None, b"x")] * 40))
        result = await broker.share_leader.persister.initialize("g", tid, index, 1, 0)
        assert result.error == ErrorCode.none
    served: set[int] = set()
    epoch = 0
    for _fetch in range(2):
        body = {
            "group_id": "g", "member_id": "m1", "share_session_epoch": epoch, "max_wait": 0,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 5, "batch_size": 5,
            "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": i, "acknowledgement_batches": []} for i in (0, 1)]}]
            if epoch == 0 else [],
            "forgotten_topics_data": [],
        }  # fmt: skip
        answer = await call(broker, FETCH, 2, body)
        epoch += 1
        got: dict[int, tuple[int, int]] = {}
        for topic in answer["responses"]:
            for part in topic["partitions"]:
                for r in part["acquired_records"]:
                    served.add(part["partition_index"])
                    got[part["partition_index"]] = (r["first_offset"], r["last_offset"])
        # every record acquired goes back (RELEASE) in a ShareAcknowledge of its own
        ack_body = {
            "group_id": "g", "member_id": "m1", "share_session_epoch": epoch, "is_renew_ack": False,
            "topics": [{"topic_id": tid, "partitions": [
                {"partition_index": i, "acknowledgement_batches": acks([(f, last, [RELEASE])])}
                for i, (f, last) in got.items()]}],
        }  # fmt: skip
        ack_answer = await call(broker, ACK, 2, ack_body)
        assert ack_answer["error_code"] == ErrorCode.none
        epoch += 1
    assert served == {0, 1}  # the second fetch starts at the other partition


async def test_share_fetch_bytes_count_as_the_topics_bytes_out(engine: MemoryEngine) -> None:
    async with running(engine, {**SETTINGS, "lockgate.metrics.port": "0"}) as broker:
        await broker.admin.create("t", 1, 1, {})
        await produce(broker, 3)
        await initialize(broker)
        answer = await share_fetch(broker, 0)
        size = len(partition_of(answer)["records"])
        assert size > 0 and broker.metrics.topic_out == {"t": size}
