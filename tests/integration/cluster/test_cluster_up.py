"""`lockgate cluster up`: a development cluster (etcd and brokers on 127.0.0.1) that clients
can use at once, that `lockgate topics describe` shows replicated, and that SIGTERM stops
whole (every child process gone)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.etcd import etcd_available


def test_cluster_up_runs_a_replicated_cluster_until_interrupted(tmp_path: Path) -> None:
    if not etcd_available():
        pytest.skip("etcd is not installed: run `make system-deps`")
    # two brokers and one etcd member on free ports (consecutive ones may be taken by others)
    command = [sys.executable, "-m", "lockgate.cli", "cluster", "up", "--brokers", "2",
               "--etcd-members", "1", "--data-dir", str(tmp_path), "--port", "0",
               "--etcd-port", "0"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("bootstrap servers:"):
                break
        bootstrap = lines[-1].split(":", 1)[1].strip()
        addresses = bootstrap.split(",")
        assert len(addresses) == 2 and all(a.startswith("127.0.0.1:") for a in addresses), lines
        tool = [sys.executable, "-m", "lockgate.cli", "topics"]
        subprocess.run([*tool, "create", "--topic", "dev", "--partitions", "2",
                        "--replication-factor", "2", "--bootstrap-server", bootstrap],
                       check=True, timeout=60)  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            described = subprocess.run(
                [*tool, "describe", "--topic", "dev", "--bootstrap-server", bootstrap],
                capture_output=True, text=True, timeout=60, check=True,
            ).stdout  # fmt: skip
            if described.count("Isr: 0,1") + described.count("Isr: 1,0") == 2:
                break
            assert time.monotonic() < deadline, described
            time.sleep(0.2)
        assert "ReplicationFactor: 2" in described
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    children = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert children.stdout.strip() == ""  # brokers and etcd stopped with it
