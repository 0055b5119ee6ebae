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
    result = franz_go.run(
        franzcheck, "produce-consume", brokers=brokers.bootstrap, topic="franz-pc",
        partitions=3, replication=3, records=1000,
    )  # fmt: skip
    franz_go.check_produce_consume(result, records=1000, partitions=3)
    assert len({p.leader for p in brokers.partitions("franz-pc").values()}) == 3


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_members_share_a_topic(
    brokers: BrokerCluster, franzcheck: Path, protocol: str
) -> None:
    name = f"franz-group-{protocol}"
    result = franz_go.run(
        franzcheck, "group", brokers=brokers.bootstrap, topic=name, group=name,
        protocol=protocol, partitions=6, replication=3, records=600,
    )  # fmt: skip
    franz_go.check_group(result, protocol, records=600, partitions=6)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_exactly_once_chain(brokers: BrokerCluster, franzcheck: Path, protocol: str) -> None:
    name = f"franz-eos-{protocol}"
    result = franz_go.run(
        franzcheck, "eos", brokers=brokers.bootstrap, input=f"{name}-in", output=f"{name}-out",
        group=name, protocol=protocol, workers=2, partitions=4, replication=3, records=2000,
        max_poll=100,
    )  # fmt: skip
    franz_go.check_exactly_once(result, records=2000)
