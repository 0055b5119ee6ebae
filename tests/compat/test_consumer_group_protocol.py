"""The consumer group protocol (KIP-848) through confluent-kafka with group.protocol=consumer:

- three consumers join one after another and the first leaves: every record is consumed
  exactly once and the assignments never overlap;
- the group survives a broker restart (its records in __consumer_offsets are replayed): the
  member carries on at its epoch, without a rebalance, and the admin client describes it
  (ConsumerGroupDescribe) and lists it as a consumer group;
- a consume-transform-produce transaction commits the consumer's offsets with its group
  metadata (TxnOffsetCommit with member id and member epoch, KIP-447);
- a regular expression subscription (SubscribedTopicRegex), and a static member that restarts
  (leaving with epoch -2) and gets its partition back without a rebalance;
- UNSUPPORTED_ASSIGNOR reaches the application (librdkafka makes it fatal);
- a mixed group: a classic group converted when a consumer-protocol member joins, then a
  classic member (cooperative-sticky) joining it, all sharing the partitions, and converted
  back when the consumer-protocol member leaves;
- a group's own consumer.heartbeat.interval.ms (a group config set and described through
  confluent-kafka's AdminClient) is the interval its member heartbeats at, not the broker's.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._resource import ResourceType

from tests.support.broker import BrokerProcess
from tests.support.clients import committed_offset, consume_all, create_topic, position

pytestmark = pytest.mark.compat

TIMEOUT = 30.0
SETTINGS = {
    # short sessions and heartbeats so that departures show within the test's bounds
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "300",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("kip848") / "data", SETTINGS).start()
    try:
        yield process
    finally:
        process.kill()


def consumer(broker: BrokerProcess, group: str, **extra: object) -> Consumer:
    config: dict[str, object] = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    config.update(extra)
    return Consumer(config)


def produce(broker: BrokerProcess, topic: str, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        producer.produce(topic, f"{i}".encode(), partition=i % partitions)
    assert producer.flush(TIMEOUT) == 0


def owned(c: Consumer) -> set[int]:
    return {p.partition for p in c.assignment()}


def test_members_join_and_leave_and_each_record_is_consumed_once(broker: BrokerProcess) -> None:
    topic, group, partitions, count = "kip848-once", "kip848-once", 6, 600
    create_topic(broker.bootstrap, topic, partitions)
    produce(broker, topic, count, partitions)
    seen: list[bytes] = []
    members: list[Consumer] = []

    def poll_all(rounds: int) -> None:
        for _ in range(rounds):
            for c in members:
                for message in c.consume(50, 0.05):
                    if message.error() is None:
                        value = message.value()
                        assert value is not None
                        seen.append(value)
                        # commit as we go, so that a moved partition resumes where it was left
                        c.commit(message=message, asynchronous=False)
            sets = [owned(c) for c in members]
            assert sum(len(s) for s in sets) == len(set().union(*sets)), sets  # no overlap

    try:
        for _ in range(3):
            members.append(consumer(broker, group))
            members[-1].subscribe([topic])
            poll_all(15)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not all(len(owned(c)) == 2 for c in members):
            poll_all(1)
        assert [len(owned(c)) for c in members] == [2, 2, 2]
        members.pop(0).close()  # leaves with epoch -1: its partitions move on
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and (
            len(seen) < count or sum(len(owned(c)) for c in members) < partitions
        ):
            poll_all(1)
        assert sorted(owned(members[0]) | owned(members[1])) == list(range(partitions))
        assert len(seen) == count and len(set(seen)) == count
    finally:
        for c in members:
            c.close()


def test_group_survives_a_broker_restart(broker: BrokerProcess) -> None:
    topic, group = "kip848-restart", "kip848-restart"
    create_topic(broker.bootstrap, topic, 2)
    produce(broker, topic, 10, 2)
    member = consumer(broker, group)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        member.subscribe([topic])
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and got < 10:
            got += sum(1 for m in member.consume(10, 0.2) if m.error() is None)
        assert got == 10
        before = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert before.type.name == "CONSUMER" and before.state.name == "STABLE"
        broker.restart()
        produce(broker, topic, 10, 2)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and got < 20:
            got += sum(1 for m in member.consume(10, 0.2) if m.error() is None)
        assert got == 20
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        after = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        [described] = after.members
        assert sorted(p.partition for p in described.assignment.topic_partitions) == [0, 1]
        epochs = [line for line in broker.log().splitlines() if f"group {group}: epoch" in line]
        assert len(epochs) == 1, epochs  # one epoch bump (the join): no rebalance at restart
        listed = admin.list_consumer_groups().result(TIMEOUT)
        kinds = {g.group_id: g.type.name for g in listed.valid}
        assert kinds[group] == "CONSUMER"
    finally:
        member.close()


def test_consume_transform_produce_commits_offsets_with_the_member_epoch(
    broker: BrokerProcess,
) -> None:
    source, sink, group = "kip848-src", "kip848-sink", "kip848-eos"
    create_topic(broker.bootstrap, source, 1)
    create_topic(broker.bootstrap, sink, 1)
    produce(broker, source, 5, 1)
    member = consumer(broker, group, **{"isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "kip848-tx"})
    try:
        member.subscribe([source])
        producer.init_transactions(TIMEOUT)
        batch: list[Message] = []
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and len(batch) < 5:
            batch += [m for m in member.consume(10, 0.2) if m.error() is None]
        assert len(batch) == 5
        producer.begin_transaction()
        for message in batch:
            producer.produce(sink, (message.value() or b"") + b"!")
        _, last = position(batch[-1])
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, last + 1)], member.consumer_group_metadata(), TIMEOUT
        )
        producer.commit_transaction(TIMEOUT)
        assert committed_offset(broker.bootstrap, group, source) == last + 1
        records = consume_all(broker.bootstrap, sink, 1, 5, timeout=TIMEOUT)
        assert [v for _, v in records[0]] == [f"{i}!".encode() for i in range(5)]
    finally:
        member.close()


def test_unsupported_assignor_is_reported(broker: BrokerProcess) -> None:
    topic = "kip848-assignor"
    create_topic(broker.bootstrap, topic, 1)
    member = consumer(broker, "kip848-assignor", **{"group.remote.assignor": "sticky"})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        error = None
        while time.monotonic() < deadline and error is None:
            for message in member.consume(1, 0.2):
                if message.error() is not None:
                    error = message.error()
        assert error is not None
        # librdkafka makes UNSUPPORTED_ASSIGNOR a fatal consumer error, naming it
        assert error.code() == KafkaError._FATAL, error
        assert "assignor" in error.str() and "not supported" in error.str()
    finally:
        member.close()


def test_regex_subscription_and_static_member_rejoin(broker: BrokerProcess) -> None:
    for topic in ("kip848-re-a", "kip848-re-b", "kip848-other"):
        create_topic(broker.bootstrap, topic, 2)
    by_regex = consumer(broker, "kip848-regex")
    try:
        by_regex.subscribe(["^kip848-re-.*"])  # librdkafka sends it as SubscribedTopicRegex
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and len(by_regex.assignment()) < 4:
            by_regex.poll(0.1)
        assert sorted((p.topic, p.partition) for p in by_regex.assignment()) == [
            ("kip848-re-a", 0), ("kip848-re-a", 1), ("kip848-re-b", 0), ("kip848-re-b", 1),
        ]  # fmt: skip
    finally:
        by_regex.close()
    group, topic = "kip848-static", "kip848-re-a"
    first = consumer(broker, group, **{"group.instance.id": "i1"})
    second = consumer(broker, group, **{"group.instance.id": "i2"})
    try:
        first.subscribe([topic])
        second.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not (owned(first) and owned(second)):
            first.poll(0.1)
            second.poll(0.1)
        kept = owned(first)
        assert len(kept) == 1 and owned(second) == {0, 1} - kept
        first.close()  # a static member leaves with epoch -2: its partition waits for it
        first = consumer(broker, group, **{"group.instance.id": "i1"})
        first.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not owned(first):
            first.poll(0.1)
            second.poll(0.1)
        assert owned(first) == kept and owned(second) == {0, 1} - kept
        epochs = [line for line in broker.log().splitlines() if f"group {group}: epoch" in line]
        assert len(epochs) == 2, epochs  # the two joins; the restart moved nothing
    finally:
        first.close()
        second.close()


def test_mixed_group_of_classic_and_consumer_members(broker: BrokerProcess) -> None:
    topic, group = "kip848-mixed", "kip848-mixed"
    create_topic(broker.bootstrap, topic, 6)
    classic_config = {
        "group.protocol": "classic", "heartbeat.interval.ms": 300, "session.timeout.ms": 6000,
        "partition.assignment.strategy": "cooperative-sticky",
    }  # fmt: skip
    members = [consumer(broker, group, **classic_config)]
    members[0].subscribe([topic])

    def settle(expected: list[int]) -> list[set[int]]:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for c in members:
                c.poll(0.05)
            sets = [owned(c) for c in members]
            if sorted(len(s) for s in sets) == expected and set().union(*sets) == set(range(6)):
                return sets
        raise AssertionError([owned(c) for c in members])

    try:
        settle([6])
        # a consumer-protocol member joins: the classic group is converted, not refused
        members.append(consumer(broker, group))
        members[-1].subscribe([topic])
        settle([3, 3])
        assert "converted to the consumer protocol" in broker.log()
        # a classic member joins the consumer-protocol group: the broker assigns it
        members.append(consumer(broker, group, **classic_config))
        members[-1].subscribe([topic])
        settle([2, 2, 2])
        # the consumer-protocol member leaves: only classic members are left and the group
        # becomes a classic group again, which they share after rejoining
        members.pop(1).close()
        settle([3, 3])
        assert "converted to a classic group" in broker.log()
    finally:
        for c in members:
            c.close()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))


def test_a_member_heartbeats_at_its_groups_own_interval(broker: BrokerProcess) -> None:
    topic, group = "kip848-group-config", "kip848-group-config"
    create_topic(broker.bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # the broker's interval is 300 ms (SETTINGS); this group's is 1.5 s
    change = ConfigEntry(
        "consumer.heartbeat.interval.ms", "1500", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[change])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    described = ConfigResource(ResourceType.GROUP, group)
    shown = admin.describe_configs([described])[described].result(TIMEOUT)
    interval = shown["consumer.heartbeat.interval.ms"]
    assert (interval.value, ConfigSource(interval.source)) == ("1500", ConfigSource.GROUP_CONFIG)
    # librdkafka's debug log tells when it sends each ConsumerGroupHeartbeat
    lines = _Lines()
    logger = logging.getLogger("kip848-group-config")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(lines)
    member = consumer(broker, group, debug="cgrp", logger=logger)
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and owned(member) != {0}:
            member.poll(0.1)
        assert owned(member) == {0}
        steady = time.monotonic()
        while time.monotonic() < steady + 4:
            member.poll(0.1)
    finally:
        member.close()
        logger.removeHandler(lines)
    sent = [
        at
        for at, line in lines.lines
        if "ConsumerGroupHeartbeat of member id" in line and steady <= at < steady + 4
    ]
    # at the broker's 300 ms there would be some 13 in these 4 s, gaps of 0.3 s; a loaded
    # machine only spaces them further
    assert 1 <= len(sent) <= 4, sent
    assert all(later - earlier >= 1.2 for earlier, later in itertools.pairwise(sent))
