"""`lockgate demo` end to end on a 3-broker cluster with local Spark: the broker coordinating one
of the sink's transactions and the pipeline's Spark driver (its own JVM and workers) are killed
with SIGKILL while a micro-batch's output is written but uncommitted, the driver is restarted
from its checkpoint, and every committed input record must be in the output exactly once.
(The driver kill alone on one broker is tests/spark/test_cluster.py's, there on a Spark
cluster.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.etcd import etcd_available

pytestmark = pytest.mark.timeout(400)


def test_a_broker_and_the_driver_killed_mid_batch_on_a_cluster_is_exactly_once(
    tmp_path: Path,
) -> None:
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (make test installs it)")
    if not etcd_available():
        reason = "etcd is not installed: run `make system-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    done = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "demo", "--cluster", "--kill", "both",
         "--records", "600", "--per-trigger", "150", "--partitions", "2",
         "--kill-after-batches", "1", "--work-dir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=380,
    )  # fmt: skip
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "cluster of 3 brokers" in report, report
    # the broker coordinating a sink transaction of the batch, or leading its output
    assert "(kill -9) in micro-batch" in report and "it was transaction coordinator" in report
    assert "killed the Spark driver (kill -9, JVM and workers) in micro-batch" in report, report
    assert "EXACTLY ONCE: every committed order appears once in the output" in report, report
    assert "duplicated ids                     0" in report
