# A one-member etcd per test module, for unit tests of what lives in etcd (the top-level
# `etcd` fixture is a three-member cluster, for tests that kill members), and the storage
# engines a log's tests run on.
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.storage.disk import DiskEngine
from lockgate.storage.engine import StorageEngine
from lockgate.storage.memory import MemoryEngine
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


@pytest.fixture(params=["memory", "disk"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> StorageEngine:
    """Each test of a log on both storage engines."""
    return DiskEngine(str(tmp_path / "data")) if request.param == "disk" else MemoryEngine()
