"""The cluster broker's own uses of the metadata store, against an in-memory one: topic
changes (placement, the request's assignments checked, a store that does not answer),
producer id blocks, and the membership clients are shown."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from lockgate.cluster.membership import ClusterMembership
from lockgate.cluster.metadata import (
    NO_LEADER,
    BrokerRegistration,
    MetadataView,
    PartitionState,
    TopicRecord,
    Versioned,
)
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.txn.producer_ids import BLOCK_SIZE, ClusterProducerIds
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.admin import ClusterTopicAdmin
from lockgate.topics.directory import TopicManager


class Store:
    def __init__(self, brokers: int = 3) -> None:
        self.view = MetadataView()
        self.view.brokers = {
            n: BrokerRegistration(n, "127.0.0.1", 9092 + n) for n in range(brokers)
        }
        self.is_live = True
        self.counter = 0
        self.fail: Exception | None = None
        self.created: dict[str, dict[int, PartitionState]] = {}

    @property
    def live(self) -> bool:
        return self.is_live

    async def create_topic(self, record: TopicRecord, states: dict[int, PartitionState]) -> bool:
        if self.fail is not None:
            raise self.fail
        if record.name in self.view.topics:
            return False
        self.view.topics[record.name] = Versioned(record, 1)
        self.created[record.name] = states
        return True

    async def allocate_producer_ids(self, size: int) -> int:
        start, self.counter = self.counter, self.counter + size
        return start


def admin(store: Store) -> ClusterTopicAdmin:
    topics = TopicManager(MemoryEngine(), None, BrokerConfig({}), lambda: 0)  # type: ignore[arg-type]
    return ClusterTopicAdmin(topics, store)  # type: ignore[arg-type]


async def test_replicas_are_placed_round_robin_over_the_registered_brokers() -> None:
    store = Store()
    record = await admin(store).create("orders", 6, 3, {})
    states = store.created["orders"]
    assert record.partitions == 6 and len(states) == 6
    assert {s.replicas[0] for s in states.values()} == {0, 1, 2}  # leaders spread
    for state in states.values():
        assert sorted(state.replicas) == [0, 1, 2] and state.isr == state.replicas
        assert state.leader == state.replicas[0] and state.leader_epoch == 0


@pytest.mark.parametrize(
    ("assignments", "factor", "code"),
    [
        (None, 4, ErrorCode.invalid_replication_factor),
        ({0: (0, 7)}, -1, ErrorCode.invalid_replica_assignment),  # not registered
        ({0: (1, 1)}, -1, ErrorCode.invalid_replica_assignment),  # twice
        ({0: (0, 1), 1: (2,)}, -1, ErrorCode.invalid_replica_assignment),  # uneven
    ],
)
async def test_impossible_placements_are_refused(
    assignments: Any, factor: int, code: ErrorCode
) -> None:
    store = Store()
    with pytest.raises(KafkaProtocolError) as refused:
        await admin(store).create("t", -1, factor, {}, assignments=assignments)
    assert refused.value.code == code and not store.created


async def test_named_assignments_are_kept_and_validate_only_writes_nothing() -> None:
    store = Store()
    cluster_admin = admin(store)
    await cluster_admin.create("t", -1, -1, {}, validate_only=True, assignments={0: (2, 0)})
    assert not store.created
    await cluster_admin.create("t", -1, -1, {}, assignments={0: (2, 0), 1: (0, 1)})
    assert [s.replicas for s in store.created["t"].values()] == [(2, 0), (0, 1)]


async def test_a_store_that_does_not_answer_is_request_timed_out() -> None:
    store = Store()
    store.fail = TimeoutError()
    with pytest.raises(KafkaProtocolError) as timed_out:
        await admin(store).create("t", 1, 1, {})
    assert timed_out.value.code == ErrorCode.request_timed_out


async def test_producer_ids_come_in_blocks_no_two_brokers_share() -> None:
    store = Store()
    first, second = ClusterProducerIds(store), ClusterProducerIds(store)  # type: ignore[arg-type]
    with pytest.raises(KafkaProtocolError) as waiting:
        first.allocate()  # no block yet: clients retry
    assert waiting.value.code == ErrorCode.coordinator_load_in_progress
    second.start()
    await asyncio.sleep(0)
    ids = [first.allocate() for _ in range(BLOCK_SIZE)] + [second.allocate()]
    assert len(set(ids)) == len(ids)
    await asyncio.sleep(0)  # the next block was fetched at 90% of the first
    assert first.allocate() == 2 * BLOCK_SIZE


def test_a_broker_whose_lease_lapsed_does_not_name_itself_leader() -> None:
    store = Store()
    record = TopicRecord("t", uuid.uuid4(), 1)
    store.view.topics["t"] = Versioned(record, 1)
    store.view.partitions[("t", 0)] = Versioned(PartitionState((1, 2), 1, 5, (1, 2)), 2)
    membership = ClusterMembership(store, 1)  # type: ignore[arg-type]
    state = membership.partition("t", 0)
    assert state is not None and state.leader == 1
    store.is_live = False
    state = membership.partition("t", 0)
    assert state is not None and state.leader == NO_LEADER and state.leader_epoch == 5
    assert ClusterMembership(store, 2).partition("t", 0).leader == 1  # type: ignore[arg-type,union-attr]
    assert [b.node_id for b in membership.brokers()] == [0, 1, 2]
