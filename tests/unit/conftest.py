# A one-member etcd per test module, for unit tests of what lives in etcd (the top-level
# `etcd` fixture is a three-member cluster, for tests that kill members).
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.etcd import EtcdCluster, etcd_available


@pytest.fixture(scope="module")
def one_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    if not etcd_available():
        pytest.skip("etcd is not installed")
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"), size=1).start()
    try:
        yield cluster
    finally:
        cluster.stop()
