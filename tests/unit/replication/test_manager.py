"""A cluster broker's replicas following the metadata view (ReplicaManager), against an
in-memory store: the leader's term (epoch, role, high watermark as the ISR's minimum, acks=all
answers, min.insync.replicas, ISR growth by compare-and-swap), losing it to another broker or
to a lapsed lease, a deleted topic, and the replica a leader sends a consumer to (KIP-392)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lockgate.cluster.metadata import BrokerRegistration, Endpoint, PartitionState
from lockgate.config.properties import BrokerConfig
from lockgate.handlers.common import check_leader
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import build_batch, parse_header
from lockgate.replication.manager import NO_PREFERENCE, ReplicaManager
from lockgate.replication.selector import RackAwareReplicaSelector
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.support.memory_cluster import MemoryStore, replica_manager

TOPIC = "t"


@pytest.fixture
async def parts() -> AsyncIterator[tuple[Broker, MemoryStore, ReplicaManager]]:
    config = BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.durability": "page-cache",
                           "min.insync.replicas": "2"})  # fmt: skip
    broker = Broker(config, MemoryEngine())
    store = MemoryStore()
    store.put_topic(TOPIC, 1)
    store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 3, (0, 1, 2)))
    manager = replica_manager(broker, store)
    manager.start()
    try:
        yield broker, store, manager
    finally:
        await manager.stop()
        broker.topics.close()


def append(broker: Broker, count: int = 1) -> int:
    partition = broker.topics.get(TOPIC, 0)
    assert partition is not None
    for _ in range(count):
        batch = bytearray(build_batch([(None, b"v")]))
        partition.append(batch, parse_header(batch), 0)
    partition.flushed_to(partition.log_end_offset)
    return partition.log_end_offset


async def test_the_leader_takes_its_epoch_and_moves_the_high_watermark_with_its_isr(
    parts: tuple[Broker, MemoryStore, ReplicaManager],
) -> None:
    broker, _store, manager = parts
    partition = broker.topics.get(TOPIC, 0)
    assert partition is not None and partition.is_leader and partition.leader_epoch == 3
    end = append(broker, 2)
    waiter = manager.acknowledged(partition, end)
    assert partition.high_watermark == 0 and not waiter.done()
    manager.on_follower_fetch(partition, 1, end)
    assert partition.high_watermark == 0  # broker 2 has not fetched yet
    manager.on_follower_fetch(partition, 2, 1)
    assert partition.high_watermark == 1 and not waiter.done()
    manager.on_follower_fetch(partition, 2, end)
    await asyncio.sleep(0)
    assert partition.high_watermark == end and waiter.result() == ErrorCode.none
    assert [batch.partition_leader_epoch for _s, _p, batch in partition.batches_from(0)] == [3, 3]


async def test_min_insync_replicas_refuses_acks_all_before_the_append(
    parts: tuple[Broker, MemoryStore, ReplicaManager],
) -> None:
    broker, store, manager = parts
    partition = broker.topics.get(TOPIC, 0)
    assert partition is not None
    manager.check_append(partition, -1)
    store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 3, (0,), 1))  # the followers were dropped
    await asyncio.sleep(0)
    with pytest.raises(KafkaProtocolError) as refused:
        manager.check_append(partition, -1)
    assert refused.value.code == ErrorCode.not_enough_replicas
    manager.check_append(partition, 1)  # acks=1 needs the leader only
    end = append(broker)
    waiter = manager.acknowledged(partition, end)
    await asyncio.sleep(0)
    assert waiter.result() == ErrorCode.not_enough_replicas_after_append


async def test_a_caught_up_follower_rejoins_the_isr_by_compare_and_swap(
    parts: tuple[Broker, MemoryStore, ReplicaManager],
) -> None:
    broker, store, manager = parts
    store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 3, (0, 1), 1))
    await asyncio.sleep(0)
    partition = broker.topics.get(TOPIC, 0)
    assert partition is not None
    end = append(broker)
    manager.on_follower_fetch(partition, 1, end)
    store.view.brokers = {n: None for n in (0, 1, 2)}  # type: ignore[misc]
    manager.on_follower_fetch(partition, 2, end)
    for _ in range(10):
        await asyncio.sleep(0)
    state = store.view.partitions[(TOPIC, 0)].value
    assert state.isr == (0, 1, 2) and state.partition_epoch == 2 and state.leader_epoch == 3


async def test_losing_the_leadership_fails_the_waiting_writes_and_fetches_from_the_new_leader(
    parts: tuple[Broker, MemoryStore, ReplicaManager],
) -> None:
    broker, store, manager = parts
    partition = broker.topics.get(TOPIC, 0)
    assert partition is not None
    waiter = manager.acknowledged(partition, append(broker))
    store.put(TOPIC, 0, PartitionState((0, 1, 2), 1, 4, (1, 2), 1))
    await asyncio.sleep(0)
    assert not partition.is_leader and partition.leader_epoch == 4
    with pytest.raises(KafkaProtocolError) as moved:
        waiter.result()
    assert moved.value.code == ErrorCode.not_leader_or_follower
    with pytest.raises(KafkaProtocolError) as refused:
        check_leader(partition, 4)
    assert refused.value.code == ErrorCode.not_leader_or_follower
    with pytest.raises(KafkaProtocolError) as fenced:
        check_leader(partition, 3)
    assert fenced.value.code == ErrorCode.fenced_leader_epoch
    assert manager.following[(TOPIC, 0)] == (1, 4) and 1 in manager.fetchers


async def test_a_lapsed_lease_fences_the_leader_until_it_is_live_again(
    parts: tuple[Broker, MemoryStore, ReplicaManager],
) -> None:
    broker, store, manager = parts
    partition = broker.topics.get(TOPIC, 0)
    assert partition is not None
    store.is_live = False
    with pytest.raises(KafkaProtocolError) as refused:  # before any timer has told it
        manager.check_append(partition, 1)
    assert refused.value.code == ErrorCode.not_leader_or_follower
    for listener in store.lease_listeners:
        listener(False)
    assert not partition.is_leader and not manager.fetchers  # nobody to follow: itself
    store.is_live = True
    for listener in store.lease_listeners:
        listener(True)
    assert partition.is_leader and partition.leader_epoch == 3


async def test_a_deleted_topic_is_removed_here(
    parts: tuple[Broker, MemoryStore, ReplicaManager],
) -> None:
    broker, store, manager = parts
    del store.view.partitions[(TOPIC, 0)]
    del store.view.topics[TOPIC]
    manager.reconcile()
    assert broker.topics.get(TOPIC, 0) is None and TOPIC not in broker.topics.topics
    assert not manager.leaders


def registered(node: int, rack: str | None, listeners: tuple[str, ...] = ()) -> BrokerRegistration:
    endpoints = tuple(Endpoint(name, "127.0.0.1", 9092 + node) for name in listeners)
    return BrokerRegistration(node, "127.0.0.1", 9092 + node, rack, endpoints=endpoints)


async def test_the_leader_sends_a_consumer_to_an_in_sync_follower_of_its_rack(
    parts: tuple[Broker, MemoryStore, ReplicaManager],
) -> None:
    broker, store, manager = parts
    partition = broker.topics.get(TOPIC, 0)
    assert partition is not None
    store.view.brokers = {0: registered(0, "a"), 1: registered(1, "b"), 2: registered(2, "c")}
    end = append(broker, 4)
    manager.on_follower_fetch(partition, 1, end, 0)
    manager.on_follower_fetch(partition, 2, 2, 1)

    def preferred(rack: str | None, offset: int = 0, listener: str = "PLAINTEXT") -> int:
        return manager.preferred_read_replica(partition, rack, listener, offset)

    assert preferred("b") == NO_PREFERENCE  # no replica.selector.class: the leader serves
    manager.selector = RackAwareReplicaSelector()
    assert preferred("b") == 1
    assert preferred("c", 1) == 2
    assert preferred("c", 0) == NO_PREFERENCE  # broker 2's log starts at 1
    assert preferred("c", 3) == NO_PREFERENCE  # and ends at 2
    assert preferred("a") == preferred("z") == preferred(None) == preferred("") == NO_PREFERENCE
    store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 3, (0, 2), 1))  # 1 left the ISR
    await asyncio.sleep(0)
    assert preferred("b") == NO_PREFERENCE
    store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 3, (0, 1, 2), 2))
    await asyncio.sleep(0)
    assert preferred("b") == 1
    # a broker without the consumer's listener is out of its reach (Kafka: no endpoint)
    store.view.brokers[1] = registered(1, "b", ("INTERNAL",))
    assert preferred("b", listener="EXTERNAL") == NO_PREFERENCE
    assert preferred("b", listener="INTERNAL") == 1
    store.view.brokers[1] = registered(1, "b")
    # two followers in the rack: the most caught up
    store.view.brokers[2] = registered(2, "b")
    assert preferred("b", 1) == 1  # log end 4 against 2
    manager.on_follower_fetch(partition, 2, end, 1)
    assert preferred("b", 1) == 2  # as far: caught up as recently or later, the larger id
    # not the leader any more: no preference
    store.put(TOPIC, 0, PartitionState((0, 1, 2), 1, 4, (0, 1, 2), 3))
    await asyncio.sleep(0)
    assert not partition.is_leader and preferred("b") == NO_PREFERENCE
