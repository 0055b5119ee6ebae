# etcd for tests: a cluster of members (Debian's etcd-server, installed by `make system-deps`)
# on 127.0.0.1 ports of their own, each with its data in a directory of the test's, started,
# killed (SIGKILL), paused (SIGSTOP) and restarted by PID. Every wait is bounded.
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.support.broker import free_port, wait_for_port


def etcd_available() -> bool:
    return shutil.which("etcd") is not None


class EtcdMember:
    def __init__(self, name: str, data_dir: Path) -> None:
        self.name = name
        self.data_dir = data_dir
        self.client_port = free_port()
        self.peer_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{name}-etcd.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def command(self, initial_cluster: str, state: str) -> list[str]:
        return [
            "etcd",
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", f"http://{self.endpoint}",
            "--advertise-client-urls", f"http://{self.endpoint}",
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", initial_cluster,
            "--initial-cluster-state", state,
            "--initial-cluster-token", "lockgate-tests",
            # quick elections on loopback: a lost member is noticed in about a second
            "--heartbeat-interval", "50",
            "--election-timeout", "500",
            "--logger", "zap",
            "--log-level", "warn",
        ]  # fmt: skip

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class EtcdCluster:
    """`size` members on loopback; `endpoints` is what clients are given."""

    def __init__(self, base: Path, size: int = 3) -> None:
        self.members = [EtcdMember(f"etcd{n}", base / f"etcd{n}") for n in range(size)]
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def url(self) -> str:
        """The form `lockgate serve --cluster` takes."""
        return "etcd://" + ",".join(self.endpoints)

    def start(self) -> EtcdCluster:
        for member in self.members:
            self._spawn(member, "new")
        for member in self.members:
            wait_for_port(member.client_port, timeout=30)
        self.wait_healthy()
        return self

    def _spawn(self, member: EtcdMember, state: str) -> None:
        member.data_dir.mkdir(parents=True, exist_ok=True)
        with open(member.log_path, "ab") as log:
            member.process = subprocess.Popen(
                member.command(self.initial_cluster, state),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until every running member answers `endpoint health` (a quorum has a leader)."""
        running = [m.endpoint for m in self.members if m.running]
        deadline = time.monotonic() + timeout
        while True:
            result = subprocess.run(
                ["etcdctl", "--endpoints", ",".join(running), "endpoint", "health"],
                capture_output=True,
                timeout=30,
                env={**os.environ, "ETCDCTL_API": "3"},
            )
            if result.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"etcd is not healthy: {result.stderr.decode()[-2000:]}")
            time.sleep(0.2)

    def kill(self, member: EtcdMember) -> None:
        if member.process is not None:
            os.kill(member.process.pid, signal.SIGKILL)
            member.process.wait(30)
            member.process = None

    def restart(self, member: EtcdMember) -> None:
        """Starts a killed member again on its data directory (it rejoins its cluster)."""
        self._spawn(member, "existing")
        wait_for_port(member.client_port, timeout=30)

    def pause(self, member: EtcdMember) -> None:
        if member.process is not None:
            os.kill(member.process.pid, signal.SIGSTOP)

    def resume(self, member: EtcdMember) -> None:
        if member.process is not None:
            os.kill(member.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        for member in self.members:
            if member.process is not None:
                self.resume(member)
                self.kill(member)
