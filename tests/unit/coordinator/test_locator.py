"""FindCoordinator's answer (coordinator/locator.py): the broker named is the leader of the
group's __consumer_offsets partition, or of the transactional id's __transaction_state
partition (COORDINATOR_NOT_AVAILABLE while the topic does not exist, which the first lookup
creates, or while the partition has no reachable leader). A single node takes the same path
and names itself for every key, since it leads every partition. Against stand-ins for what a
cluster broker's locator is given (the topics, the membership, the topic admin, the config),
and against a single node's own pieces."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from lockgate.cluster.local import LocalMetadataStore
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
from lockgate.coordinator.locator import GROUP, TRANSACTION, CoordinatorLocator
from lockgate.coordinator.txn.log import partition_for
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.admin import LocalTopicAdmin
from lockgate.topics.directory import TopicManager
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

NODE = 7
GROUP_ID = "payments-consumers"
TXN_ID = "payments-1"


class Store:
    def __init__(self) -> None:
        self.view = MetadataView()
        self.live = True


class Admin:
    """Records the topics asked for; each creation waits for `release` (or fails with `error`)."""

    def __init__(self) -> None:
        self.created: list[tuple[str, int, int, dict[str, Any], bool]] = []
        self.release = asyncio.Event()
        self.error: KafkaProtocolError | None = None

    async def create(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
        validate_only: bool = False,
        assignments: object = None,
        internal: bool = False,
    ) -> TopicRecord:
        self.created.append((name, partitions, replication_factor, dict(configs), internal))
        if self.error is not None:
            raise self.error
        await self.release.wait()
        return TopicRecord(name, uuid.uuid4(), partitions, {}, internal)


class Topics:
    """The broker's topic records, which in a cluster mirror the view's."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def topics(self) -> dict[str, TopicRecord]:
        return {name: versioned.value for name, versioned in self.store.view.topics.items()}


class StandIn:
    """What the root hands a cluster broker's locator."""

    def __init__(self) -> None:
        self.node_id = NODE
        self.advertised = ("broker-7.example", 9097)
        self.config = BrokerConfig({
            "node.id": str(NODE),
            "offsets.topic.num.partitions": "12",
            "offsets.topic.replication.factor": "2",
            "transaction.state.log.num.partitions": "8",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
        })  # fmt: skip
        self.store = Store()
        self.topics = Topics(self.store)
        self.membership = ClusterMembership(self.store, NODE)  # type: ignore[arg-type]
        self.admin = Admin()

    def registration(self, incarnation: str | None = None) -> BrokerRegistration:
        host, port = self.advertised
        return BrokerRegistration(self.node_id, host, port, incarnation=incarnation or "")


def locator(broker: StandIn) -> CoordinatorLocator:
    return CoordinatorLocator(broker.topics, broker.membership, broker.admin, broker.config)


async def single_node() -> CoordinatorLocator:
    """A single node's locator over its own pieces, as the broker has them once started: the
    internal topics loaded (each partition led by this node) and this node registered."""
    engine = MemoryEngine()
    config = BrokerConfig({"node.id": str(NODE), "offsets.topic.num.partitions": "12"})
    store = LocalMetadataStore(engine, NODE)
    topics = TopicManager(engine, store, config, lambda: 1_000)
    topics.create(CONSUMER_OFFSETS_TOPIC, 12, 1, {}, internal=True)
    topics.create(TRANSACTION_STATE_TOPIC, 8, 1, {}, internal=True)
    await store.register(BrokerRegistration(NODE, "broker-7.example", 9097))
    return CoordinatorLocator(
        topics, ClusterMembership(store, NODE), LocalTopicAdmin(topics, NODE), config
    )


def with_offsets_topic(broker: StandIn, partitions: int = 5) -> int:
    """__consumer_offsets exists with `partitions`; returns the group's partition."""
    record = TopicRecord(CONSUMER_OFFSETS_TOPIC, uuid.uuid4(), partitions, {}, True)
    broker.store.view.topics[CONSUMER_OFFSETS_TOPIC] = Versioned(record, 1)
    return partition_for(GROUP_ID, partitions)


def led_by(broker: StandIn, index: int, leader: int) -> None:
    state = PartitionState((leader,), leader, 3, (leader,))
    broker.store.view.partitions[(CONSUMER_OFFSETS_TOPIC, index)] = Versioned(state, 2)


def register(broker: StandIn, node_id: int) -> BrokerRegistration:
    registration = BrokerRegistration(node_id, f"broker-{node_id}.example", 9090 + node_id)
    broker.store.view.brokers[node_id] = registration
    return registration


@pytest.mark.parametrize("key_type", [GROUP, TRANSACTION])
async def test_a_single_node_coordinates_every_key_itself(key_type: int) -> None:
    locate = await single_node()
    for key in ("any-key", GROUP_ID, TXN_ID, "another-key"):
        found = locate.locate(key_type, key)
        assert isinstance(found, BrokerRegistration)
        assert (found.node_id, found.host, found.port) == (NODE, "broker-7.example", 9097)


