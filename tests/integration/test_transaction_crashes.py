"""A broker killed in the middle of completing a transaction finishes the decision when it
comes back, with no torn transaction: every partition of the transaction shows all of its
records to read_committed consumers (commit) or none (abort), no partition is left with an
open transaction, and Describe/ListTransactions report the Complete state.

The kill has to land at exact points of the coordinator's work, which cannot be timed from
outside. The broker's test hook LOCKGATE_TEST_CRASH_POINT makes it die there with
os._exit(137) (no flush, no close: a kill -9):
- after-prepare: PrepareCommit/PrepareAbort is durable in __transaction_state, no marker yet;
- between-markers: the first partition's marker is durable, the other partitions have none;
- after-markers: every marker is durable, the Complete state is not logged.
The restart runs without the variable."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, TransactionState
from kafka.errors import KafkaError as KafkaPythonError

from tests.support.broker import BrokerProcess

CRASH_POINT_VARIABLE = "LOCKGATE_TEST_CRASH_POINT"
KILLED = 137
TOPICS = ("crash-a", "crash-b")
PARTITIONS = 3
PER_PARTITION = 5
TIMEOUT = 30.0

Log = dict[tuple[str, int], list[str]]


@pytest.fixture
def crashing_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "data", env={CRASH_POINT_VARIABLE: request.param})
    broker.start()
    try:
        yield broker
    finally:
        broker.kill()


def expected_records(tag: str) -> Log:
    return {
        (topic, partition): [f"{tag}-{topic}-{partition}-{i}" for i in range(PER_PARTITION)]
        for topic in TOPICS
        for partition in range(PARTITIONS)
    }


def run_transaction_into_the_crash(broker: BrokerProcess, tag: str, commit: bool) -> str:
    """Writes one transaction over 2 topics × 3 partitions and ends it; the broker dies while
    completing it. Returns how the client saw the end (the answer to EndTxn is sent once the
    Prepare state is durable, so it may or may not have arrived before the crash)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in TOPICS]).values():
        future.result(TIMEOUT)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": tag,
            "linger.ms": 5,
            "reconnect.backoff.max.ms": 1000,
        }
    )
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for (topic, partition), values in expected_records(tag).items():
        for value in values:
            producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(TIMEOUT) == 0
    try:
        if commit:
            producer.commit_transaction(3)
        else:
            producer.abort_transaction(3)
        seen = "acknowledged"
    except KafkaException as exc:
        seen = f"failed: {exc.args[0]}"
    # The broker dies without any help from the client.
    assert broker.wait_exit(TIMEOUT) == KILLED, broker.log()
    del producer  # gone before the restart: recovery must not depend on a client retry
    return seen


def read(bootstrap: str, isolation: str) -> Log:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",  # required by the client; assign() uses no group
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    wanted = [(t, p) for t in TOPICS for p in range(PARTITIONS)]
    out: Log = {key: [] for key in wanted}
    try:
        consumer.assign([TopicPartition(t, p, -2) for t, p in wanted])
        at_end: set[tuple[str, int]] = set()
        deadline = time.monotonic() + TIMEOUT
        while len(at_end) < len(wanted):
            assert time.monotonic() < deadline, f"read only {at_end} to the end"
            message = consumer.poll(0.5)
            if message is None:
                continue
            topic, partition, value = message.topic(), message.partition(), message.value()
            assert topic is not None and partition is not None
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add((topic, partition))
                continue
            assert value is not None
            out[(topic, partition)].append(value.decode())
    finally:
        consumer.close()
    return out


def end_offsets(bootstrap: str, isolation: str) -> dict[tuple[str, int], int]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
    )
    try:
        wanted = [KafkaTopicPartition(t, p) for t in TOPICS for p in range(PARTITIONS)]
        return {(tp.topic, tp.partition): int(o) for tp, o in consumer.end_offsets(wanted).items()}
    finally:
        consumer.close()


def wait_for_state(bootstrap: str, transactional_id: str, wanted: TransactionState) -> None:
    """Polls DescribeTransactions until the resumed completion has logged `wanted`, then checks
    that ListTransactions agrees."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        deadline = time.monotonic() + TIMEOUT
        state = None
        while time.monotonic() < deadline:
            try:
                description = admin.describe_transactions([transactional_id])[transactional_id]
            except KafkaPythonError as exc:  # COORDINATOR_LOAD_IN_PROGRESS while replaying
                if not exc.retriable:
                    raise
                time.sleep(0.1)
                continue
            state = description.state
            if state == wanted:
                break
            time.sleep(0.1)
        assert state == wanted, f"{transactional_id} is {state}, not {wanted}"
        assert description.topic_partitions == set()  # a completed transaction holds none
        listings = [
            listing
            for per_broker in admin.list_transactions().values()
            for listing in per_broker
            if listing.transactional_id == transactional_id
        ]
        assert [listing.state for listing in listings] == [wanted]
    finally:
        admin.close()


CASES = [
    pytest.param("after-prepare", True, id="commit-after-prepare"),
    pytest.param("between-markers", True, id="commit-between-markers"),
    pytest.param("after-markers", True, id="commit-after-markers"),
    pytest.param("between-markers", False, id="abort-between-markers"),
]


@pytest.mark.parametrize(("crashing_broker", "commit"), CASES, indirect=["crashing_broker"])
def test_crash_while_completing_a_transaction(crashing_broker: BrokerProcess, commit: bool) -> None:
    broker = crashing_broker
    point = broker.env[CRASH_POINT_VARIABLE]
    tag = f"{'commit' if commit else 'abort'}-{point}"
    written = expected_records(tag)

    seen_by_client = run_transaction_into_the_crash(broker, tag, commit)
    assert f"test hook: crashing at '{point}'" in broker.log()

    broker.env = {}
    broker.start()

    wait_for_state(
        broker.bootstrap,
        tag,
        TransactionState.COMPLETE_COMMIT if commit else TransactionState.COMPLETE_ABORT,
    )
    assert "resuming 1" in broker.log(), broker.log()  # the broker finished it, not a client
    # All of it or none of it, on every partition; the data itself survived the crash.
    nothing: Log = {key: [] for key in written}
    assert read(broker.bootstrap, "read_committed") == (written if commit else nothing), (
        seen_by_client
    )
    assert read(broker.bootstrap, "read_uncommitted") == written
    # No partition is left with an open transaction: the last stable offset is the end.
    assert end_offsets(broker.bootstrap, "read_committed") == end_offsets(
        broker.bootstrap, "read_uncommitted"
    )
