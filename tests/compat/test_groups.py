"""Consumer groups through real clients: confluent-kafka (librdkafka), kafka-python and
aiokafka group consumers against a lockgate broker.

- A second member joining splits the partitions (range assignor: disjoint halves covering
  every partition); when it leaves, the remaining member gets them all. Every member commits
  what it processed synchronously before consuming more, so across both rebalances every
  record is received exactly once.
- A member commits part of what it read, reads on without committing, and the broker is
  restarted (SIGTERM, and kill -9 right after the commit returned): a new member of the group
  resumes exactly at the committed offsets, so nothing is lost and only records read beyond
  the last commit are read again.
- group.initial.rebalance.delay.ms: the first member of a new group waits for it (measured;
  it would be assigned within ~0.1 s if the delay were ignored), and a member arriving during
  the delay extends it and lands in the same first generation.
- AdminClient lists, describes and deletes groups and lists their committed offsets.
- aiokafka: subscribe, commit, and a new member resuming from the commit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.structs import OffsetAndMetadata

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

pytestmark = pytest.mark.compat

TIMEOUT = 30.0
SETTINGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500"}

# (partition, offset, value)
Record = tuple[int, int, str]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the tests that do not restart it (each uses its own topic and group)."""
    process = BrokerProcess(tmp_path_factory.mktemp("groups") / "data", SETTINGS).start()
    try:
        yield process
    finally:
        process.kill()


def produce(bootstrap: str, topic: str, partitions: int, first: int, count: int) -> list[Record]:
    """`count` records to each partition, values naming partition and offset (the topic is
    written only by this function, from offset 0, so offset = index)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    records = [
        (p, i, f"{topic}-{p}-{i}") for p in range(partitions) for i in range(first, first + count)
    ]
    for partition, _offset, value in records:
        producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(TIMEOUT) == 0
    return records


# -- one group member, whatever the client -----------------------------------------------------


class Member(Protocol):
    assignment: set[int]
    assignments: list[set[int]]

    def poll(self, max_records: int = 100, timeout: float = 0.1) -> list[Record]: ...

    def commit(self, records: list[Record]) -> None: ...

    def committed(self, partitions: int) -> dict[int, int]: ...

    def close(self) -> None: ...


def positions_after(records: list[Record]) -> dict[int, int]:
    positions: dict[int, int] = {}
    for partition, offset, _value in records:
        positions[partition] = max(positions.get(partition, 0), offset + 1)
    return positions


class ConfluentMember:
    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        session_ms: int = 6000,
        extra: dict[str, object] | None = None,
    ) -> None:
        self.topic = topic
        self.assignment: set[int] = set()
        self.assignments: list[set[int]] = []
        config: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "heartbeat.interval.ms": 200,
            "session.timeout.ms": session_ms,
            "partition.assignment.strategy": "range",
        }
        config.update(extra or {})
        self.consumer = Consumer(config)
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assignment = {p.partition for p in partitions}
        self.assignments.append(set(self.assignment))

    def _revoked(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        self.assignment = set()

    def poll(self, max_records: int = 100, timeout: float = 0.1) -> list[Record]:
        records = []
        for message in self.consumer.consume(max_records, timeout):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {error}")
            partition, offset, value = message.partition(), message.offset(), message.value()
            assert partition is not None and offset is not None and value is not None
            records.append((partition, offset, value.decode()))
        return records

    def commit(self, records: list[Record]) -> None:
        positions = positions_after(records)
        if not positions:
            return
        answered = self.consumer.commit(
            offsets=[TopicPartition(self.topic, p, o) for p, o in positions.items()],
            asynchronous=False,
        )
        assert answered is not None
        assert [tp.error for tp in answered if tp.error is not None] == []

    def committed(self, partitions: int) -> dict[int, int]:
        answered = self.consumer.committed(
            [TopicPartition(self.topic, p) for p in range(partitions)], timeout=TIMEOUT
        )
        return {tp.partition: tp.offset for tp in answered if tp.offset >= 0}

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonMember:
    def __init__(self, bootstrap: str, group: str, topic: str, session_ms: int = 6000) -> None:
        self.topic = topic
        self.assignment: set[int] = set()
        self.assignments: list[set[int]] = []
        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.assignment = set()

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.assignment = {tp.partition for tp in assigned}
                member.assignments.append(set(member.assignment))

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=200,
            session_timeout_ms=session_ms,
            partition_assignment_strategy=[RangePartitionAssignor],
        )
        self.consumer.subscribe([topic], listener=Listener())

    def poll(self, max_records: int = 100, timeout: float = 0.1) -> list[Record]:
        batches = self.consumer.poll(timeout_ms=int(timeout * 1000), max_records=max_records)
        return [
            (record.partition, record.offset, record.value.decode())
            for messages in batches.values()
            for record in messages
        ]

    def commit(self, records: list[Record]) -> None:
        positions = positions_after(records)
        if positions:
            self.consumer.commit(
                {
                    KafkaTopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                    for p, o in positions.items()
                }
            )

    def committed(self, partitions: int) -> dict[int, int]:
        found = {}
        for p in range(partitions):
            offset = self.consumer.committed(
                KafkaTopicPartition(self.topic, p), timeout_ms=int(TIMEOUT * 1000)
            )
            if offset is not None and offset >= 0:
                found[p] = offset
        return found

    def close(self) -> None:
        self.consumer.close(autocommit=False)


CLIENTS: dict[str, Callable[..., Member]] = {
    "confluent-kafka": ConfluentMember,
    "kafka-python": KafkaPythonMember,
}


def run_until(
    condition: Callable[[], bool],
    members: list[tuple[Member, list[Record]]],
    timeout: float = TIMEOUT,
    *,
    commit: bool = True,
    max_records: int = 100,
) -> None:
    """Polls every member in turn (each one's records appended to its list and, if `commit`,
    committed before the next poll) until `condition` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout}s")
        for member, received in members:
            records = member.poll(max_records)
            if commit:
                member.commit(records)
            received.extend(records)


