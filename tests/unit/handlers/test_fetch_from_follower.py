"""Fetch from follower (KIP-392) on three cluster brokers in this process (racks a, b, c; real
sockets, a shared in-memory metadata store, real replication), with raw Fetch requests: the
leader sends a v11+ consumer of another rack to the in-sync replica there (preferred read
replica, no records, no long poll); a follower serves a v11+ consumer what the leader serves
(read_committed included: its own last stable offset and aborted transactions), up to its own
high watermark, with Kafka's errors for epochs, offsets past its log end, a partition it holds
no replica of, older consumers and other followers; fetch sessions carry the preferred replica
and work on the follower."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.cluster.metadata import PartitionState
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import (
    TRANSACTIONAL_BIT,
    build_batch,
    parse_header,
    validate_produced_batch,
)
from lockgate.replication.selector import RACK_AWARE_REPLICA_SELECTOR
from tests.support.memory_cluster import (
    MemoryClusterBroker,
    MemoryStore,
    connected,
    memory_cluster,
)
from tests.unit.coordinator.group.support import wait_until

TOPIC = "racked"
ELSEWHERE = "on-two"  # replicas on brokers 0 and 1 only
SETTINGS = {
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "50",
    "replica.selector.class": RACK_AWARE_REPLICA_SELECTOR,
}
RACKS = {node: {"broker.rack": rack} for node, rack in enumerate("abc")}
READ_COMMITTED = 1
COMMITTED, ABORTED, OPEN = 7, 8, 9  # producer ids
Cluster = tuple[MemoryStore, list[MemoryClusterBroker]]


def log_of(member: MemoryClusterBroker, topic: str = TOPIC) -> Partition:
    partition = member.broker.topics.get(topic, 0)
    assert partition is not None
    return partition


def append(leader: Partition, value: bytes, producer_id: int = -1) -> None:
    if producer_id < 0:
        batch = build_batch([(None, value)])
    else:
        batch = build_batch([(None, value)], attributes=TRANSACTIONAL_BIT,
                            producer_id=producer_id, producer_epoch=0,
                            base_sequence=0)  # fmt: skip
    leader.append(bytearray(batch), validate_produced_batch(batch), 1_000)


def fill(leader: Partition) -> None:
    """Offsets 0-1 plain, 2 committed (marker 3), 4 aborted (marker 5), 6 plain, 7 open
    (the last stable offset), 8 plain."""
    append(leader, b"plain-0")
    append(leader, b"plain-1")
    append(leader, b"committed", COMMITTED)
    leader.write_marker(COMMITTED, 0, True, 0, 1_000, strict_epoch=False)
    append(leader, b"aborted", ABORTED)
    leader.write_marker(ABORTED, 0, False, 0, 1_000, strict_epoch=False)
    append(leader, b"plain-6")
    append(leader, b"open", OPEN)
    append(leader, b"plain-8")
    leader.flushed_to(leader.log_end_offset)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """Broker 0 (rack a) leads racked-0 in epoch 1, brokers 1 (b) and 2 (c) follow, all in
    sync at offset 9 with the records of fill(); on-two-0 is on brokers 0 and 1 only."""
    async with memory_cluster(3, SETTINGS, RACKS) as (store, brokers):
        store.put_topic(TOPIC, 1)
        store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 1, (0, 1, 2)))
        store.put_topic(ELSEWHERE, 1)
        store.put(ELSEWHERE, 0, PartitionState((0, 1), 0, 1, (0, 1)))
        await wait_until(lambda: all(m.broker.topics.get(TOPIC, 0) for m in brokers))
        fill(log_of(brokers[0]))
        await wait_until(lambda: all(log_of(m).high_watermark == 9 for m in brokers), 20)
        yield store, brokers


def request(
    offset: int = 0,
    rack: str = "",
    isolation: int = 0,
    epoch: int = -1,
    topic: str = TOPIC,
    index: int = 0,
    replica_id: int = -1,
    max_wait: int = 0,
    min_bytes: int = 0,
    session: tuple[int, int] = (0, -1),
    forgotten: tuple[str, ...] = (),
    topic_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    partitions = [] if offset < -1 else [
        {"partition": index, "current_leader_epoch": epoch, "fetch_offset": offset,
         "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
    ]  # fmt: skip
    return {"replica_id": replica_id, "max_wait": max_wait, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": isolation, "session_id": session[0],
            "session_epoch": session[1],
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": partitions}]
            if partitions else [],
            "forgotten_topics_data": [{"topic": t, "partitions": [0]} for t in forgotten],
            "rack_id": rack}  # fmt: skip


async def fetch(member: MemoryClusterBroker, version: int = 12, **fields: Any) -> Any:
    """The one partition's answer, or the whole response when it names no partition. From
    v13 the topic goes by its id."""
    if version >= 13:
        fields["topic_id"] = member.broker.topics.topics[fields.get("topic", TOPIC)].topic_id
    async with connected(member) as connection:
        response = await asyncio.wait_for(
            connection.request(ApiKey.FETCH, request(**fields), version=version), 20
        )
    if not response.responses:
        return response
    (topic,) = response.responses
    (answer,) = topic.partitions
    return answer


def offsets(records: bytes | None) -> list[int]:
    """The base offsets of the batches in a partition's answer."""
    data, position, found = bytes(records or b""), 0, []
    while position < len(data):
        header = parse_header(data, position)
        found.append(header.base_offset)
        position += header.size
    return found


