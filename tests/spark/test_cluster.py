"""`lockgate demo` end to end on both kinds of cluster: a standalone Spark master and worker on
127.0.0.1 (separate JVMs, executors launched by the worker) and 3 lockgate brokers on etcd. The
demo's pipeline is submitted with spark-submit; mid-batch, while a micro-batch's output is
written but uncommitted, its driver (JVM and workers) and the broker coordinating one of the
sink's transactions are killed with SIGKILL; the driver is resubmitted from its checkpoint and
every committed order must be in the output exactly once. (Local Spark is what the other
tests under tests/spark use.)"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import free_port, wait_for_port
from tests.support.etcd import etcd_available

pytestmark = pytest.mark.timeout(540)
DEMO_TIMEOUT_S = 400


def _loopback() -> dict[str, str]:
    """The environment of the daemons and the drivers: every Spark endpoint on 127.0.0.1."""
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}


def _spark_class(*args: str, log: Path) -> subprocess.Popen[bytes]:
    import pyspark

    command = [str(Path(pyspark.__file__).parent / "bin" / "spark-class"), *args]
    with open(log, "ab") as out:
        # Its own process group: the teardown's killpg also takes the executors it launched.
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**_loopback(), "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"},
            start_new_session=True,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and one worker with two cores, everything bound to loopback."""
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java (make test installs it)")
    work = tmp_path_factory.mktemp("cluster")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = _spark_class(
        "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
        "--webui-port", str(free_port()), log=work / "master.log",
    )  # fmt: skip
    worker = None
    try:
        wait_for_port(port, timeout=60)
        worker_log = work / "worker.log"
        worker = _spark_class(
            "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2",
            "--memory", "2g", "--webui-port", str(free_port()), "--work-dir", str(work / "apps"),
            log=worker_log,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "Successfully registered with master" not in worker_log.read_text(errors="replace"):
            assert worker.poll() is None, worker_log.read_text(errors="replace")
            assert time.monotonic() < deadline, "the worker did not register within 60 s"
            time.sleep(0.5)
        yield url
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)


def test_pipeline_on_spark_and_lockgate_clusters_is_exactly_once_across_kills(
    cluster: str, tmp_path: Path
) -> None:
    if not etcd_available():
        reason = "etcd is not installed: run `make system-deps`"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    work = tmp_path / "demo"
    demo = subprocess.Popen(
        [sys.executable, "-m", "lockgate.cli", "demo", "--master", cluster, "--cluster",
         "--kill", "both", "--records", "600", "--per-trigger", "150", "--partitions", "2",
         "--kill-after-batches", "1", "--work-dir", str(work)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_loopback(),
        start_new_session=True,
    )  # fmt: skip
    try:
        report, _ = demo.communicate(timeout=DEMO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        # SIGTERM: the demo stops its brokers, etcd and Spark driver on the way out (killing
        # it alone would leave them running); then whatever is left of its session
        demo.terminate()
        try:
            report, _ = demo.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(demo.pid, signal.SIGKILL)
        raise AssertionError(f"the demo did not finish in {DEMO_TIMEOUT_S} s:\n{report}") from None
    assert demo.returncode == 0, report
    assert "cluster of 3 brokers" in report, report
    # the broker coordinating a sink transaction of the batch, or leading its output
    assert "(kill -9) in micro-batch" in report and "it was transaction coordinator" in report
    assert "killed the Spark driver (kill -9, JVM and workers) in micro-batch" in report, report
    assert "EXACTLY ONCE: every committed order appears once in the output" in report, report
    assert "duplicated ids                     0" in report
    for run in ("driver-1.log", "driver-2.log"):  # the tasks ran on the worker's executors
        assert f"Connecting to master {cluster}" in (work / run).read_text(errors="replace")
        assert "Granted executor ID" in (work / run).read_text(errors="replace")
