"""`lockgate host`: several brokers of a cluster on one host from one command. They register
with consecutive node ids and ports in the host's rack, a broker killed -9 is started again by
the host, and SIGTERM stops them all (every child gone, exit 0)."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient

from lockgate.tools.devcluster import free_port
from tests.support.etcd import EtcdCluster


def two_free_ports() -> int:
    """A free port whose next one is free too."""
    for _ in range(100):
        port = free_port()
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two consecutive free ports")


def nodes(bootstrap: str) -> dict[int, str | None]:
    """node id -> rack, as DescribeCluster answers it."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    described = admin.describe_cluster(request_timeout=5).result(10)
    return {node.id: node.rack for node in described.nodes}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # a broker not up yet: ask again
            pass
        time.sleep(0.2)
    raise TimeoutError(what)


def test_host_runs_brokers_in_its_rack_restarts_a_dead_one_and_stops_them_all(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    port = two_free_ports()
    command = [sys.executable, "-m", "lockgate.cli", "host", "--cluster",
               f"{etcd.url}/host-test", "--brokers", "2", "--first-node-id", "5",
               "--data-dir", str(tmp_path), "--port", str(port), "--rack", "host-a",
               "--set", "broker.session.timeout.ms=3000",
               "--set", "broker.heartbeat.interval.ms=500"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    bootstrap = f"127.0.0.1:{port},127.0.0.1:{port + 1}"
    try:
        wait_for(lambda: nodes(bootstrap) == {5: "host-a", 6: "host-a"}, "both brokers up")
        assert (tmp_path / "broker-5").is_dir() and (tmp_path / "broker-6").is_dir()
        started = [re.search(r"broker 6 started \(pid (\d+)", line) for line in lines]
        pid = int(next(m for m in started if m is not None).group(1))
        subprocess.run(["kill", "-9", str(pid)], check=True)
        wait_for(lambda: any("broker 6 exited with -9" in line for line in lines), "noticed")
        wait_for(lambda: sum("broker 6 started" in line for line in lines) == 2, "restarted")
        wait_for(lambda: nodes(bootstrap) == {5: "host-a", 6: "host-a"}, "broker 6 back")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(90) == 0, "".join(lines)
    reader.join(10)
    children = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert children.stdout.strip() == ""  # every broker stopped with it
