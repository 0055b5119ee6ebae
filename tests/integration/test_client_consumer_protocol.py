"""lockgate's consumer with group_protocol="consumer" (KIP-848) against lockgate's broker (one
process for the module, heartbeats every 100 ms, sessions of 1.5 s): partitions split and handed
over on join and leave with every partition owned exactly once, a member past its session loses
its partitions (no commit) and joins again, a static member that comes back keeps its
partitions, commits and committed offsets under the member epoch, the admin's describe of the
group, a consume-transform-produce transaction with group_metadata(), and a group shared with
a confluent-kafka consumer (both on regex subscriptions)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer as ConfluentConsumer

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, Message
from lockgate.client.consumer_member import ConsumerMember
from lockgate.client.producer import Producer
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

PARTITIONS = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("consumer-protocol") / "data"
    process = BrokerProcess(
        data,
        {
            "group.consumer.heartbeat.interval.ms": "100",
            "group.consumer.min.heartbeat.interval.ms": "100",
            "group.consumer.session.timeout.ms": "1500",
            "group.consumer.min.session.timeout.ms": "1500",
            "lockgate.durability": "page-cache",
        },
    ).start()
    try:
        yield process
    finally:
        process.kill()


def member(broker: BrokerProcess, group: str, **options: object) -> Consumer:
    defaults: dict[str, object] = {
        "group_id": group,
        "group_protocol": "consumer",
        "auto_offset_reset": "earliest",
    }
    return Consumer(broker.bootstrap, **{**defaults, **options})  # type: ignore[arg-type]


async def produce(broker: BrokerProcess, topic: str, count: int) -> None:
    async with Producer(broker.bootstrap, linger_ms=0) as producer:
        for i in range(count):
            await producer.send(topic, f"{i}".encode(), partition=i % PARTITIONS)
        await producer.flush()


async def poll_until(
    consumers: list[Consumer], done: Callable[[list[Message]], bool], timeout: float = 20
) -> list[Message]:
    """Each consumer polls in its own task until `done(what they read so far)` holds;
    returns what they read."""
    seen: list[Message] = []
    stop = asyncio.Event()

    async def keep_polling(consumer: Consumer) -> None:
        while not stop.is_set():
            seen.extend(await consumer.poll(50))

    tasks = [asyncio.create_task(keep_polling(consumer)) for consumer in consumers]
    try:
        deadline = time.monotonic() + timeout
        while not done(seen):
            assert time.monotonic() < deadline, "timed out"
            for task in tasks:
                if task.done():
                    task.result()
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    return seen


def split_evenly(*consumers: Consumer) -> Callable[[list[Message]], bool]:
    """Every partition owned exactly once, spread evenly."""

    def check(_seen: list[Message]) -> bool:
        owned = [tp for c in consumers for tp in c.assignment()]
        share = PARTITIONS // len(consumers)
        return len(owned) == len(set(owned)) == PARTITIONS and all(
            len(c.assignment()) == share for c in consumers
        )

    return check


class Recorder:
    def __init__(self) -> None:
        self.revoked: list[TopicPartition] = []
        self.assigned: list[TopicPartition] = []
        self.lost: list[TopicPartition] = []

    async def on_partitions_lost(self, lost: list[TopicPartition]) -> None:
        self.lost.extend(lost)

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.revoked.extend(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.assigned.extend(assigned)


async def test_members_split_hand_over_and_commit(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "kip848-split", PARTITIONS)
    await produce(broker, "kip848-split", 40)
    first, second, third = (member(broker, "g-split", enable_auto_commit=False) for _ in range(3))
    recorder = Recorder()
    async with first, second, third:
        first.subscribe(["kip848-split"], listener=recorder)
        seen = await poll_until(
            [first], lambda seen: len(first.assignment()) == PARTITIONS and len(seen) >= 40
        )
        assert sorted(int(m.value or b"") for m in seen) == list(range(40))
        await first.commit()
        second.subscribe(["kip848-split"])
        await poll_until([first, second], split_evenly(first, second))
        assert len(recorder.revoked) == 2  # handed over, committed before they went
        committed = await second.committed(
            [TopicPartition("kip848-split", p) for p in range(PARTITIONS)]
        )
        assert {tp.partition: o.offset for tp, o in committed.items() if o} == dict.fromkeys(
            range(PARTITIONS), 10
        )
        third.subscribe(["kip848-split"])
        await poll_until(
            [first, second, third],
            lambda _: (
                sorted(len(c.assignment()) for c in (first, second, third)) == [1, 1, 2]
                and len({tp for c in (first, second, third) for tp in c.assignment()}) == PARTITIONS
            ),
        )
        async with Admin(broker.bootstrap) as admin:
            described = (await admin.describe_groups(["g-split"]))["g-split"]
        assert described.group_type == "consumer"
        assert described.protocol == "uniform"
        assert len(described.members) == 3
        assert sorted(tp for m in described.members for tp in m.target_assignment) == [
            TopicPartition("kip848-split", p) for p in range(PARTITIONS)
        ]
        assert described.group_epoch >= 3
        await third.close()  # leaves with epoch -1: the others take its partitions at once
        await poll_until([first, second], split_evenly(first, second))
        # nothing read twice: every position continues from the commit
        await produce(broker, "kip848-split", 4)
        later = await poll_until([first, second], lambda seen: len(seen) >= 4)
        assert sorted(int(m.value or b"") for m in later) == [0, 1, 2, 3]


async def test_a_static_member_that_comes_back_keeps_its_partitions(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "kip848-static", PARTITIONS)
    stays = member(broker, "g-static", group_instance_id="stays", group_remote_assignor="range")
    returns = member(broker, "g-static", group_instance_id="returns", group_remote_assignor="range")
    async with stays:
        stays.subscribe(["kip848-static"])
        async with returns:
            returns.subscribe(["kip848-static"])
            await poll_until([stays, returns], split_evenly(stays, returns))
            before = returns.assignment()
        # left with epoch -2: its partitions wait for it (until the session times out)
        again = member(
            broker, "g-static", group_instance_id="returns", group_remote_assignor="range"
        )
        async with again:
            again.subscribe(["kip848-static"])
            await poll_until([stays, again], split_evenly(stays, again))
            assert again.assignment() == before


async def test_a_member_past_its_session_loses_its_partitions_and_joins_again(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "kip848-fenced", PARTITIONS)
    healthy, silent = member(broker, "g-fenced"), member(broker, "g-fenced")
    recorder = Recorder()
    async with healthy, silent:
        healthy.subscribe(["kip848-fenced"])
        silent.subscribe(["kip848-fenced"], listener=recorder)
        await poll_until([healthy, silent], split_evenly(healthy, silent))
        held = silent.assignment()
        membership = silent._member
        assert isinstance(membership, ConsumerMember) and membership._task is not None
        membership._task.cancel()  # no heartbeat: the session (1.5 s) expires
        await poll_until([healthy], lambda _: len(healthy.assignment()) == PARTITIONS)
        membership._start_heartbeat()
        await poll_until([healthy, silent], split_evenly(healthy, silent))
        assert sorted(recorder.lost) == sorted(held)  # released without a commit
        assert recorder.revoked == []


async def test_consume_transform_produce_with_the_member_epoch(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "kip848-in", 2)
    create_topic(broker.bootstrap, "kip848-out", 2)
    async with Producer(broker.bootstrap, linger_ms=0) as source:
        for i in range(10):
            await source.send("kip848-in", f"{i}".encode(), partition=i % 2)
    consumer = member(broker, "g-ctp", enable_auto_commit=False)
    producer = Producer(broker.bootstrap, transactional_id="kip848-ctp", linger_ms=0)
    async with consumer, producer:
        await producer.init_transactions()
        consumer.subscribe(["kip848-in"])
        done = 0
        deadline = time.monotonic() + 20
        while done < 10 and time.monotonic() < deadline:
            batch = await consumer.poll(100)
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                await producer.send("kip848-out", b"out:" + (message.value or b""))
            positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
            metadata = consumer.group_metadata()
            assert metadata.generation_id > 0 and metadata.member_id
            await producer.send_offsets_to_transaction(positions, metadata)
            await producer.commit_transaction()
            done += len(batch)
        assert done == 10
        committed = await consumer.committed([TopicPartition("kip848-in", p) for p in range(2)])
        assert {tp.partition: o.offset for tp, o in committed.items() if o} == {0: 5, 1: 5}


async def test_a_group_shared_with_confluent_kafka_and_a_pattern(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "kip848-shared-1", 2)
    create_topic(broker.bootstrap, "kip848-shared-2", 2)
    ours = member(broker, "g-shared")
    theirs = ConfluentConsumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "g-shared",
            "group.protocol": "consumer",
        }
    )
    theirs.subscribe(["^kip848-shared-.*"])
    try:
        async with ours:
            ours.subscribe(pattern=r"kip848-shared-.*")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                await ours.poll(50)
                await asyncio.to_thread(theirs.poll, 0.05)
                if len(ours.assignment()) == 2 and len(theirs.assignment()) == 2:
                    break
            owned = [
                *ours.assignment(),
                *(TopicPartition(t.topic, t.partition) for t in theirs.assignment()),
            ]
            assert sorted(owned) == [
                TopicPartition(f"kip848-shared-{n}", p) for n in (1, 2) for p in range(2)
            ]
    finally:
        await asyncio.to_thread(theirs.close)


def test_the_group_protocol_is_checked() -> None:
    with pytest.raises(ValueError, match="group_protocol"):
        Consumer("127.0.0.1:9", group_id="g", group_protocol="share")
    with pytest.raises(ValueError, match="group_remote_assignor"):
        Consumer("127.0.0.1:9", group_id="g", group_remote_assignor="uniform")
