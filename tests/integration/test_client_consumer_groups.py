"""lockgate's consumer as a member of classic groups, against an in-process broker: partitions
split and moved on join/leave (eager range and cooperative-sticky), commits (sync, async, auto
on close), pause/resume, pattern subscriptions, group_metadata() in a consume-transform-produce
transaction, and a group shared with a confluent-kafka consumer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from confluent_kafka import Consumer as ConfluentConsumer

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, Message
from lockgate.client.producer import Producer
from lockgate.config.properties import BrokerConfig
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine

PARTITIONS = 4


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    config = BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "lockgate.durability": "page-cache",
            "group.initial.rebalance.delay.ms": "0",
        }
    )
    started = Broker(config, MemoryEngine())
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def bootstrap(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


async def produce(broker: Broker, topic: str, count: int) -> None:
    async with Producer(bootstrap(broker), linger_ms=0) as producer:
        for i in range(count):
            await producer.send(topic, f"{i}".encode(), partition=i % PARTITIONS)
        await producer.flush()


def member(broker: Broker, group: str, **options: object) -> Consumer:
    defaults: dict[str, object] = {
        "group_id": group,
        "auto_offset_reset": "earliest",
        "heartbeat_interval_ms": 200,
        "session_timeout_ms": 6_000,
    }
    return Consumer(bootstrap(broker), **{**defaults, **options})  # type: ignore[arg-type]


async def poll_until(
    consumers: list[Consumer],
    done: object,
    timeout: float = 20,
    seen: list[Message] | None = None,
) -> list[Message]:
    """Each consumer polls in its own task (a join waits for every member, as it would with
    separate processes) until `done()` holds; returns what they read (appended to `seen`)."""
    seen = [] if seen is None else seen
    stop = asyncio.Event()

    async def keep_polling(consumer: Consumer) -> None:
        while not stop.is_set():
            seen.extend(await consumer.poll(100))

    tasks = [asyncio.create_task(keep_polling(consumer)) for consumer in consumers]
    try:
        deadline = time.monotonic() + timeout
        while not done():  # type: ignore[operator]
            assert time.monotonic() < deadline, "timed out"
            for task in tasks:
                if task.done():
                    task.result()  # a failed poll fails the test
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    return seen


class Recorder:
    def __init__(self) -> None:
        self.revoked: list[list[TopicPartition]] = []
        self.assigned: list[list[TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.revoked.append(sorted(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.assigned.append(sorted(assigned))


async def test_range_members_split_then_take_over_and_commit(broker: Broker) -> None:
    broker.topics.create("split", PARTITIONS, 1, {})
    first, second = member(broker, "g-range"), member(broker, "g-range")
    async with first, second:
        first.subscribe(["split"])
        await poll_until([first], lambda: len(first.assignment()) == PARTITIONS)
        second.subscribe(["split"])
        seen = await poll_until(
            [first, second],
            lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2,
        )
        assert set(first.assignment()) | set(second.assignment()) == {
            TopicPartition("split", p) for p in range(PARTITIONS)
        }
        assert seen == []
        await produce(broker, "split", 40)
        await poll_until([first, second], lambda: len(seen) >= 40, seen=seen)
        values = [m.value or b"" for m in seen]
        assert sorted(values) == sorted(f"{i}".encode() for i in range(40))  # once each
        await first.commit()
        await second.commit_async()
        assert second.group_metadata().generation_id == first.group_metadata().generation_id
    async with member(broker, "g-range", enable_auto_commit=False) as third:
        committed = await third.committed([TopicPartition("split", p) for p in range(4)])
        assert {tp.partition: o.offset for tp, o in committed.items() if o} == {
            p: 10 for p in range(PARTITIONS)
        }
        third.subscribe(["split"])
        assert await poll_until([third], lambda: len(third.assignment()) == 4) == []


async def test_a_leaving_member_hands_its_partitions_over(broker: Broker) -> None:
    broker.topics.create("handover", PARTITIONS, 1, {})
    stays, leaves = member(broker, "g-leave"), member(broker, "g-leave")
    async with stays:
        stays.subscribe(["handover"])
        async with leaves:
            leaves.subscribe(["handover"])
            await poll_until(
                [stays, leaves], lambda: len(stays.assignment()) == len(leaves.assignment()) == 2
            )
        await poll_until([stays], lambda: len(stays.assignment()) == PARTITIONS)


async def test_cooperative_sticky_moves_only_what_it_must(broker: Broker) -> None:
    broker.topics.create("sticky", PARTITIONS, 1, {})
    strategy = {"partition_assignment_strategy": ["cooperative-sticky"]}
    first_listener, second_listener = Recorder(), Recorder()
    first, second = member(broker, "g-coop", **strategy), member(broker, "g-coop", **strategy)
    async with first, second:
        first.subscribe(["sticky"], listener=first_listener)
        await poll_until([first], lambda: len(first.assignment()) == PARTITIONS)
        before = set(first.assignment())
        second.subscribe(["sticky"], listener=second_listener)
        await poll_until(
            [first, second],
            lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2,
        )
        assert set(first.assignment()) <= before
        # only the two partitions that moved were ever revoked, never all four
        assert [len(r) for r in first_listener.revoked] == [2]
        assert second_listener.revoked == []


async def test_pause_resume_and_pattern_subscription(broker: Broker) -> None:
    for name in ("metrics-a", "metrics-b", "other"):
        broker.topics.create(name, 1, 1, {})
    async with member(broker, "g-pattern") as consumer:
        consumer.subscribe(pattern=r"metrics-.*")
        await poll_until([consumer], lambda: len(consumer.assignment()) == 2)
        paused = TopicPartition("metrics-b", 0)
        consumer.pause([paused])
        async with Producer(bootstrap(broker), linger_ms=0) as producer:
            for name in ("metrics-a", "metrics-b", "other"):
                await producer.send_and_wait(name, name.encode())
        assert consumer.paused() == [paused]
        seen: list[Message] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not seen:
            seen += await consumer.poll(200)
        seen += await consumer.poll(300)  # one more round: the paused partition stays silent
        assert [m.topic for m in seen] == ["metrics-a"]
        consumer.resume([paused])
        later: list[Message] = []
        while time.monotonic() < deadline and not later:
            later = await consumer.poll(200)
        assert [m.topic for m in later] == ["metrics-b"]


async def test_consume_transform_produce_with_group_metadata(broker: Broker) -> None:
    broker.topics.create("ctp-in", 2, 1, {})
    broker.topics.create("ctp-out", 2, 1, {})
    async with Producer(bootstrap(broker), linger_ms=0) as source:
        for i in range(10):
            await source.send("ctp-in", f"{i}".encode(), partition=i % 2)
    consumer = member(broker, "g-ctp", enable_auto_commit=False)
    producer = Producer(bootstrap(broker), transactional_id="ctp-worker", linger_ms=0)
    async with consumer, producer:
        await producer.init_transactions()
        consumer.subscribe(["ctp-in"])
        done = 0
        deadline = time.monotonic() + 20
        while done < 10 and time.monotonic() < deadline:
            batch = await consumer.poll(200)
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                await producer.send("ctp-out", b"out:" + (message.value or b""))
            positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
            await producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            await producer.commit_transaction()
            done += len(batch)
        assert done == 10
    async with member(broker, "g-ctp", enable_auto_commit=False) as check:
        committed = await check.committed([TopicPartition("ctp-in", p) for p in range(2)])
        assert {tp.partition: o.offset for tp, o in committed.items() if o} == {0: 5, 1: 5}


async def test_a_group_shared_with_confluent_kafka(broker: Broker) -> None:
    broker.topics.create("shared", PARTITIONS, 1, {})
    ours = member(broker, "g-shared", partition_assignment_strategy=["range"])
    theirs = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap(broker),
            "group.id": "g-shared",
            "partition.assignment.strategy": "range",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
        }
    )
    theirs.subscribe(["shared"])
    try:
        async with ours:
            ours.subscribe(["shared"])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                await ours.poll(100)
                await asyncio.to_thread(theirs.poll, 0.1)
                if len(ours.assignment()) == 2 and len(theirs.assignment()) == 2:
                    break
            assert len(ours.assignment()) == 2
            theirs_partitions = {tp.partition for tp in theirs.assignment()}
            assert theirs_partitions | {tp.partition for tp in ours.assignment()} == {0, 1, 2, 3}
    finally:
        await asyncio.to_thread(theirs.close)
