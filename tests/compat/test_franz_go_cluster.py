"""franz-go (Go: github.com/twmb/franz-go 1.22 and its kadm) on a 3-broker lockgate cluster
(etcd-backed), with the scenarios of test_franz_go.py on topics of 3 replicas whose leaders
are spread over the brokers: idempotent produce and consume, a consumer group of two members
with the classic protocol and with KIP-848's, and an exactly-once chain of two
GroupTransactSessions with its checker. Partition leaders sit on every broker and the
coordinators of the group and of the transactional ids are wherever their internal partitions
lead, so commits, transaction markers and the read_committed checker cross brokers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import franz_go
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def brokers(etcd: EtcdCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    cluster = BrokerCluster(
        tmp_path_factory.mktemp("franz-go-cluster"), etcd, settings=franz_go.BROKER_SETTINGS
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_idempotent_producer_and_consumer(brokers: BrokerCluster, franzcheck: Path) -> None:
    franz_go.produce_and_consume(franzcheck, brokers.bootstrap, replication=3)
    assert len({p.leader for p in brokers.partitions("franz-pc").values()}) == 3


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_members_share_a_topic(
    brokers: BrokerCluster, franzcheck: Path, protocol: str
) -> None:
    franz_go.group_shares_a_topic(franzcheck, brokers.bootstrap, protocol, replication=3)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_exactly_once_chain(brokers: BrokerCluster, franzcheck: Path, protocol: str) -> None:
    franz_go.exactly_once_chain(franzcheck, brokers.bootstrap, protocol, replication=3)