@pytest.mark.parametrize("cluster", [False, True])
async def test_an_unknown_key_type_is_an_invalid_request(cluster: bool) -> None:
    locate = locator(StandIn()) if cluster else await single_node()
    assert locate.locate(3, GROUP_ID)  # (2 is SHARE since KIP-932) == ErrorCode.invalid_request


async def test_the_first_lookup_creates_the_offsets_topic_once() -> None:
    broker = StandIn()
    locate = locator(broker)
    assert locate.locate(GROUP, GROUP_ID) == ErrorCode.coordinator_not_available
    await asyncio.sleep(0)
    assert locate.locate(GROUP, "another-group") == ErrorCode.coordinator_not_available
    await asyncio.sleep(0)
    assert broker.admin.created == [(CONSUMER_OFFSETS_TOPIC, 12, 2, {}, True)]
    broker.admin.release.set()
    await asyncio.sleep(0)  # (the creation ends)


async def test_a_failed_creation_is_asked_again_by_the_next_lookup() -> None:
    broker = StandIn()
    broker.admin.error = KafkaProtocolError(ErrorCode.invalid_replication_factor, "1 broker")
    locate = locator(broker)
    assert locate.locate(GROUP, GROUP_ID) == ErrorCode.coordinator_not_available
    await asyncio.sleep(0)
    assert locate.locate(GROUP, GROUP_ID) == ErrorCode.coordinator_not_available
    await asyncio.sleep(0)
    assert len(broker.admin.created) == 2


async def test_the_group_partitions_leader_is_the_coordinator() -> None:
    broker = StandIn()
    index = with_offsets_topic(broker)  # (5 partitions, not the configured 12)
    leader = register(broker, 2)
    register(broker, 3)
    led_by(broker, index, 2)
    assert locator(broker).locate(GROUP, GROUP_ID) == leader
    assert broker.admin.created == []


async def test_a_partition_without_a_leader_is_coordinator_not_available() -> None:
    broker = StandIn()
    index = with_offsets_topic(broker)
    register(broker, 2)
    led_by(broker, index, NO_LEADER)
    assert locator(broker).locate(GROUP, GROUP_ID) == ErrorCode.coordinator_not_available


async def test_a_partition_not_yet_placed_is_coordinator_not_available() -> None:
    broker = StandIn()
    with_offsets_topic(broker)  # (the topic exists, its partition states not yet)
    assert locator(broker).locate(GROUP, GROUP_ID) == ErrorCode.coordinator_not_available


async def test_a_leader_not_registered_is_coordinator_not_available() -> None:
    broker = StandIn()
    index = with_offsets_topic(broker)
    led_by(broker, index, 4)  # broker 4's registration is gone
    assert locator(broker).locate(GROUP, GROUP_ID) == ErrorCode.coordinator_not_available


async def test_this_broker_without_its_lease_does_not_name_itself() -> None:
    broker = StandIn()
    index = with_offsets_topic(broker)
    register(broker, NODE)
    led_by(broker, index, NODE)
    assert isinstance(locator(broker).locate(GROUP, GROUP_ID), BrokerRegistration)
    broker.store.live = False
    assert locator(broker).locate(GROUP, GROUP_ID) == ErrorCode.coordinator_not_available


async def test_the_first_transactional_lookup_creates_the_transaction_log() -> None:
    broker = StandIn()
    with_offsets_topic(broker)  # (another topic: no help to transactional ids)
    assert locator(broker).locate(TRANSACTION, TXN_ID) == ErrorCode.coordinator_not_available
    await asyncio.sleep(0)
    assert broker.admin.created == [
        (TRANSACTION_STATE_TOPIC, 8, 3, {"min.insync.replicas": "2"}, True)
    ]
    broker.admin.release.set()
    await asyncio.sleep(0)


async def test_the_transactional_ids_partition_leader_is_the_coordinator() -> None:
    broker = StandIn()
    record = TopicRecord(TRANSACTION_STATE_TOPIC, uuid.uuid4(), 6, {}, True)
    broker.store.view.topics[TRANSACTION_STATE_TOPIC] = Versioned(record, 1)
    index = partition_for(TXN_ID, 6)
    leader = register(broker, 3)
    state = PartitionState((3,), 3, 1, (3,))
    broker.store.view.partitions[(TRANSACTION_STATE_TOPIC, index)] = Versioned(state, 2)
    assert locator(broker).locate(TRANSACTION, TXN_ID) == leader
    # groups are placed by another topic (not created yet), not by this one
    assert locator(broker).locate(GROUP, TXN_ID) == ErrorCode.coordinator_not_available
