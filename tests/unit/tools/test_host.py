"""`lockgate host`: each broker's command line, and the supervisor's rules (a dead broker is
started again after a growing backoff, reset once it has stayed up; nothing is started once
stopping; stop signals every broker)."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

import pytest

from lockgate.tools.host import HEALTHY_AFTER, RESTART_BACKOFF, Host, HostPlan, plan_of


def plan(brokers: int = 2) -> HostPlan:
    return HostPlan("etcd://10.0.0.1:2379/prod", brokers, 10, Path("/srv/lg"), "0.0.0.0", 9092,
                    "host-a.example", "host-a", settings=("num.io.threads=4",))  # fmt: skip


def option(command: list[str], name: str) -> list[str]:
    return [command[i + 1] for i, item in enumerate(command) if item == name]


def test_each_broker_gets_its_node_id_port_data_directory_and_the_host_s_rack() -> None:
    first, second = plan().command(0), plan().command(1)
    assert first[1:4] == ["-m", "lockgate.cli", "serve"]
    assert option(first, "--node-id") == ["10"] and option(second, "--node-id") == ["11"]
    assert option(first, "--listen") == ["0.0.0.0:9092"]
    assert option(second, "--listen") == ["0.0.0.0:9093"]
    assert option(second, "--data-dir") == ["/srv/lg/broker-11"]
    assert option(second, "--cluster") == ["etcd://10.0.0.1:2379/prod"]
    # the host's settings first, so that the operator's --set wins over them
    assert option(second, "--set") == [
        "advertised.listeners=PLAINTEXT://host-a.example:9093",
        "broker.rack=host-a",
        "num.io.threads=4",
    ]


def test_defaults_one_broker_per_core_and_the_host_name_as_rack() -> None:
    args = argparse.Namespace(cluster="etcd://e:2379", brokers=0, first_node_id=0,
                              data_dir="d", listen_host="127.0.0.1", port=9092,
                              advertise_host=None, rack=None, config=None, set=[])  # fmt: skip
    made = plan_of(args, cores=16)
    assert made.brokers == 16
    assert made.advertise_host == "127.0.0.1"  # a loopback listener is reached as itself
    assert made.rack  # the host's name


class FakeProcess:
    count = 0

    def __init__(self) -> None:
        FakeProcess.count += 1
        self.pid = 1000 + FakeProcess.count
        self.returncode: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        self.returncode = 0

    def wait(self, timeout: float | None = None) -> int:
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        self.returncode = -9


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def host() -> tuple[Host, list[FakeProcess], Clock]:
    spawned: list[FakeProcess] = []
    clock = Clock()

    def spawn(_command: list[str]) -> FakeProcess:
        spawned.append(FakeProcess())
        return spawned[-1]

    supervisor = Host(plan(), spawn, clock)  # type: ignore[arg-type]
    supervisor.start()
    return supervisor, spawned, clock


def test_a_dead_broker_is_started_again_after_a_growing_backoff(
    host: tuple[Host, list[FakeProcess], Clock],
) -> None:
    supervisor, spawned, clock = host
    assert len(spawned) == 2
    spawned[1].returncode = 1  # dies at once
    supervisor.watch()
    assert len(spawned) == 2  # not before the backoff
    clock.now += RESTART_BACKOFF[0]
    supervisor.watch()
    assert len(spawned) == 3
    assert supervisor.children[1].process is spawned[2]  # type: ignore[comparison-overlap]
    spawned[2].returncode = 1  # dies again at once: the wait doubles
    supervisor.watch()
    clock.now += RESTART_BACKOFF[0]
    supervisor.watch()
    assert len(spawned) == 3
    clock.now += RESTART_BACKOFF[0]
    supervisor.watch()
    assert len(spawned) == 4
    clock.now += HEALTHY_AFTER  # up long enough: the next death waits the first backoff
    spawned[3].returncode = 1
    supervisor.watch()
    clock.now += RESTART_BACKOFF[0]
    supervisor.watch()
    assert len(spawned) == 5
    assert spawned[0].returncode is None  # the other broker was left alone


def test_stop_signals_every_broker_and_starts_none_again(
    host: tuple[Host, list[FakeProcess], Clock],
) -> None:
    supervisor, spawned, clock = host
    spawned[0].returncode = 1
    supervisor.watch()
    supervisor.stop()
    assert spawned[1].signals == [signal.SIGTERM]
    assert spawned[0].signals == []  # already dead
    clock.now += 100
    supervisor.watch()
    assert len(spawned) == 2