def drain(members: list[tuple[Member, list[Record]]], seconds: float = 0.5) -> None:
    """A little more polling: anything delivered twice would show up here."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for member, received in members:
            records = member.poll()
            member.commit(records)
            received.extend(records)


# -- rebalances --------------------------------------------------------------------------------


@pytest.mark.parametrize("client", list(CLIENTS))
def test_partitions_split_and_move_back(broker: BrokerProcess, client: str) -> None:
    make = CLIENTS[client]
    topic = group = f"split-{client}"
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    produced = produce(broker.bootstrap, topic, partitions, 0, 10)
    got_first: list[Record] = []
    got_second: list[Record] = []
    first = make(broker.bootstrap, group, topic)
    second: Member | None = None
    try:
        run_until(lambda: len(got_first) >= 40, [(first, got_first)])
        assert first.assignment == {0, 1, 2, 3}

        second = joined = make(broker.bootstrap, group, topic)
        both = [(first, got_first), (joined, got_second)]
        run_until(lambda: len(first.assignment) == 2 and len(joined.assignment) == 2, both)
        assert first.assignment | joined.assignment == {0, 1, 2, 3}
        assert not first.assignment & joined.assignment
        print(f"{client}: split {sorted(first.assignment)} / {sorted(joined.assignment)}")

        produced += produce(broker.bootstrap, topic, partitions, 10, 10)
        run_until(lambda: len(got_first) + len(got_second) >= 80, both)
        assert {p for p, o, _ in got_first if o >= 10} <= first.assignment
        assert {p for p, o, _ in got_second if o >= 10} == joined.assignment

        joined.close()
        second = None
        run_until(lambda: first.assignment == {0, 1, 2, 3}, [(first, got_first)])
        produced += produce(broker.bootstrap, topic, partitions, 20, 10)
        run_until(lambda: len(got_first) + len(got_second) >= 120, [(first, got_first)])
        drain([(first, got_first)])

        everything = sorted(got_first + got_second)
        assert len(everything) == len(set(everything)), "a record was delivered twice"
        assert everything == sorted(produced)
        assert first.committed(partitions) == dict.fromkeys(range(partitions), 30)
    finally:
        if second is not None:
            second.close()
        first.close()


# -- restarts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
@pytest.mark.parametrize("client", list(CLIENTS))
def test_resume_from_committed_offsets_after_a_restart(
    tmp_path: Path, client: str, crash: bool
) -> None:
    make = CLIENTS[client]
    topic = group = "resume"
    partitions, per_partition = 2, 20
    broker = BrokerProcess(tmp_path / "data", SETTINGS).start()
    try:
        create_topic(broker.bootstrap, topic, partitions)
        produce(broker.bootstrap, topic, partitions, 0, per_partition)
        read: list[Record] = []
        # A short session: the member is closed only after the restart, and its LeaveGroup
        # may not make it (librdkafka does not retry it), so the group that the broker
        # restored keeps it until its session expires; the next member's join waits for that.
        member = make(broker.bootstrap, group, topic, session_ms=1500)
        try:
            run_until(
                lambda: len(read) >= 10 and len({p for p, _, _ in read}) == partitions,
                [(member, read)],
                commit=False,
                max_records=3,
            )
            member.commit(read)
            committed = positions_after(read)
            # read on past the commit: these may be read again, nothing else may
            done = len(read)
            run_until(lambda: len(read) >= done + 6, [(member, read)], commit=False, max_records=3)
            broker.restart(clean=not crash)
        finally:
            member.close()
        print(f"{client}: committed {committed}, read {len(read)} before the restart")

        resumed: list[Record] = []
        member = make(broker.bootstrap, group, topic)
        try:
            assert member.committed(partitions) == committed
            expected = [
                (p, o, f"{topic}-{p}-{o}")
                for p in range(partitions)
                for o in range(committed.get(p, 0), per_partition)
            ]
            run_until(lambda: len(resumed) >= len(expected), [(member, resumed)])
            drain([(member, resumed)])
        finally:
            member.close()
        assert sorted(resumed) == expected  # nothing lost, nothing before the commit again
        assert len(resumed) == len(set(resumed))
    finally:
        broker.kill()


# -- the initial rebalance delay ---------------------------------------------------------------


def test_initial_rebalance_delay(tmp_path: Path) -> None:
    delay = 1.0
    broker = BrokerProcess(
        tmp_path / "data",
        {**SETTINGS, "group.initial.rebalance.delay.ms": str(int(delay * 1000))},
    ).start()
    try:
        create_topic(broker.bootstrap, "delayed", 4)
        started = time.monotonic()
        alone = ConfluentMember(broker.bootstrap, "alone", "delayed")
        try:
            run_until(lambda: bool(alone.assignment), [(alone, [])])
            waited = time.monotonic() - started
        finally:
            alone.close()
        print(f"a single member was assigned after {waited:.2f}s (delay {delay}s)")
        assert delay - 0.1 <= waited < delay + 2, waited
        assert alone.assignments == [{0, 1, 2, 3}]

        # a second member arriving during the delay extends it and shares the first generation
        started = time.monotonic()
        first = ConfluentMember(broker.bootstrap, "pair", "delayed")
        second: Member | None = None
        try:
            run_until(lambda: time.monotonic() - started > 0.4, [(first, [])])
            second = ConfluentMember(broker.bootstrap, "pair", "delayed")
            members: list[tuple[Member, list[Record]]] = [(first, []), (second, [])]
            run_until(lambda: bool(first.assignment) and bool(second.assignment), members)
            waited = time.monotonic() - started
            drain(members, 0.5)
        finally:
            if second is not None:
                second.close()
            first.close()
        print(f"two members were assigned after {waited:.2f}s")
        assert 0.4 + delay - 0.1 <= waited < 0.4 + delay + 2, waited
        assert second is not None
        assert len(first.assignments) == len(second.assignments) == 1  # one generation
        assert first.assignments[0] | second.assignments[0] == {0, 1, 2, 3}
        assert len(first.assignments[0]) == len(second.assignments[0]) == 2
    finally:
        broker.kill()


# -- administration ----------------------------------------------------------------------------


def test_admin_list_describe_offsets_and_delete(broker: BrokerProcess) -> None:
    topic = group = "admin-groups"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 2, 0, 5)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    member = ConfluentMember(broker.bootstrap, group, topic, extra={"client.id": "admin-test"})
    read: list[Record] = []
    try:
        run_until(lambda: len(read) >= 10, [(member, read)])
        listed = admin.list_consumer_groups(request_timeout=TIMEOUT).result(TIMEOUT)
        states = {g.group_id: g.state.name for g in listed.valid}
        assert states.get(group) == "STABLE", states
        description = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert description.state.name == "STABLE"
        assert description.partition_assignor == "range"
        (described,) = description.members
        assert described.client_id == "admin-test"
        assert {tp.partition for tp in described.assignment.topic_partitions} == {0, 1}
        request = [ConsumerGroupTopicPartitions(group)]
        offsets = admin.list_consumer_group_offsets(request)[group].result(TIMEOUT)
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 5, 1: 5}
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()
    deadline = time.monotonic() + TIMEOUT
    while True:  # the group empties through a rebalance after the member left
        description = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        if description.state.name == "EMPTY" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert description.state.name == "EMPTY"
    admin.delete_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
    listed = admin.list_consumer_groups(request_timeout=TIMEOUT).result(TIMEOUT)
    assert group not in {g.group_id for g in listed.valid}
    with pytest.raises(KafkaException) as missing:
        admin.delete_consumer_groups([group], request_timeout=TIMEOUT)[group].result(TIMEOUT)
    assert missing.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


# -- aiokafka ----------------------------------------------------------------------------------


async def test_aiokafka_subscribe_commit_and_resume(broker: BrokerProcess) -> None:
    topic = group = "aiokafka-group"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 2, 0, 10)

    def consumer() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            heartbeat_interval_ms=200,
            session_timeout_ms=6000,
        )

    async def read(member: AIOKafkaConsumer, count: int) -> list[Record]:
        got: list[Record] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < count and time.monotonic() < deadline:
            batches = await member.getmany(timeout_ms=200, max_records=count - len(got))
            got += [
                (m.partition, m.offset, m.value.decode()) for ms in batches.values() for m in ms
            ]
        return got

    first = consumer()
    await asyncio.wait_for(first.start(), TIMEOUT)
    try:
        got = await read(first, 12)
        assert len(got) == 12
        assert first.assignment() == {AioTopicPartition(topic, 0), AioTopicPartition(topic, 1)}
        committed = positions_after(got)
        await asyncio.wait_for(
            first.commit({AioTopicPartition(topic, p): o for p, o in committed.items()}), TIMEOUT
        )
        for p, o in committed.items():
            assert await first.committed(AioTopicPartition(topic, p)) == o
    finally:
        await asyncio.wait_for(first.stop(), TIMEOUT)

    second = consumer()
    await asyncio.wait_for(second.start(), TIMEOUT)
    try:
        expected = sorted(
            (p, o, f"{topic}-{p}-{o}") for p in range(2) for o in range(committed.get(p, 0), 10)
        )
        resumed = await read(second, len(expected))
        more = await second.getmany(timeout_ms=300)
        assert sorted(resumed) == expected and not any(more.values())
        await asyncio.wait_for(second.commit(), TIMEOUT)  # the consumed positions
        for p in range(2):
            assert await second.committed(AioTopicPartition(topic, p)) == 10
    finally:
        await asyncio.wait_for(second.stop(), TIMEOUT)
