"""The short fault run on a 3-broker cluster: three fixed seeds of cluster_run.py (the long run
is `make soak CLUSTER=1`). Any anomaly fails the test with the per-seed table."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults.checker import table
from tests.faults.cluster_run import run_cluster_seed
from tests.support.etcd import etcd_available

pytestmark = pytest.mark.timeout(420)
SEEDS = (1, 2, 3)
DURATION_S = 12.0


async def test_no_anomaly_under_cluster_faults(tmp_path: Path) -> None:
    if not etcd_available():
        reason = "etcd is not installed: run `make system-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    results = {}
    for seed in SEEDS:
        result = await run_cluster_seed(seed, DURATION_S, tmp_path)
        assert sum(result.faults.values()) > 0  # the nemesis did something
        results[seed] = result.anomalies
    assert not any(sum(c.values()) for c in results.values()), "\n" + table(results)
