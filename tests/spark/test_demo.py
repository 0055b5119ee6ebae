"""`lockgate demo` end to end: the pipeline's Spark driver (its own JVM and workers) is killed
with SIGKILL while a micro-batch's output is written but uncommitted, restarted from its
checkpoint, and every committed input record must be in the output exactly once."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(280)


def test_driver_killed_mid_batch_then_restarted_from_the_checkpoint_is_exactly_once(
    tmp_path: Path,
) -> None:
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (make test installs it)")
    done = subprocess.run(
        [sys.executable, "-m", "lockgate.cli", "demo", "--records", "1200",
         "--per-trigger", "150", "--partitions", "2", "--kill-after-batches", "1",
         "--work-dir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=260,
    )  # fmt: skip
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "killed the Spark driver (kill -9, JVM and workers) in micro-batch" in report, report
    assert "EXACTLY ONCE: every committed order appears once in the output" in report, report
    assert "duplicated ids                     0" in report
