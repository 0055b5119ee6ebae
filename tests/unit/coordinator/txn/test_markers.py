"""The coordinator's marker sender against two cluster brokers in this process (real sockets,
a shared in-memory metadata store): one WriteTxnMarkers per other leader over one kept
connection, the sender's own broker's partitions written in-process,
transaction version 2 passed on, a leader that moved between rounds, a broker unreachable at
first, a deleted topic, and the answers that end the retries (fenced, stale epoch, a version
the leader lacks)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator

import pytest

from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import UnsupportedVersionError
from lockgate.cluster.metadata import NO_LEADER, PartitionState
from lockgate.coordinator.txn.markers import MarkerSender
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    TRANSACTIONAL_BIT,
    build_batch,
    control_record,
    validate_produced_batch,
)
from lockgate.server.broker import Broker
from tests.support.memory_cluster import MemoryClusterBroker, MemoryStore, memory_cluster
from tests.unit.coordinator.group.support import wait_until

PID = 4242
LOGGER = "lockgate.coordinator.txn.markers"

Cluster = tuple[MemoryStore, list[MemoryClusterBroker], MarkerSender]


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """Brokers 0 and 1; topic "a" with a-0 led by 0 and a-1 led by 1, no followers. The
    sender is broker 0's."""
    async with memory_cluster(2) as (store, brokers):
        store.put_topic("a", 2)
        store.put("a", 0, PartitionState((0,), 0, 1, (0,)))
        store.put("a", 1, PartitionState((1,), 1, 1, (1,)))
        await wait_until(
            lambda: leads(brokers[0].broker, "a", 0) and leads(brokers[1].broker, "a", 1)
        )
        broker = brokers[0].broker
        sender = MarkerSender(
            0, broker.membership, broker.topics, broker.writer, broker.inter_broker_security
        )
        try:
            yield store, brokers, sender
        finally:
            await sender.close()


def leads(broker: Broker, topic: str, index: int) -> bool:
    partition = broker.topics.get(topic, index)
    return partition is not None and partition.is_leader


def log_of(member: MemoryClusterBroker, topic: str, index: int) -> Partition:
    partition = member.broker.topics.get(topic, index)
    assert partition is not None
    return partition


def markers(partition: Partition) -> list[tuple[int, int, int]]:
    """(producer id, COMMIT/ABORT, coordinator epoch) of each marker in the log."""
    found = []
    for segment, position, header in partition.batches_from(0):
        if header.is_control:
            kind, epoch = control_record(segment.log.read(position, header.size))
            found.append((header.producer_id, kind, epoch))
    return found


def open_transaction(partition: Partition, epoch: int) -> None:
    batch = build_batch(
        [(None, b"v")],
        attributes=TRANSACTIONAL_BIT,
        producer_id=PID,
        producer_epoch=epoch,
        base_sequence=0,
    )
    partition.append(bytearray(batch), validate_produced_batch(batch), 1_000)


def lines(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records if r.name == LOGGER)


async def test_markers_reach_the_other_leader_over_one_connection_and_this_one_in_process(
    cluster: Cluster,
) -> None:
    _store, brokers, sender = cluster
    both = [("a", 0), ("a", 1)]
    assert await sender.write(PID, 0, True, 3, False, both) == {}
    assert markers(log_of(brokers[0], "a", 0)) == [(PID, CONTROL_COMMIT, 3)]
    assert markers(log_of(brokers[1], "a", 1)) == [(PID, CONTROL_COMMIT, 3)]
    # two transactions completing at once share the kept connections
    answers = await asyncio.gather(
        sender.write(PID, 0, False, 3, False, both),
        sender.write(PID + 1, 0, True, 3, False, [("a", 1)]),
    )
    assert list(answers) == [{}, {}]
    assert markers(log_of(brokers[1], "a", 1))[1:] == [
        (PID, CONTROL_ABORT, 3),
        (PID + 1, CONTROL_COMMIT, 3),
    ]
    # a-0 is led by the sender's own broker: written in-process, with no connection to itself
    assert [member.connection_count for member in brokers] == [0, 1]


async def test_transaction_version_2_reaches_the_leader(cluster: Cluster) -> None:
    _store, brokers, sender = cluster
    partition = log_of(brokers[1], "a", 1)
    open_transaction(partition, epoch=4)
    # only transaction version 2 refuses a marker in the epoch of the transaction's data
    refused = await sender.write(PID, 4, True, 3, True, [("a", 1)])
    assert refused == {("a", 1): ErrorCode.invalid_producer_epoch}
    assert partition.open_txns == {PID: 0}
    assert await sender.write(PID, 5, True, 3, True, [("a", 1)]) == {}
    assert partition.open_txns == {}


