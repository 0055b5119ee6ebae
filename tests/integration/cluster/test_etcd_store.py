"""The etcd engine of the metadata store against a real 3-member etcd: one cluster id per
namespace, broker registration under a lease (duplicates refused, a lost lease noticed without
etcd's word and regained), controller election and hand-over with a growing epoch, topics and
partition states changed only by compare-and-swap, and views that follow every change across
the loss of etcd members."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from lockgate.cluster.etcd import DuplicateBrokerError, EtcdMetadataStore
from lockgate.cluster.metadata import BrokerRegistration, PartitionState, TopicRecord
from tests.support.etcd import EtcdCluster

pytestmark = pytest.mark.timeout(120)


@asynccontextmanager
async def store(
    etcd: EtcdCluster,
    namespace: str,
    node: int | None = None,
    session_timeout_ms: int = 9_000,
    heartbeat_interval_ms: int = 2_000,
) -> AsyncIterator[EtcdMetadataStore]:
    engine = EtcdMetadataStore(
        etcd.endpoints,
        namespace,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
    )
    await engine.start()
    try:
        if node is not None:
            await engine.register(BrokerRegistration(node, "127.0.0.1", 9000 + node))
        yield engine
    finally:
        await engine.close()


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


def namespace() -> str:
    return uuid.uuid4().hex[:8]


def topic(name: str, partitions: int) -> TopicRecord:
    return TopicRecord(name, uuid.uuid4(), partitions)


async def test_one_cluster_id_per_namespace(etcd: EtcdCluster) -> None:
    space = namespace()
    async with store(etcd, space) as a, store(etcd, space) as b, store(etcd, namespace()) as c:
        assert a.cluster_id == b.cluster_id
        assert a.cluster_id != c.cluster_id


async def test_registration_is_seen_by_all_and_goes_with_a_clean_close(etcd: EtcdCluster) -> None:
    space = namespace()
    async with store(etcd, space, node=1) as one:
        async with store(etcd, space, node=2) as two:
            await until(lambda: set(one.view.brokers) == {1, 2})
            assert two.view.brokers[1].port == 9001
            assert one.live and two.live
        await until(lambda: set(one.view.brokers) == {1})  # the lease revoked at close


async def test_a_live_node_id_is_not_registered_twice(etcd: EtcdCluster) -> None:
    space = namespace()
    async with store(etcd, space, node=1, session_timeout_ms=1_000), store(etcd, space) as other:
        with pytest.raises(DuplicateBrokerError):
            await other.register(BrokerRegistration(1, "127.0.0.1", 9999))


async def test_a_killed_brokers_node_id_is_free_once_its_lease_runs_out(etcd: EtcdCluster) -> None:
    space = namespace()
    first = EtcdMetadataStore(etcd.endpoints, space, session_timeout_ms=2_000)
    await first.start()
    await first.register(BrokerRegistration(1, "127.0.0.1", 9001))
    for task in first._tasks:  # dies without a word: no revoke, no keep-alive
        task.cancel()
    started = time.monotonic()
    async with store(etcd, space, node=1, session_timeout_ms=2_000) as second:
        waited = time.monotonic() - started
        assert second.view.brokers[1].incarnation != ""
        assert waited > 0.5  # it waited for the old lease to run out
    await first._client.close()


async def test_controller_election_and_hand_over(etcd: EtcdCluster) -> None:
    space = namespace()
    async with store(etcd, space, node=1) as one, store(etcd, space, node=2) as two:
        first = await one.campaign()
        assert first.node_id == 1
        follower = asyncio.create_task(two.campaign())
        await asyncio.sleep(0.5)
        assert not follower.done()  # one controller at a time
        await one.resign()
        second = await asyncio.wait_for(follower, 20)
        assert second.node_id == 2 and second.epoch > first.epoch
        await until(lambda: one.view.controller == second)


async def test_a_lost_lease_is_noticed_without_etcd_and_regained(etcd: EtcdCluster) -> None:
    space = namespace()
    changes: list[bool] = []
    async with (
        store(etcd, space, node=1, session_timeout_ms=2_000, heartbeat_interval_ms=300) as one,
        store(etcd, space, node=2, session_timeout_ms=2_000, heartbeat_interval_ms=300) as two,
    ):
        one.lease_listeners.append(changes.append)
        first = await one.campaign()
        for member in etcd.members:  # etcd says nothing at all: every member paused
            etcd.pause(member)
        try:
            paused = time.monotonic()
            await until(lambda: not one.live, timeout=10)
            assert time.monotonic() - paused <= 2.5  # by its own clock: the TTL, no more
            assert changes == [False]
        finally:
            for member in etcd.members:
                etcd.resume(member)
            etcd.wait_healthy()
        await until(lambda: one.live and two.live, timeout=30)
        assert changes[-1] is True
        await until(lambda: set(one.view.brokers) == {1, 2}, timeout=30)
        # Either the controller key went with the lease, and a new term has a later epoch,
        # or etcd's new leader extended every lease (it does on election) and the term goes on.
        await one.resign()
        second = await asyncio.wait_for(two.campaign(), 20)
        assert second.node_id == 2 and second.epoch > first.epoch


async def test_a_new_registration_is_kept_alive_while_the_view_catches_up(
    etcd: EtcdCluster,
) -> None:
    """Back from an outage, a broker registers under a new lease at once but goes live only
    once its view has its registration, which can take longer than the TTL (the watch
    reconnects with a backoff): the lease must be kept alive meanwhile, or the registration
    others saw goes again (a cluster that looks whole for a moment, then one broker short)."""
    space = namespace()
    async with (
        store(etcd, space, node=1, session_timeout_ms=2_000, heartbeat_interval_ms=300) as one,
        store(etcd, space) as two,
    ):
        await until(lambda: 1 in two.view.brokers)
        watch = next(t for t in one._tasks if t.get_name() == "etcd-watch")
        watch.cancel()  # its view stands still
        lost = one._lease_id
        await two._lease.revoke(lost)  # as if it ran out in an outage
        await until(lambda: one._lease_id != lost and 1 in two.view.brokers)
        assert not one.live  # its view has not caught up with the new registration
        await asyncio.sleep(2 * one.ttl)
        assert 1 in two.view.brokers  # still registered, two TTLs on
        assert not one.live
        one._spawn(one._watch_loop(), "etcd-watch")
        await until(lambda: one.live)
        assert set(one.view.brokers) == {1}


async def test_topics_and_partition_states_by_compare_and_swap(etcd: EtcdCluster) -> None:
    space = namespace()
    async with store(etcd, space) as a, store(etcd, space) as b:
        record = topic("orders", 2)
        states = {p: PartitionState((1, 2, 3), 1 + p, 0, (1, 2, 3)) for p in range(2)}
        assert await a.create_topic(record, states)
        assert not await b.create_topic(topic("orders", 5), {})  # exists
        await until(lambda: ("orders", 1) in b.view.partitions)
        read = b.view.partitions[("orders", 0)]
        assert read.value == states[0]

        # two controllers' decisions on the same read: exactly one wins
        shrink = PartitionState((1, 2, 3), 1, 0, (1, 2), 1)
        elect = PartitionState((1, 2, 3), 2, 1, (2, 3), 1)
        results = await asyncio.gather(
            a.compare_and_set("orders", 0, shrink, read.revision),
            b.compare_and_set("orders", 0, elect, read.revision),
        )
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        await until(
            lambda: (
                a.view.partitions[("orders", 0)].value
                == b.view.partitions[("orders", 0)].value
                == winners[0].value
            )
        )
        assert a.view.partitions[("orders", 0)].revision == winners[0].revision

        grown = TopicRecord("orders", record.topic_id, 3)
        revision = a.view.topics["orders"].revision
        new = {2: PartitionState((3, 1, 2), 3, 0, (3, 1, 2))}
        assert await a.update_topic(grown, revision, new)
        assert not await b.update_topic(grown, revision, new)  # stale revision
        await until(lambda: b.view.topics["orders"].value.partitions == 3)
        assert b.view.partitions[("orders", 2)].value == new[2]
        compacted = TopicRecord("orders", record.topic_id, 3, {"cleanup.policy": "compact"})
        assert await b.update_topic(compacted, b.view.topics["orders"].revision)
        await until(lambda: a.view.topics["orders"].value.configs == compacted.configs)

        assert await b.delete_topic("orders")
        await until(lambda: "orders" not in a.view.topics and not a.view.topic_partitions("orders"))
        assert not await a.delete_topic("orders")


async def test_views_follow_changes_across_lost_etcd_members(etcd: EtcdCluster) -> None:
    space = namespace()
    async with store(etcd, space) as writer, store(etcd, space) as reader:
        record = topic("moves", 1)
        assert await writer.create_topic(record, {0: PartitionState((1,), 1, 0, (1,))})
        for step in range(30):
            if step == 10:
                etcd.kill(etcd.members[0])
            if step == 20:
                etcd.restart(etcd.members[0])
                etcd.kill(etcd.members[1])
            current = writer.view.partitions[("moves", 0)]
            state = PartitionState((1,), 1, step + 1, (1,), step + 1)
            for _ in range(50):  # a write may meet the election that follows a kill
                try:
                    written = await writer.compare_and_set("moves", 0, state, current.revision)
                    break
                except Exception:  # etcd electing a leader: retried, within a bound
                    await asyncio.sleep(0.2)
                    current = writer.view.partitions[("moves", 0)]
            else:
                raise AssertionError("etcd never took the write")
            assert written is not None or writer.view.partitions[("moves", 0)].value == state
        await until(lambda: reader.view.partitions[("moves", 0)].value.leader_epoch == 30)
    etcd.restart(etcd.members[1])
    etcd.wait_healthy()
