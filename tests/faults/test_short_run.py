"""The short fault run of the suite: a few fixed seeds of the workload under faults (the long
run is `make soak`). Any anomaly fails the test with the per-seed table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.checker import table
from tests.faults.run import run_seed

pytestmark = pytest.mark.timeout(280)
SEEDS = (1, 2, 3)
DURATION_S = 12.0


async def test_no_anomaly_under_faults(tmp_path: Path) -> None:
    results = {}
    for seed in SEEDS:
        result = await run_seed(seed, DURATION_S, tmp_path)
        assert sum(result.faults.values()) > 0  # the nemesis did something
        results[seed] = result.anomalies
    assert not any(sum(c.values()) for c in results.values()), "\n" + table(results)


async def test_no_anomaly_over_a_storage_lifecycle(tmp_path: Path) -> None:
    """Small segments, retention and broker kills (run.py --lifecycle)."""
    result = await run_seed(4, DURATION_S, tmp_path, lifecycle=True)
    assert sum(result.faults.values()) > 0  # and the run itself kills the broker at the end
    assert result.disk_max_bytes > 0
    assert not sum(result.anomalies.values()), "\n" + table({4: result.anomalies})


async def test_no_anomaly_with_tiered_storage(tmp_path: Path) -> None:
    """Most of the history in an object store (S3Proxy) and read back from it, kills amid the
    uploads, and no orphan left (run.py --tiered)."""
    result = await run_seed(5, DURATION_S, tmp_path, tiered=True)
    assert sum(result.faults.values()) > 0
    assert result.remote_share > 0.5  # the final reads took most of it from the object store
    assert not sum(result.anomalies.values()), "\n" + table({5: result.anomalies})
