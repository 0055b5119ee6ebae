"""`lockgate demo` end to end: the pipeline's Spark driver (its own JVM and workers) is killed
with SIGKILL while a micro-batch's output is written but uncommitted, restarted from its
checkpoint, and every committed input record must be in the output exactly once. On a
3-broker cluster, the broker coordinating one of the sink's transactions is killed too."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.etcd import etcd_available

pytestmark = pytest.mark.timeout(400)


def test_driver_killed_mid_batch_then_restarted_from_the_checkpoint_is_exactly_once(
    tmp_path: Path,
) -> None:
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (make test installs it)")
    done = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "demo", "--records", "600",
         "--per-trigger", "150", "--partitions", "2", "--kill-after-batches", "1",
         "--work-dir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=260,
    )  # fmt: skip
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "killed the Spark driver (kill -9, JVM and workers) in micro-batch" in report, report
    assert "EXACTLY ONCE: every committed order appears once in the output" in report, report
    assert "duplicated ids                     0" in report


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
