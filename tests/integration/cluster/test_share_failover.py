"""Share groups (KIP-932) failed over on a 3-broker cluster: two share consumers (lockgate's,
explicit acknowledgement: accept, release once, or reject by a policy of the value) consume a
replicated topic of two partitions while, first, the broker coordinating the share state of
partition 0 (FindCoordinator key type 2) is killed (kill -9), then the leader of partition 1.
The share-partition leader owns the in-flight records, the share coordinator the durable
state: the run ends with every record accepted once or rejected, none handed out after an
applied final acknowledgement, delivery counts never lower, and the start offsets the new
coordinator serves (DescribeShareGroupOffsets) at the end of each partition. The fault
checker's share rules (tests/faults/checker.py) judge the history."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from tests.faults.checker import check_share
from tests.faults.history import History, load
from tests.faults.share_workload import (
    ShareReader,
    configure_group,
    share_coordinator,
    share_start_offsets,
)
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster

pytestmark = pytest.mark.timeout(300)

TOPIC, GROUP = "shared-failover", "shared-failover-group"
PARTITIONS = 2
PER_PHASE = 150  # records produced before the run and after each kill
DELIVERY_LIMIT = 5
DEADLINE_S = 120.0
SHARE_SETTINGS = {
    # share consumers get their assignment within about a second
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.assignment.interval.ms": "0",
    # the state topic's partitions spread over the three brokers; fewer than 50 to create
    "share.coordinator.state.topic.num.partitions": "6",
}


@pytest.fixture(scope="module")
def share_cluster(
    etcd: EtcdCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerCluster]:
    cluster = BrokerCluster(
        tmp_path_factory.mktemp("share-cluster"), etcd, settings=SHARE_SETTINGS
    ).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _produce(bootstrap: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "log_level": 3})  # fmt: skip
    for i in range(first, first + count):
        producer.produce(TOPIC, b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


async def _wait(condition: object, what: str, cluster: BrokerCluster) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {DEADLINE_S} s\n{cluster.logs()}")
        await asyncio.sleep(0.2)


def _answered(history: Path, partition: int | None = None) -> set[str]:
    """Values (of `partition`, or all) with a final acknowledgement the broker applied."""
    return {
        e["value"]
        for e in load([history])
        if e["type"] == "share_ack"
        and e["ack"] != "release"
        and e["ok"]
        and (partition is None or int(e["value"][1:]) % PARTITIONS == partition)
    }


async def _final_scan(bootstrap: str, history: History) -> dict[tuple[str, int], int]:
    """Records every value of the topic as the final scan, and answers the end offsets."""
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(partitions)
        ends = await consumer.end_offsets(partitions)
        deadline = time.monotonic() + 60
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            assert time.monotonic() < deadline, "the final scan did not reach the end"
            for message in await consumer.poll(500):
                value = (message.value or b"").decode()
                history.record("final", topic=message.topic, partition=message.partition,
                               offset=message.offset, value=value)  # fmt: skip
    return {(tp.topic, tp.partition): offset for tp, offset in ends.items()}


async def test_share_group_outlives_its_share_coordinator_and_a_partition_leader(
    share_cluster: BrokerCluster, tmp_path: Path
) -> None:
    cluster = share_cluster
    every_broker = ",".join(b.bootstrap for b in cluster.brokers.values())
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication=3)
    await configure_group(cluster.bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    path = tmp_path / "history.jsonl"
    history = History(path)
    history.record("share", group=GROUP, topics=[TOPIC], limit=DELIVERY_LIMIT)
    await asyncio.to_thread(_produce, cluster.bootstrap, 0, PER_PHASE)
    readers = [ShareReader(f"r{i}", every_broker, history, GROUP, (TOPIC,)) for i in range(2)]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(reader.run(stop)) for reader in readers]
    try:
        # phase 1: kill -9 the share coordinator of partition 0 once some of its records are
        # acknowledged (and their state written)
        await _wait(lambda: len(_answered(path, 0)) >= PER_PHASE // 4, "records answered", cluster)
        coordinator = await share_coordinator(cluster.bootstrap, GROUP, TOPIC, 0)
        before = await share_start_offsets(cluster.bootstrap, GROUP, (TOPIC,))
        assert before[(TOPIC, 0)] > 0, before
        await asyncio.to_thread(cluster.brokers[coordinator].kill)
        await asyncio.to_thread(_produce, cluster.bootstrap, PER_PHASE, PER_PHASE)
        moved = await share_coordinator(cluster.bootstrap, GROUP, TOPIC, 0)
        assert moved != coordinator
        # the state is the new coordinator's: it loaded it from __share_group_state
        after = await share_start_offsets(cluster.bootstrap, GROUP, (TOPIC,))
        assert after[(TOPIC, 0)] >= before[(TOPIC, 0)], (before, after)
        await _wait(lambda: len(_answered(path)) >= PER_PHASE, "answered after phase 1", cluster)
        await asyncio.to_thread(cluster.brokers[coordinator].start)
        await asyncio.to_thread(cluster.wait_full_isr, TOPIC)

        # phase 2: kill -9 the leader of partition 1
        leader = cluster.partitions(TOPIC)[1].leader
        await asyncio.to_thread(cluster.brokers[leader].kill)
        await asyncio.to_thread(_produce, cluster.bootstrap, 2 * PER_PHASE, PER_PHASE)
        total = 3 * PER_PHASE
        await _wait(lambda: len(_answered(path)) >= total * 0.8, "answered after phase 2", cluster)
        await asyncio.to_thread(cluster.brokers[leader].start)
        await asyncio.to_thread(cluster.wait_full_isr, TOPIC)

        # every record answered: accepted or rejected (none archived: the limit is not reached)
        await _wait(lambda: len(_answered(path)) >= total, "every record answered", cluster)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    ends = await _final_scan(cluster.bootstrap, history)
    starts = await share_start_offsets(cluster.bootstrap, GROUP, (TOPIC,))
    for (topic, partition), end in ends.items():
        history.record("share_end", topic=topic, partition=partition,
                       start_offset=starts.get((topic, partition), -1), end_offset=end)  # fmt: skip
    history.close()
    events = load([path])
    anomalies = check_share(events)
    assert sum(anomalies.values()) == 0, (dict(anomalies), [r.failures for r in readers])
    assert sum(ends.values()) == total
    # every partition's lag, whichever broker leads it (the group coordinator asks the leader
    # for its high watermark): nothing is left to deliver
    async with Admin(cluster.bootstrap) as admin:
        described = await admin.describe_share_group_offsets(GROUP, {TOPIC: range(PARTITIONS)})
    assert {tp.partition: o.lag for tp, o in described.items()} == dict.fromkeys(
        range(PARTITIONS), 0
    )
    deliveries = [e for e in events if e["type"] == "share_delivery"]
    assert {e["reader"] for e in deliveries} == {"r0", "r1"}
    assert max(e["count"] for e in deliveries) >= 2  # released records came back
