"""Issue 22, pain 7: the transaction coordinator moves while the producer's old coordinator
stays up (it answers NOT_COORDINATOR), in a 3-broker cluster on etcd.

The broker coordinating a transactional id is cut from etcd mid-transaction (a TcpProxy between
it and etcd), not from its clients: its lease runs out, another broker comes to lead the id's
__transaction_state partition and loads it, and the cut broker unloads the id and answers the
producer's next coordinator request (AddPartitionsToTxn under the classic protocol, EndTxn
under TV2) NOT_COORDINATOR over the connection the producer already has. The producer must
find the coordinator again and commit there: records sent before the move (to partitions led
by every broker) and after it are read once each by a read_committed reader, nothing twice.
lockgate's client (both protocols) and confluent-kafka. The kill -9 case is
tests/integration/cluster/test_transactions.py::test_transactions_outlive_their_coordinator."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient

from lockgate.client.producer import Producer
from lockgate.coordinator.txn.log import partition_for
from tests.support.clients import consume_all
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster
from tests.support.tcp_proxy import TcpProxy

TRANSACTION_LOG = "__transaction_state"
LOG_PARTITIONS = 50  # transaction.state.log.num.partitions' default
TIMEOUT = 30.0


class CuttableCluster:
    """A cluster whose brokers each reach etcd through a TcpProxy the test can cut."""

    def __init__(self, brokers: BrokerCluster, proxies: dict[int, TcpProxy]) -> None:
        self.brokers = brokers
        self.proxies = proxies


@pytest.fixture(scope="module")
def cuttable(
    etcd: EtcdCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CuttableCluster]:
    proxies = {node: TcpProxy(etcd.members[0].client_port).start() for node in range(3)}
    brokers = BrokerCluster(
        tmp_path_factory.mktemp("pain7"),
        etcd,
        cluster_urls={node: f"etcd://{proxy.address}" for node, proxy in proxies.items()},
    )
    try:
        brokers.start()
        # the first FindCoordinator creates __transaction_state
        warm = ConfluentProducer({"bootstrap.servers": brokers.bootstrap,
                                  "transactional.id": "pain7-warm-up", "log_level": 3})  # fmt: skip
        warm.init_transactions(TIMEOUT)
        del warm  # done with: it would keep calling the brokers after they stop
        brokers.wait_for(lambda: all(p.leader >= 0 and len(p.isr) == 3
                                     for p in brokers.partitions(TRANSACTION_LOG).values()),
                         "every __transaction_state partition led and in sync")  # fmt: skip
        yield CuttableCluster(brokers, proxies)
    finally:
        brokers.stop()
        for proxy in proxies.values():
            proxy.stop()


def coordinator_of(cluster: BrokerCluster, transactional_id: str) -> int:
    index = partition_for(transactional_id, LOG_PARTITIONS)
    return cluster.partitions(TRANSACTION_LOG)[index].leader


def led_coordinator(cluster: BrokerCluster, transactional_id: str) -> int:
    """The coordinator of `transactional_id` once its partition has a leader."""
    found: list[int] = []

    def led() -> bool:
        found[:] = [coordinator_of(cluster, transactional_id)]
        return found[0] >= 0

    cluster.wait_for(led, f"a coordinator for {transactional_id}")
    return found[0]


def moved_away(cuttable: CuttableCluster, transactional_id: str, old: int) -> None:
    """Cuts `old` from etcd and waits until another broker coordinates `transactional_id`
    and `old` itself has let it go (so that it answers NOT_COORDINATOR, not a timeout)."""
    cluster = cuttable.brokers
    index = partition_for(transactional_id, LOG_PARTITIONS)
    cuttable.proxies[old].cut()
    cluster.wait_for(lambda: coordinator_of(cluster, transactional_id) not in (old, -1),
                     f"{TRANSACTION_LOG}-{index} led by a broker other than {old}")  # fmt: skip
    cluster.wait_for(
        lambda: f"no longer coordinating {TRANSACTION_LOG}-{index}:" in cluster.brokers[old].log(),
        f"broker {old} unloading {TRANSACTION_LOG}-{index}",
    )


def rejoin(cuttable: CuttableCluster, old: int, topic: str) -> None:
    cluster = cuttable.brokers
    cuttable.proxies[old].cut(False)
    others = [b.bootstrap for n, b in cluster.brokers.items() if n != old]

    def registered() -> bool:  # as the others see it (its own view counts itself anyway)
        admins = [AdminClient({"bootstrap.servers": b, "log_level": 3}) for b in others]
        return all(len(admin.list_topics(timeout=5).brokers) == 3 for admin in admins)

    cluster.wait_for(registered, f"broker {old} registered again")
    cluster.wait_full_isr(topic)
    cluster.wait_full_isr(TRANSACTION_LOG)


def read_committed(cluster: BrokerCluster, topic: str, count: int) -> dict[int, list[bytes]]:
    received = consume_all(cluster.bootstrap, topic, 3, count)  # (librdkafka: read_committed)
    return {p: [v or b"" for _o, v in found] for p, found in received.items()}


def expected_log(phases: tuple[str, ...]) -> dict[int, list[bytes]]:
    return {p: [f"{phase}-{p}".encode() for phase in phases] for p in range(3)}


@pytest.mark.parametrize("version", [1, 2])
def test_lockgate_s_producer_commits_at_the_coordinator_that_took_over(
    cuttable: CuttableCluster, version: int, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = cuttable.brokers
    topic, transactional_id = f"pain7-lockgate-v{version}", f"pain7-lockgate-v{version}"
    cluster.create_topic(topic, partitions=3, replication=3)
    old = led_coordinator(cluster, transactional_id)
    caplog.set_level(logging.DEBUG, logger="lockgate.client.transactions")

    async def run() -> None:
        producer = Producer(cluster.bootstrap, transactional_id=transactional_id,
                            transaction_version=version, linger_ms=0,
                            request_timeout_ms=10_000)  # fmt: skip
        await producer.start()
        try:
            await producer.init_transactions(timeout_ms=int(TIMEOUT * 1000))
            assert producer.uses_transaction_version_2 == (version == 2)
            producer.begin_transaction()
            for p in range(3):
                await producer.send(topic, f"before-{p}".encode(), partition=p)
            await producer.commit_transaction(timeout_ms=int(TIMEOUT * 1000))

            producer.begin_transaction()
            for p in range(2):  # in the log before the move
                await (await producer.send(topic, f"during-{p}".encode(), partition=p))
            await asyncio.to_thread(moved_away, cuttable, transactional_id, old)
            # a partition new to the transaction: classic AddPartitionsToTxn goes to `old`
            await producer.send(topic, b"during-2", partition=2)
            await producer.commit_transaction(timeout_ms=int(TIMEOUT * 1000))

            producer.begin_transaction()
            for p in range(3):
                await producer.send(topic, f"after-{p}".encode(), partition=p)
            await producer.commit_transaction(timeout_ms=int(TIMEOUT * 1000))
        finally:
            await producer.close()

    try:
        asyncio.run(run())
        first = "ADD_PARTITIONS_TO_TXN" if version == 1 else "END_TXN"
        assert f"{first} for {transactional_id!r}: retrying after NOT_COORDINATOR" in caplog.text
        assert read_committed(cluster, topic, 9) == expected_log(("before", "during", "after"))
    finally:
        rejoin(cuttable, old, topic)


def test_confluent_kafka_commits_at_the_coordinator_that_took_over(
    cuttable: CuttableCluster,
) -> None:
    cluster = cuttable.brokers
    topic = transactional_id = "pain7-confluent"
    cluster.create_topic(topic, partitions=3, replication=3)
    old = led_coordinator(cluster, transactional_id)
    config = {"bootstrap.servers": cluster.bootstrap, "linger.ms": 0,
              "transactional.id": transactional_id, "log_level": 3}  # fmt: skip
    producer = ConfluentProducer(config)
    try:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        for p in range(2):
            producer.produce(topic, f"during-{p}".encode(), partition=p)
        assert producer.flush(TIMEOUT) == 0
        moved_away(cuttable, transactional_id, old)
        producer.produce(topic, b"during-2", partition=2)
        producer.commit_transaction(TIMEOUT)
        producer.begin_transaction()
        for p in range(3):
            producer.produce(topic, f"after-{p}".encode(), partition=p)
        producer.commit_transaction(TIMEOUT)
        assert read_committed(cluster, topic, 6) == expected_log(("during", "after"))
    finally:
        rejoin(cuttable, old, topic)
