"""Issue 22, pain 7 against a 3-broker lockgate cluster: the transaction coordinator changes
in the middle of a transaction, and lockgate's producer finds the new one by itself.

- The broker coordinating the transactional id (the leader of its __transaction_state
  partition) is killed (kill -9) with records already written to partitions led by the two
  other brokers; more records follow (to every partition, the dead broker's ones included once
  their leadership moved) and the commit goes to the new coordinator, which loaded the open
  transaction from its replica of the log. Under transaction version 2 and the classic
  protocol (AddPartitionsToTxn for the partitions added after the kill).
- The same kill takes the coordinator of a confluent-kafka (librdkafka) producer's open
  transaction too: it also looks the coordinator up again and commits.

A read_committed reader gets every record of the committed transactions once, in order, and
a following transaction commits as usual. The coordinator moving while the old broker stays up
(NOT_COORDINATOR) is tests/integration/cluster/test_txn_pains_coordinator.py; the whole-run
versions (coordinator killed between and during transactions, confluent-kafka too) are
tests/integration/cluster/test_transactions.py and the cluster soak's kill-coordinator and
pause faults (tests/faults/cluster_run.py)."""

from __future__ import annotations

import asyncio
import uuid

from confluent_kafka import Producer as ConfluentProducer

from lockgate.client.producer import Producer
from lockgate.coordinator.txn.log import partition_for
from tests.integration.cluster.test_transactions import (
    LOG_PARTITIONS,
    TRANSACTION_LOG,
    coordinator_of,
    read_committed,
)
from tests.support.cluster import BrokerCluster

PER_PARTITION = 2


async def send_all(producer: Producer, topic: str, partitions: list[int], tag: str) -> list[str]:
    """PER_PARTITION records to each partition, each acknowledged; returns their values."""
    values = [f"{tag}-{p}-{i}" for p in partitions for i in range(PER_PARTITION)]
    futures = [
        await producer.send(topic, value.encode(), partition=int(value.split("-")[-2]))
        for value in values
    ]
    await asyncio.gather(*futures)
    return values


