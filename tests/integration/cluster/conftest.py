"""A 3-member etcd cluster on loopback ports for the module's tests (stopped by PID)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