async def test_a_fenced_marker_is_a_final_error_and_the_others_are_written(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    _store, brokers, sender = cluster
    log_of(brokers[1], "a", 1).write_marker(PID, 0, True, 5, 1_000, strict_epoch=False)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        refused = await sender.write(PID, 0, False, 3, False, [("a", 0), ("a", 1)])
    assert refused == {("a", 1): ErrorCode.transaction_coordinator_fenced}
    assert markers(log_of(brokers[0], "a", 0)) == [(PID, CONTROL_ABORT, 3)]
    assert markers(log_of(brokers[1], "a", 1)) == [(PID, CONTROL_COMMIT, 5)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "TRANSACTION_COORDINATOR_FENCED" in warnings[0].getMessage()
    assert f"producer {PID} epoch 0" in warnings[0].getMessage()


async def test_a_leader_that_moved_between_rounds_gets_the_marker(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store, brokers, sender = cluster
    store.put_topic("m", 1)
    store.put("m", 0, PartitionState((0, 1), 1, 2, (1,)))  # broker 0 follows broker 1
    await wait_until(
        lambda: (
            leads(brokers[1].broker, "m", 0) and brokers[0].broker.topics.get("m", 0) is not None
        )
    )
    membership = brokers[0].broker.membership
    current = membership.partition
    stale = [PartitionState((0, 1), 0, 1, (0, 1))]  # what the sender's view said a moment ago

    def lagging_view(topic: str, index: int) -> PartitionState | None:
        return stale.pop() if stale and (topic, index) == ("m", 0) else current(topic, index)

    monkeypatch.setattr(membership, "partition", lagging_view)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert await sender.write(PID, 0, True, 3, False, [("m", 0)]) == {}
    assert not stale
    assert lines(caplog, "NOT_LEADER_OR_FOLLOWER") == 1  # broker 0's answer, then broker 1's
    leader_log = log_of(brokers[1], "m", 0)
    assert markers(leader_log) == [(PID, CONTROL_COMMIT, 3)]
    assert leader_log.high_watermark == leader_log.log_end_offset == 1


async def test_a_broker_unreachable_at_first_gets_the_marker_at_its_new_address(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    _store, brokers, sender = cluster
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    brokers[1].register(dead_port)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        writing = asyncio.create_task(sender.write(PID, 0, True, 3, False, [("a", 1)]))
        await wait_until(lambda: lines(caplog, "cannot reach broker 1") == 1)
        await asyncio.sleep(0.3)  # a few rounds: still one line
        assert not writing.done() and lines(caplog, "cannot reach broker 1") == 1
        brokers[1].register(brokers[1].broker.port)
        assert await asyncio.wait_for(writing, 5) == {}
    assert markers(log_of(brokers[1], "a", 1)) == [(PID, CONTROL_COMMIT, 3)]


async def test_a_deleted_topic_is_dropped(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    store, brokers, sender = cluster
    store.put_topic("gone", 1)
    store.put("gone", 0, PartitionState((1,), NO_LEADER, 3, (1,)))  # offline
    await wait_until(lambda: "gone" in brokers[0].broker.topics.topics)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        writing = asyncio.create_task(sender.write(PID, 0, True, 3, False, [("gone", 0), ("a", 0)]))
        await wait_until(lambda: bool(markers(log_of(brokers[0], "a", 0))))
        await asyncio.sleep(0.3)
        assert not writing.done()  # waiting for a leader of gone-0
        store.delete_topic("gone")
        assert await asyncio.wait_for(writing, 5) == {}
    assert lines(caplog, "has no leader") == 1
    assert lines(caplog, "topic gone was deleted") == 1


async def test_the_retries_end_when_the_caller_cancels(cluster: Cluster) -> None:
    store, _brokers, sender = cluster
    store.put("a", 1, PartitionState((1,), NO_LEADER, 2, (1,)))
    writing = asyncio.create_task(sender.write(PID, 0, True, 3, False, [("a", 1)]))
    await asyncio.sleep(0.3)
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing


async def test_a_leader_without_the_marker_version_refuses_for_good(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store, _brokers, sender = cluster

    def unsupported(_connection: BrokerConnection, _api_key: int, **_limits: int) -> int:
        raise UnsupportedVersionError("WriteTxnMarkers v1-1 is not supported by the broker")

    monkeypatch.setattr(BrokerConnection, "version_for", unsupported)
    refused = await asyncio.wait_for(sender.write(PID, 0, True, 3, False, [("a", 1)]), 10)
    assert refused == {("a", 1): ErrorCode.unsupported_version}