async def test_the_leader_sends_a_consumer_to_the_in_sync_replica_of_its_rack(
    cluster: Cluster,
) -> None:
    store, brokers = cluster
    leader = brokers[0]
    # at once, although it asks to wait a minute for a megabyte
    answer = await fetch(leader, rack="b", max_wait=60_000, min_bytes=1 << 20)
    assert answer.error_code == 0 and answer.preferred_read_replica == 1
    assert not answer.records
    assert (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset) == (9, 7, 0)
    assert (await fetch(leader, rack="c", version=16)).preferred_read_replica == 2
    for rack in ("a", "", "z"):  # the leader's rack, none, one without a replica
        answer = await fetch(leader, rack=rack)
        assert answer.preferred_read_replica == -1 and offsets(answer.records)[0] == 0, rack
    answer = await fetch(leader, version=10, rack="b")  # before v11 there is no rack
    assert offsets(answer.records)[0] == 0
    # a follower out of the ISR is not chosen. Broker 1 stops fetching, and falls behind the
    # high watermark before it leaves the ISR: a fetch of it still in flight then cannot find
    # it caught up and take it back in.
    assert brokers[1].broker.replicas is not None
    await brokers[1].broker.replicas.stop()
    append(log_of(leader), b"plain-9")
    log_of(leader).flushed_to(10)
    await wait_until(lambda: log_of(brokers[2]).log_end_offset == 10)
    store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 1, (0, 2), 1))
    await wait_until(lambda: log_of(leader).high_watermark == 10)
    answer = await fetch(leader, rack="b")
    assert answer.preferred_read_replica == -1 and offsets(answer.records)[0] == 0


@pytest.mark.parametrize("version", [11, 12, 16])
@pytest.mark.parametrize("isolation", [0, READ_COMMITTED])
async def test_a_follower_serves_a_consumer_what_the_leader_serves(
    cluster: Cluster, version: int, isolation: int
) -> None:
    _store, brokers = cluster
    fields: dict[str, Any] = {"isolation": isolation, "epoch": 1}
    by_leader = await fetch(brokers[0], version, **fields)
    for follower in brokers[1:]:
        answer = await fetch(follower, version, rack="b", **fields)
        assert answer.error_code == 0 and answer.preferred_read_replica == -1
        assert bytes(answer.records) == bytes(by_leader.records)
        assert (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset) == (
            by_leader.high_watermark,
            by_leader.last_stable_offset,
            by_leader.log_start_offset,
        )
        assert answer.aborted_transactions == by_leader.aborted_transactions
    if isolation == READ_COMMITTED:
        assert offsets(by_leader.records) == [0, 1, 2, 3, 4, 5, 6]  # up to the open one
        assert [(a.producer_id, a.first_offset) for a in by_leader.aborted_transactions] == [
            (ABORTED, 4)
        ]
    else:
        assert offsets(by_leader.records) == list(range(9))


