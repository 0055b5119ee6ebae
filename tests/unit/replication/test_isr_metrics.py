"""The replication metrics of a leader (ReplicaManager against an in-memory store): an ISR
expansion and a shrink are counted once written, and the under-replicated and under-min-ISR
gauges follow the ISR."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from lockgate.cluster.metadata import PartitionState
from lockgate.config.properties import BrokerConfig
from lockgate.protocol.records import build_batch, parse_header
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.support.memory_cluster import MemoryStore, replica_manager

TOPIC = "t"


def scraped(broker: Broker) -> dict[str, float]:
    text = broker.metrics.render().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if family.name.startswith(("lockgate_isr", "lockgate_under"))
    }


async def test_isr_changes_and_health_are_counted() -> None:
    config = BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.durability": "page-cache",
                           "lockgate.metrics.port": "0", "min.insync.replicas": "3",
                           "replica.lag.time.max.ms": "100"})  # fmt: skip
    broker = Broker(config, MemoryEngine())
    store = MemoryStore()
    store.put_topic(TOPIC, 1)
    store.put(TOPIC, 0, PartitionState((0, 1, 2), 0, 3, (0, 1), 1))
    manager = replica_manager(broker, store)
    broker.replicas = manager
    manager.start()
    try:
        partition = broker.topics.get(TOPIC, 0)
        assert partition is not None
        assert scraped(broker) == {
            "lockgate_under_replicated_partitions": 1,
            "lockgate_under_min_isr_partitions": 1,
            "lockgate_isr_shrinks_total": 0,
            "lockgate_isr_expands_total": 0,
        }
        batch = bytearray(build_batch([(None, b"v")]))
        partition.append(batch, parse_header(batch), 0)
        partition.flushed_to(partition.log_end_offset)
        store.view.brokers = {n: None for n in (0, 1, 2)}  # type: ignore[misc]
        manager.on_follower_fetch(partition, 1, 1)
        manager.on_follower_fetch(partition, 2, 1)  # caught up: joins the ISR
        for _ in range(20):
            await asyncio.sleep(0)
        assert store.view.partitions[(TOPIC, 0)].value.isr == (0, 1, 2)
        assert scraped(broker) == {
            "lockgate_under_replicated_partitions": 0,
            "lockgate_under_min_isr_partitions": 0,
            "lockgate_isr_shrinks_total": 0,
            "lockgate_isr_expands_total": 1,
        }
        for _ in range(100):  # bounded: the followers stop fetching and are dropped
            await asyncio.sleep(0.02)
            if scraped(broker)["lockgate_isr_shrinks_total"] >= 1:
                break
        metrics = scraped(broker)
        assert metrics["lockgate_isr_shrinks_total"] == 1
        assert metrics["lockgate_under_replicated_partitions"] == 1
        assert metrics["lockgate_under_min_isr_partitions"] == 1
    finally:
        await manager.stop()
        broker.topics.close()
