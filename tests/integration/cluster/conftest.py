"""Per test module: a 3-member etcd cluster, and 3 brokers in a namespace of it, on loopback
ports (stopped by PID)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster, etcd_available


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    if not etcd_available():
        reason = "etcd is not installed: run `make system-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster(etcd: EtcdCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    brokers = BrokerCluster(tmp_path_factory.mktemp("cluster"), etcd).start()
    try:
        yield brokers
    finally:
        brokers.stop()
