# `lockgate host`: several brokers of one cluster on one many-core host. A broker is one event
# loop, so one process uses about one core; a 16-core server runs several brokers, each a
# `lockgate serve` child with its own node id, port and data directory, and all with the same
# broker.rack (the host's name by default) so that rack-aware placement never puts two replicas
# of a partition on this host. SIGTERM/SIGINT stop every broker with a controlled shutdown; a
# broker that dies is started again after a backoff, as systemd's Restart=on-failure would.
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lockgate.tools.common import EXIT_FAILURE, EXIT_OK, StopSignals
from lockgate.tools.devcluster import stop_process

RESTART_BACKOFF = (1.0, 30.0)  # first and longest wait before a dead broker is started again
HEALTHY_AFTER = 60.0  # a broker up this long has its backoff reset


@dataclass(frozen=True)
class HostPlan:
    cluster: str
    brokers: int
    first_node_id: int
    data_dir: Path
    listen_host: str
    first_port: int
    advertise_host: str
    rack: str
    config: str | None = None
    settings: tuple[str, ...] = ()

    def command(self, index: int) -> list[str]:
        """The `lockgate serve` command line of the host's index-th broker."""
        node, port = self.first_node_id + index, self.first_port + index
        command = [sys.executable, "-m", "lockgate.cli", "serve", "--cluster", self.cluster,
                   "--node-id", str(node), "--data-dir", str(self.data_dir / f"broker-{node}"),
                   "--listen", f"{self.listen_host}:{port}"]  # fmt: skip
        if self.config:
            command += ["--config", self.config]
        # the host's own settings first: --set given to `host` may still override them
        command += ["--set", f"advertised.listeners=PLAINTEXT://{self.advertise_host}:{port}"]
        command += ["--set", f"broker.rack={self.rack}"]
        for setting in self.settings:
            command += ["--set", setting]
        return command


@dataclass
class _Child:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    backoff: float = RESTART_BACKOFF[0]
    restart_at: float = 0.0


class Host:
    """Runs a HostPlan's brokers until stopped; `spawn` starts one command (a seam for tests)."""

    def __init__(
        self,
        plan: HostPlan,
        spawn: Callable[[list[str]], subprocess.Popen[bytes]] = subprocess.Popen,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self._spawn = spawn
        self._clock = clock
        self.children = [_Child(i) for i in range(plan.brokers)]
        self.stopping = False

    def start(self) -> None:
        for child in self.children:
            self._start(child)

    def _start(self, child: _Child) -> None:
        child.process = self._spawn(self.plan.command(child.index))
        child.started = self._clock()
        node = self.plan.first_node_id + child.index
        print(f"broker {node} started (pid {child.process.pid}, port "
              f"{self.plan.first_port + child.index})", flush=True)  # fmt: skip

    def watch(self) -> None:
        """One look at the children: a dead broker is started again after its backoff."""
        now = self._clock()
        for child in self.children:
            process = child.process
            if process is not None and process.poll() is not None:
                up = now - child.started
                if up >= HEALTHY_AFTER:
                    child.backoff = RESTART_BACKOFF[0]
                node = self.plan.first_node_id + child.index
                print(f"broker {node} exited with {process.returncode} after {up:.0f} s; "
                      f"starting it again in {child.backoff:.0f} s", flush=True)  # fmt: skip
                child.process, child.restart_at = None, now + child.backoff
                child.backoff = min(child.backoff * 2, RESTART_BACKOFF[1])
            elif process is None and now >= child.restart_at and not self.stopping:
                self._start(child)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM to every broker at once (controlled shutdowns in parallel), kill -9 after
        `timeout` s."""
        self.stopping = True
        running = [c.process for c in self.children if c.process is not None]
        for process in running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in running:
            stop_process(process, timeout)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "host", help="run several brokers of a cluster on this host (one per core or so)"
    )
    parser.add_argument("--cluster", required=True, metavar="etcd://HOST:PORT[,...][/NAMESPACE]",
                        help="the cluster's etcd (lockgate.cluster)")  # fmt: skip
    parser.add_argument("--brokers", type=int, default=0,
                        help="how many brokers (default: one per core)")  # fmt: skip
    parser.add_argument("--first-node-id", type=int, required=True,
                        help="node ids first, first+1, ... (unique in the cluster)")  # fmt: skip
    parser.add_argument("--data-dir", default="lockgate-data",
                        help="broker-<node id>/ under it for each broker")  # fmt: skip
    parser.add_argument("--listen-host", default="127.0.0.1", help="the listeners' address")
    parser.add_argument("--port", type=int, default=9092,
                        help="the first broker's port; the others follow")  # fmt: skip
    parser.add_argument("--advertise-host",
                        help="the name clients reach this host by (default: the listen address, "
                        "or this host's name when it listens on 0.0.0.0)")  # fmt: skip
    parser.add_argument("--rack", help="broker.rack of every broker here (default: host name)")
    parser.add_argument("--config", help="a .properties file for every broker")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a broker property for every broker")  # fmt: skip
    parser.set_defaults(func=_host)


def plan_of(args: argparse.Namespace, cores: int | None) -> HostPlan:
    advertise = args.advertise_host or (
        socket.getfqdn() if args.listen_host in ("0.0.0.0", "::", "") else args.listen_host
    )
    return HostPlan(
        cluster=args.cluster,
        brokers=args.brokers or max(1, cores or 1),
        first_node_id=args.first_node_id,
        data_dir=Path(args.data_dir).resolve(),
        listen_host=args.listen_host,
        first_port=args.port,
        advertise_host=advertise,
        rack=args.rack or socket.gethostname(),
        config=args.config,
        settings=tuple(args.set),
    )


def _host(args: argparse.Namespace) -> int:
    plan = plan_of(args, len(os.sched_getaffinity(0)))
    if plan.brokers < 1:
        print("lockgate: --brokers must be at least 1", file=sys.stderr)
        return EXIT_FAILURE
    host = Host(plan)
    stop = StopSignals()
    last = plan.brokers - 1
    print(f"{plan.brokers} brokers in rack {plan.rack!r}: node ids {plan.first_node_id}-"
          f"{plan.first_node_id + last}, ports {plan.first_port}-{plan.first_port + last}, "
          f"data under {plan.data_dir}", flush=True)  # fmt: skip
    try:
        host.start()
        while not stop.received:
            host.watch()
            time.sleep(0.2)
        return EXIT_OK
    finally:
        host.stop()
