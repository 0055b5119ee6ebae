# `lockgate cluster up`: a whole cluster on this machine for development and tests: an etcd
# cluster (Debian's etcd-server) and brokers on 127.0.0.1, each a child process with its own
# data directory, stopped by PID. Every wait is bounded.
from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from lockgate.tools.common import EXIT_FAILURE, EXIT_OK, StopSignals

# The kernel hands outgoing connections (and bind to port 0) ports from its ephemeral range
# only. A port picked for a server that starts a moment later is taken from below that range,
# so that no connection opened meanwhile, by this process or any other, can be given it.
_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_LOWEST = 10_000
_handed_out: set[int] = set()  # two servers of one process never get the same port
_random = random.SystemRandom()


def free_port() -> int:
    """A port free now on 127.0.0.1 and outside the ephemeral range (see above)."""
    try:
        with open(_EPHEMERAL_RANGE) as bounds:
            first_ephemeral = int(bounds.read().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32_768  # Linux's default
    if first_ephemeral <= _LOWEST + 1_000:  # an unusual range: the kernel's choice, then
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    for _ in range(1_000):
        port = _random.randrange(_LOWEST, first_ephemeral)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (or lingering): another
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port found between {_LOWEST} and {first_ephemeral}")


def wait_for_port(
    port: int, timeout: float = 30.0, alive: Callable[[], bool] | None = None
) -> None:
    """Until something listens on the port; TimeoutError after `timeout`, or at once when
    `alive` (the process that should listen) says it has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if alive is not None and not alive():
                raise TimeoutError(f"the process ended before listening on {port}") from None
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def etcd_available() -> bool:
    return shutil.which("etcd") is not None and shutil.which("etcdctl") is not None


class EtcdMember:
    def __init__(self, name: str, data_dir: Path, client_port: int = 0) -> None:
        self.name = name
        self.data_dir = data_dir
        self.client_port = client_port or free_port()
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
            "--initial-cluster-token", "lockgate-dev",
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
    """`size` members on loopback; `url` is what `lockgate serve --cluster` takes."""

    def __init__(self, base: Path, size: int = 3, first_port: int = 0) -> None:
        self.members = [
            EtcdMember(f"etcd{n}", base / f"etcd{n}", first_port + n if first_port else 0)
            for n in range(size)
        ]
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    @property
    def url(self) -> str:
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


def stop_process(process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM (a broker's controlled shutdown), kill -9 if it has not exited in `timeout` s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


# -- brokers beside the etcd cluster ------------------------------------------------------------


class DevCluster:
    """An etcd cluster and `brokers` brokers on 127.0.0.1, each broker a child process with its
    data in base/broker<N> and its output in base/broker<N>.log. Ports come from `first_port`
    on (the next ones must be free) or, when it is 0, are free ones picked now. A base that
    holds an earlier run's etcd data is started again as that cluster."""

    def __init__(
        self,
        base: Path,
        brokers: int = 3,
        etcd_members: int = 3,
        *,
        first_port: int = 0,
        etcd_port: int = 0,
        settings: Sequence[str] = (),
    ) -> None:
        self.base = base
        self.etcd = EtcdCluster(base, etcd_members, etcd_port)
        self.ports = [first_port + n if first_port else free_port() for n in range(brokers)]
        self.settings = list(settings)  # NAME=VALUE broker properties, for every broker
        self.brokers: dict[int, subprocess.Popen[bytes] | None] = dict.fromkeys(range(brokers))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def log_path(self, node: int) -> Path:
        return self.base / f"broker{node}.log"

    def start(self) -> DevCluster:
        """etcd, then every broker; returns once each broker's port is bound. A broker answers
        clients only after it has joined the cluster, so a client's first request may wait."""
        self.base.mkdir(parents=True, exist_ok=True)
        if any((m.data_dir / "member").exists() for m in self.etcd.members):
            for member in self.etcd.members:  # a cluster started before: its members rejoin
                self.etcd.restart(member)
            self.etcd.wait_healthy()
        else:
            self.etcd.start()
        for node in self.brokers:
            self.start_broker(node, wait=False)
        for node in self.brokers:
            wait_for_port(self.ports[node])
        return self

    def start_broker(self, node: int, *, wait: bool = True) -> None:
        """Starts broker `node` (again, after a kill) on its data directory."""
        command = [sys.executable, "-m", "lockgate.cli", "serve",
                   "--cluster", self.etcd.url, "--node-id", str(node),
                   "--data-dir", str(self.base / f"broker{node}"),
                   "--listen", f"127.0.0.1:{self.ports[node]}"]  # fmt: skip
        for setting in self.settings:
            command += ["--set", setting]
        with open(self.log_path(node), "ab") as log:
            self.brokers[node] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        if wait:
            wait_for_port(self.ports[node])

    def kill_broker(self, node: int) -> None:
        """kill -9: the broker gets no chance to give its lease back or flush anything."""
        broker = self.brokers[node]
        if broker is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(broker.pid, signal.SIGKILL)
            broker.wait(30)
            self.brokers[node] = None

    def all_running(self) -> bool:
        return all(b is not None and b.poll() is None for b in self.brokers.values())

    def stop(self) -> None:
        """SIGTERM to every broker (a controlled shutdown), kill -9 after 30 s; then etcd."""
        running = [b for b in self.brokers.values() if b is not None and b.poll() is None]
        for broker in running:
            broker.send_signal(signal.SIGTERM)
        for broker in running:
            stop_process(broker)
        self.brokers = dict.fromkeys(self.brokers)
        self.etcd.stop()


# -- lockgate cluster up --------------------------------------------------------------------------


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("cluster", help="run a development cluster on this machine")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up", help="start etcd and brokers on 127.0.0.1 and run until interrupted"
    )
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument("--etcd-members", type=int, default=3, help="etcd members (default 3)")
    up.add_argument("--data-dir", default="lockgate-cluster", help="where everything lives")
    up.add_argument(
        "--port",
        type=int,
        default=9092,
        help="the first broker's port; the others follow (0: free ports)",
    )
    up.add_argument("--etcd-port", type=int, default=2379,
                    help="the first etcd client port (0: free ports)")  # fmt: skip
    up.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a broker property for every broker")  # fmt: skip
    up.set_defaults(func=_up)


def _up(args: argparse.Namespace) -> int:
    if not etcd_available():
        print("lockgate: etcd and etcdctl are needed (Debian: etcd-server etcd-client)",
              file=sys.stderr)  # fmt: skip
        return EXIT_FAILURE
    cluster = DevCluster(
        Path(args.data_dir).resolve(),
        args.brokers,
        args.etcd_members,
        first_port=args.port,
        etcd_port=args.etcd_port,
        settings=args.set,
    )
    stop = StopSignals()
    try:
        cluster.start()
        print(f"cluster up: {args.brokers} brokers, etcd {cluster.etcd.url}")
        print(f"bootstrap servers: {cluster.bootstrap}")
        print(f"logs and data: {cluster.base} (Ctrl-C stops everything)", flush=True)
        while not stop.received and cluster.all_running():
            time.sleep(0.2)
        return EXIT_OK if stop.received else EXIT_FAILURE
    finally:
        cluster.stop()
