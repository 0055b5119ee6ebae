"""Three brokers whose inter-broker listener is SSL with client certificates required: the
replica fetchers and the brokers' own peer connections (transaction markers) go over TLS with
the broker's truststore and its keystore as client certificate. Clients use PLAINTEXT or SSL;
each listener's Metadata names every broker at that listener's port. A broker whose truststore
does not trust its peers' certificates never joins the ISR."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tests.support.broker import BrokerProcess
from tests.support.clients import consume_all
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster
from tests.support.tls import Pki, make_pki

LISTENERS = ("PLAINTEXT", "INTERNAL", "SSL")


def _settings(pki: Pki, truststore: str | None = None) -> dict[str, str]:
    settings = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,SSL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        **pki.server_settings("required", prefix="listener.name.internal."),
        **pki.server_settings("none", prefix="listener.name.ssl."),
    }
    if truststore is not None:
        settings["listener.name.internal.ssl.truststore.location"] = truststore
    return settings


def _tls_cluster(base: Path, etcd: EtcdCluster, pki: Pki) -> BrokerCluster:
    cluster = BrokerCluster(base, etcd, settings=_settings(pki))
    for node, broker in list(cluster.brokers.items()):  # three listeners each
        cluster.brokers[node] = BrokerProcess(broker.data_dir, broker.settings, listeners=LISTENERS)
    return cluster


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_cluster(
    etcd: EtcdCluster, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerCluster]:
    cluster = _tls_cluster(tmp_path_factory.mktemp("tls-cluster"), etcd, pki).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_replication_and_transactions_over_the_ssl_inter_broker_listener(
    tls_cluster: BrokerCluster, pki: Pki
) -> None:
    tls_cluster.create_topic("replicated", partitions=3, replication=3)
    producer = Producer(
        {
            "bootstrap.servers": tls_cluster.bootstrap,
            "transactional.id": "tls-cluster-txn",
            "acks": "all",
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(300):
        producer.produce("replicated", f"v{i}".encode(), partition=i % 3)
    producer.commit_transaction(30)
    tls_cluster.wait_full_isr("replicated")
    received = consume_all(tls_cluster.bootstrap, "replicated", 3, 300)
    values = sorted(v or b"" for records in received.values() for _, v in records)
    assert values == sorted(f"v{i}".encode() for i in range(300))
    for broker in tls_cluster.brokers.values():
        # no refused certificate (a WARNING); a readiness probe's reset is logged at INFO
        assert "WARNING lockgate.security.tls" not in broker.log()


def test_each_listener_advertises_its_own_ports(tls_cluster: BrokerCluster, pki: Pki) -> None:
    brokers = tls_cluster.brokers
    for listener, extra in (
        ("PLAINTEXT", {}),
        ("SSL", {"security.protocol": "SSL", "ssl.ca.location": pki.ca}),
    ):
        admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap_for(listener), **extra})
        listed = admin.list_topics(timeout=20).brokers
        assert {n: b.port for n, b in listed.items()} == {
            n: broker.ports[listener] for n, broker in brokers.items()
        }


def test_a_broker_not_trusting_its_peers_stays_out_of_the_isr(
    etcd: EtcdCluster, pki: Pki, tmp_path: Path
) -> None:
    cluster = _tls_cluster(tmp_path, etcd, pki)
    # broker 2 checks its peers' certificates against another CA: it cannot fetch
    cluster.brokers[2].settings.update(_settings(pki, truststore=pki.other_ca))
    cluster.start()
    try:
        topic = "distrust"
        admin = cluster.admin()
        for future in admin.create_topics(
            [NewTopic(topic, num_partitions=1, replica_assignment=[[0, 2]])]
        ).values():
            future.result(30)
        # evidence that a fetch between 0 and 2 was tried and refused (whichever leads)
        cluster.wait_for(
            lambda: (
                "certificate verify failed" in cluster.brokers[2].log()
                or "CERTIFICATE_VERIFY_FAILED" in cluster.brokers[2].log()
                or "TLS handshake with" in cluster.brokers[2].log()
            ),
            "a refused inter-broker TLS connection",
        )
        # created with both in its ISR, the follower that cannot fetch is dropped from it
        # (replica.lag.time.max.ms) and stays out
        cluster.wait_for(lambda: len(cluster.partitions(topic)[0].isr) == 1, "the ISR shrunk")
        info = cluster.partitions(topic)[0]
        assert sorted(info.replicas) == [0, 2] and info.isr == (info.leader,), info
    finally:
        cluster.stop()
