"""Transactions across a 3-broker cluster, through real clients. A transactional id's
coordinator is the leader of its __transaction_state partition (created by the first
FindCoordinator, 3 replicas, min.insync.replicas 2); a transaction's partitions are led by the
three brokers, so each leader asks the coordinator before the transaction's first batch, and
the coordinator's markers go to the other brokers.

- confluent-kafka, kafka-python and aiokafka commit and abort transactions over partitions of
  every broker: read_committed readers get each committed record once, in order, and no
  aborted one.
- The coordinator of confluent-kafka's and lockgate's transactional ids is killed (kill -9)
  mid-run: the clients carry on with the next coordinator as an application does (abort what
  failed, or start a new producer instance); every committed transaction is read once, no
  aborted one, and a transaction whose outcome the client lost is all there or all gone."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException, Producer

from lockgate.client.errors import KafkaError as LockgateError
from lockgate.client.producer import Producer as LockgateProducer
from lockgate.coordinator.txn.log import partition_for
from tests.support.clients import consume_all
from tests.support.cluster import BrokerCluster
from tests.support.txn_clients import PRODUCERS, Plan, as_log, records

TRANSACTION_LOG = "__transaction_state"
LOG_PARTITIONS = 50  # transaction.state.log.num.partitions' default
TRANSACTIONS = 30
PER_TRANSACTION = 6  # two records on each partition
TIMEOUT = 30.0

# transaction number → "committed", "aborted" or "unknown" (the client lost track of it)
Outcomes = dict[int, str]


def coordinator_of(cluster: BrokerCluster, transactional_id: str) -> int:
    index = partition_for(transactional_id, LOG_PARTITIONS)
    return cluster.partitions(TRANSACTION_LOG)[index].leader


def read_committed(cluster: BrokerCluster, topic: str, count: int) -> dict[int, list[str]]:
    received = consume_all(cluster.bootstrap, topic, 3, count)  # (librdkafka: read_committed)
    return {p: [(v or b"").decode() for _o, v in found] for p, found in received.items()}


@pytest.mark.parametrize("client", list(PRODUCERS))
def test_transactions_over_every_broker(cluster: BrokerCluster, client: str) -> None:
    topic = f"txn-{client}"
    cluster.create_topic(topic, partitions=3, replication=3)
    assert len({p.leader for p in cluster.partitions(topic).values()}) == 3
    plan: Plan = [(records(f"{client}-{n}", (topic,), 2), n % 3 != 2) for n in range(6)]
    PRODUCERS[client](cluster.bootstrap, f"over-every-broker-{client}", plan)
    committed = [record for batch, commit in plan if commit for record in batch]
    expected = {p: values for (_t, p), values in as_log(committed).items()}
    assert read_committed(cluster, topic, len(committed)) == expected


# -- the coordinator killed mid-run ------------------------------------------------------------


def values_of(transactional_id: str, number: int) -> list[str]:
    return [f"{transactional_id}-{number}-{i}" for i in range(PER_TRANSACTION)]


def confluent_writer(bootstrap: str, transactional_id: str, topic: str, outcomes: Outcomes) -> None:
    config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
              "transaction.timeout.ms": 10_000, "log_level": 3}  # fmt: skip
    producer: Producer | None = None
    for number in range(TRANSACTIONS):
        commit = number % 4 != 3
        try:
            if producer is None:
                producer = Producer(config)
                producer.init_transactions(TIMEOUT)
            producer.begin_transaction()
            for i, value in enumerate(values_of(transactional_id, number)):
                producer.produce(topic, value.encode(), partition=i % 3)
            if commit:
                producer.commit_transaction(TIMEOUT)
            else:
                producer.abort_transaction(TIMEOUT)
            outcomes[number] = "committed" if commit else "aborted"
        except KafkaException:
            outcomes[number] = "unknown"
            assert producer is not None
            try:
                producer.abort_transaction(TIMEOUT)
                outcomes[number] = "aborted"
            except KafkaException:  # a new instance fences this one and ends its transaction
                producer = None


def lockgate_writer(bootstrap: str, transactional_id: str, topic: str, outcomes: Outcomes) -> None:
    async def run() -> None:
        producer: LockgateProducer | None = None
        for number in range(TRANSACTIONS):
            commit = number % 4 != 3
            try:
                if producer is None:
                    producer = LockgateProducer(
                        bootstrap, transactional_id=transactional_id,
                        transaction_timeout_ms=10_000, request_timeout_ms=10_000,
                    )  # fmt: skip
                    await producer.start()
                    await producer.init_transactions(timeout_ms=int(TIMEOUT * 1000))
                producer.begin_transaction()
                for i, value in enumerate(values_of(transactional_id, number)):
                    await producer.send(topic, value.encode(), partition=i % 3)
                if commit:
                    await producer.commit_transaction(timeout_ms=int(TIMEOUT * 1000))
                else:
                    await producer.abort_transaction(timeout_ms=int(TIMEOUT * 1000))
                outcomes[number] = "committed" if commit else "aborted"
            except LockgateError:
                outcomes[number] = "unknown"
                assert producer is not None
                try:
                    await producer.abort_transaction(timeout_ms=int(TIMEOUT * 1000))
                    outcomes[number] = "aborted"
                except LockgateError:
                    await producer.close()
                    producer = None
        if producer is not None:
            await producer.close()

    asyncio.run(run())


Writer = Callable[[str, str, str, Outcomes], None]
WRITERS: dict[str, Writer] = {"confluent-kafka": confluent_writer, "lockgate": lockgate_writer}


@pytest.mark.parametrize("client", list(WRITERS))
def test_transactions_outlive_their_coordinator(cluster: BrokerCluster, client: str) -> None:
    topic, transactional_id = f"txn-failover-{client}", f"failover-{client}"
    cluster.create_topic(topic, partitions=3, replication=3)
    outcomes: Outcomes = {}
    failure: list[BaseException] = []

    def write() -> None:
        try:
            WRITERS[client](cluster.bootstrap, transactional_id, topic, outcomes)
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)

    writer = threading.Thread(target=write, name=f"writer-{client}")
    writer.start()
    deadline = time.monotonic() + 90
    while len(outcomes) < TRANSACTIONS // 3 and writer.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    victim = coordinator_of(cluster, transactional_id)
    cluster.brokers[victim].kill()
    ended_before_the_kill = len(outcomes)
    writer.join(240)
    try:
        assert not writer.is_alive(), "the writer did not finish"
        assert not failure, failure
        assert len(outcomes) == TRANSACTIONS and ended_before_the_kill < TRANSACTIONS - 4
        successor = coordinator_of(cluster, transactional_id)
        assert successor != victim
        assert "loaded in epoch" in cluster.brokers[successor].log()
        # the writer recovered: its last transactions committed with the next coordinator
        assert [outcomes[n] for n in range(TRANSACTIONS - 4, TRANSACTIONS) if n % 4 != 3] == [
            "committed"
        ] * 3
        committed = [n for n, outcome in outcomes.items() if outcome == "committed"]
        read = read_committed(cluster, topic, len(committed) * PER_TRANSACTION)
        everything = [value for values in read.values() for value in values]
        assert len(everything) == len(set(everything)), "a record read twice"
        for values in read.values():  # each partition in the order of writing
            order = [tuple(int(part) for part in v.rsplit("-", 2)[1:]) for v in values]
            assert order == sorted(order)
        seen = set(everything)
        for number, outcome in sorted(outcomes.items()):
            values = values_of(transactional_id, number)
            visible = [value in seen for value in values]
            if outcome == "committed":
                assert all(visible), f"transaction {number} committed, not all read"
            elif outcome == "aborted":
                assert not any(visible), f"transaction {number} aborted, yet read"
            else:
                assert all(visible) or not any(visible), f"transaction {number} torn"
    finally:
        cluster.brokers[victim].start()
        cluster.wait_full_isr(topic)