async def test_a_follower_serves_only_consumers_of_v11_and_later(cluster: Cluster) -> None:
    _store, brokers = cluster
    follower = brokers[1]
    for version in (4, 10):
        answer = await fetch(follower, version)
        assert answer.error_code == ErrorCode.not_leader_or_follower, version
    # another follower's fetch is for the leader alone
    answer = await fetch(follower, replica_id=2)
    assert answer.error_code == ErrorCode.not_leader_or_follower
    # and ListOffsets stays the leader's
    async with connected(follower) as connection:
        listed = await connection.request(
            ApiKey.LIST_OFFSETS,
            {"replica_id": -1, "isolation_level": 0,
             "topics": [{"name": TOPIC, "partitions": [
                 {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
            version=7,
        )  # fmt: skip
    assert listed.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


@pytest.mark.parametrize(
    ("epoch", "code"),
    [(0, ErrorCode.fenced_leader_epoch), (2, ErrorCode.unknown_leader_epoch), (1, 0), (-1, 0)],
)
async def test_a_follower_checks_the_leader_epoch_it_knows(
    cluster: Cluster, epoch: int, code: int
) -> None:
    _store, brokers = cluster
    answer = await fetch(brokers[1], epoch=epoch)
    assert answer.error_code == code
    assert bool(answer.records) == (code == 0)


async def test_a_follower_serves_up_to_its_high_watermark_and_its_log_end(
    cluster: Cluster,
) -> None:
    _store, brokers = cluster
    leader, follower = log_of(brokers[0]), log_of(brokers[1])
    # broker 2 stops fetching: the leader's high watermark stays at 9 while broker 1 fetches on
    assert brokers[2].broker.replicas is not None
    await brokers[2].broker.replicas.stop()
    append(leader, b"unacknowledged-9")
    append(leader, b"unacknowledged-10")
    leader.flushed_to(leader.log_end_offset)
    await wait_until(lambda: follower.log_end_offset == 11, 20)
    assert follower.high_watermark == leader.high_watermark == 9
    for offset in (9, 10, 11):  # from its high watermark to its log end: nothing yet
        answer = await fetch(brokers[1], offset=offset)
        assert answer.error_code == 0 and not answer.records and answer.high_watermark == 9
    for offset in (12, -1):  # past its log end, before its log start
        answer = await fetch(brokers[1], offset=offset)
        assert answer.error_code == ErrorCode.offset_out_of_range, offset


async def test_a_follower_long_polls_until_its_high_watermark_moves(cluster: Cluster) -> None:
    _store, brokers = cluster
    waiting = asyncio.create_task(fetch(brokers[1], offset=9, max_wait=30_000, min_bytes=1))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    leader = log_of(brokers[0])
    append(leader, b"late")
    leader.flushed_to(leader.log_end_offset)
    answer = await waiting
    assert answer.error_code == 0 and offsets(answer.records) == [9]


async def test_a_broker_without_a_replica_answers_not_leader_or_follower(
    cluster: Cluster,
) -> None:
    _store, brokers = cluster
    for version in (4, 12):
        answer = await fetch(brokers[2], version, topic=ELSEWHERE)
        assert answer.error_code == ErrorCode.not_leader_or_follower
    answer = await fetch(brokers[2], index=5)  # no such partition anywhere
    assert answer.error_code == ErrorCode.unknown_topic_or_partition


async def test_fetch_sessions_carry_the_preferred_replica_and_work_on_the_follower(
    cluster: Cluster,
) -> None:
    _store, brokers = cluster
    leader = brokers[0]
    async with connected(leader) as connection:

        async def on_leader(**fields: Any) -> Any:
            return await connection.request(ApiKey.FETCH, request(**fields), version=12)

        opened = await on_leader(rack="b", session=(0, 0))
        assert opened.session_id > 0
        assert opened.responses[0].partitions[0].preferred_read_replica == 1
        # nothing changed, but the preference is always answered
        again = await on_leader(rack="b", offset=-2, session=(opened.session_id, 1))
        assert again.error_code == 0
        assert again.responses[0].partitions[0].preferred_read_replica == 1
        # the consumer moves the partition to broker 1: forgotten here
        moved = await on_leader(rack="b", offset=-2, session=(opened.session_id, 2),
                                forgotten=(TOPIC,))  # fmt: skip
        assert moved.error_code == 0 and not moved.responses
    async with connected(brokers[1]) as connection:

        async def on_follower(**fields: Any) -> Any:
            return await connection.request(ApiKey.FETCH, request(**fields), version=12)

        opened = await on_follower(rack="b", session=(0, 0))
        assert opened.session_id > 0
        assert offsets(opened.responses[0].partitions[0].records) == list(range(9))
        idle = await on_follower(rack="b", offset=9, session=(opened.session_id, 1))
        assert idle.error_code == 0 and not idle.responses  # nothing new: left out
        leader_log = log_of(leader)
        append(leader_log, b"more")
        leader_log.flushed_to(leader_log.log_end_offset)
        await wait_until(lambda: log_of(brokers[1]).high_watermark == 10, 20)
        grown = await on_follower(rack="b", offset=-2, session=(opened.session_id, 2))
        (entry,) = grown.responses[0].partitions
        assert offsets(entry.records) == [9] and entry.high_watermark == 10