def expected_log(values: list[str]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for value in values:
        found.setdefault(int(value.split("-")[-2]), []).append(value)
    return found


async def wait_for(cluster: BrokerCluster, condition: object, what: str) -> None:
    await asyncio.to_thread(cluster.wait_for, condition, what, 30)  # type: ignore[arg-type]


async def new_producer(cluster: BrokerCluster, transactional_id: str, version: int) -> Producer:
    producer = Producer(cluster.bootstrap, transactional_id=transactional_id,
                        transaction_version=version, linger_ms=0, retry_backoff_ms=100,
                        request_timeout_ms=5_000, max_block_ms=30_000)  # fmt: skip
    await producer.start()
    await producer.init_transactions()
    return producer


def others(cluster: BrokerCluster, topic: str, node: int) -> list[int]:
    return sorted(p for p, info in cluster.partitions(topic).items() if info.leader != node)


def id_coordinated_by(cluster: BrokerCluster, node: int, prefix: str) -> str:
    """A transactional id whose __transaction_state partition `node` leads."""
    leaders = {i: info.leader for i, info in cluster.partitions(TRANSACTION_LOG).items()}
    for number in range(10_000):
        candidate = f"{prefix}-{number}"
        if leaders[partition_for(candidate, LOG_PARTITIONS)] == node:
            return candidate
    raise AssertionError(f"no id coordinated by broker {node}")


class LibrdkafkaTransaction:
    """librdkafka's side of the kill: the same steps as lockgate's producer, in a thread."""

    def __init__(self, cluster: BrokerCluster, topic: str, transactional_id: str) -> None:
        self.topic = topic
        self.producer = ConfluentProducer({"bootstrap.servers": cluster.bootstrap,
                                           "transactional.id": transactional_id,
                                           "linger.ms": 0, "log_level": 0})  # fmt: skip
        self.producer.init_transactions(30)
        self.producer.begin_transaction()

    def send(self, partitions: list[int], tag: str) -> list[str]:
        values = [f"{tag}-{p}-{i}" for p in partitions for i in range(PER_PARTITION)]
        for value in values:
            self.producer.produce(self.topic, value.encode(), partition=int(value.split("-")[-2]))
        assert self.producer.flush(30) == 0
        return values

    def finish(self, partitions: list[int], tag: str) -> list[str]:
        values = self.send(partitions, tag)
        self.producer.commit_transaction(30)
        return values


def run_transactions(
    producer: Producer, topic: str, elsewhere: list[int], killed: asyncio.Event, tag: str
) -> tuple[asyncio.Event, asyncio.Task[list[str]]]:
    """Records to the partitions led elsewhere (the event is set once they are acknowledged),
    the kill (awaited), more records to every partition and the commit, then one more
    transaction; the task returns what was committed."""
    sent = asyncio.Event()

    async def transactions() -> list[str]:
        producer.begin_transaction()
        before = await send_all(producer, topic, elsewhere, f"{tag}before")
        sent.set()
        await killed.wait()
        return before + await after_the_kill(producer, topic, tag)

    return sent, asyncio.create_task(transactions())


async def after_the_kill(producer: Producer, topic: str, tag: str) -> list[str]:
    after = await send_all(producer, topic, [0, 1, 2], f"{tag}after")
    await producer.commit_transaction()  # at the new coordinator: the old one is dead
    producer.begin_transaction()
    following = await send_all(producer, topic, [0, 1, 2], f"{tag}following")
    await producer.commit_transaction()
    return after + following


def of_client(read: dict[int, list[str]], tag: str) -> dict[int, list[str]]:
    found = {p: [v for v in values if v.startswith(tag)] for p, values in read.items()}
    return {p: values for p, values in found.items() if values}


async def test_the_coordinator_killed_mid_transaction_is_found_again(
    cluster: BrokerCluster,
) -> None:
    """Three producers whose transactional ids the same broker coordinates: lockgate's
    (transaction version 2 and the classic protocol) and librdkafka's."""
    topic, run = "pain7-killed", uuid.uuid4().hex[:6]
    await asyncio.to_thread(cluster.create_topic, topic, 3, 3)
    tv2 = await new_producer(cluster, f"pain7-tv2-{run}", 2)
    victim = coordinator_of(cluster, f"pain7-tv2-{run}")
    classic_id = id_coordinated_by(cluster, victim, f"pain7-classic-{run}")
    rdk_id = id_coordinated_by(cluster, victim, f"pain7-rdk-{run}")
    classic = await new_producer(cluster, classic_id, 1)
    killed = asyncio.Event()
    try:
        elsewhere = others(cluster, topic, victim)
        assert len(elsewhere) == 2  # leaders spread over the three brokers
        rdk = await asyncio.to_thread(LibrdkafkaTransaction, cluster, topic, rdk_id)
        rdk_before = await asyncio.to_thread(rdk.send, elsewhere, "rdk-before")
        runs = [
            run_transactions(tv2, topic, elsewhere, killed, "tv2-"),
            run_transactions(classic, topic, elsewhere, killed, "classic-"),
        ]
        for sent, _task in runs:
            await asyncio.wait_for(sent.wait(), 30)
        cluster.brokers[victim].kill()
        killed.set()
        rdk_committed = rdk_before + await asyncio.to_thread(rdk.finish, [0, 1, 2], "rdk-after")
        committed = {"tv2-": await runs[0][1], "classic-": await runs[1][1], "rdk-": rdk_committed}
        for transactional_id in (f"pain7-tv2-{run}", classic_id, rdk_id):
            successor = coordinator_of(cluster, transactional_id)
            assert successor != victim
            assert "loaded in epoch" in cluster.brokers[successor].log()
    finally:
        killed.set()
        for producer in (tv2, classic):
            await producer.close()
        cluster.brokers[victim].start()
    total = sum(len(values) for values in committed.values())
    read = await asyncio.to_thread(read_committed, cluster, topic, total)
    for tag, values in committed.items():  # each once, in order, nothing else
        assert of_client(read, tag) == expected_log(values), tag
    assert sum(len(values) for values in read.values()) == total
    await asyncio.to_thread(cluster.wait_full_isr, topic)
    await asyncio.to_thread(cluster.wait_full_isr, TRANSACTION_LOG)
