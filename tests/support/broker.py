# A lockgate broker in a child process on 127.0.0.1, for tests that need a real server:
# start, clean restart (SIGTERM), crash (SIGKILL), with bounded waits everywhere.
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from lockgate.tools.devcluster import free_port, wait_for_port

__all__ = ["BrokerProcess", "free_port", "running_broker", "wait_for_port"]


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        settings: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
        listeners: tuple[str, ...] = ("PLAINTEXT",),
    ) -> None:
        self.data_dir = data_dir
        # one free port per listener name (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL or a name
        # mapped in listener.security.protocol.map); `port` is the first listener's
        self.ports = {name: free_port() for name in listeners}
        self.port = self.ports[listeners[0]]
        self.settings = dict(settings or {})
        # Extra environment variables for the child (on top of ours); change before a restart.
        self.env = dict(env or {})
        # Runs in the child before exec (e.g. resource.setrlimit for a file-descriptor budget).
        self.preexec = preexec
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_for(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def listeners(self) -> str:
        return ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())

    def start(self) -> BrokerProcess:
        command = [
            sys.executable,
            "-m",
            "lockgate.cli",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            self.listeners,
        ]
        for key, value in self.settings.items():
            command += ["--set", f"{key}={value}"]
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        environment = {**os.environ, **self.env} if self.env else None
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=environment, preexec_fn=self.preexec
        )
        log.close()
        try:
            process = self.process
            for port in self.ports.values():
                wait_for_port(port, alive=lambda: process.poll() is None)
        except TimeoutError:
            self.kill()
            raise RuntimeError(f"broker did not start:\n{self.log()}") from None
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> int:
        """Clean shutdown through SIGTERM; returns the exit code."""
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(10)
        self.process = None
        return code

    def wait_exit(self, timeout: float = 30.0) -> int:
        """Waits for the broker to exit by itself (a crash); returns its exit code."""
        if self.process is None:
            raise RuntimeError("the broker is not running")
        code = self.process.wait(timeout)
        self.process = None
        return code

    def kill(self) -> None:
        """kill -9: no chance to flush or close anything."""
        if self.process is None:
            return
        if self.process.poll() is None:  # (not reaped yet: the pid is still ours)
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.process = None

    def pause(self) -> None:
        """SIGSTOP: the process is frozen, its sockets and its etcd lease left as they are."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Frozen for the block, resumed however it ends."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def restart(self, clean: bool = True) -> BrokerProcess:
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()


@contextlib.contextmanager
def running_broker(
    data_dir: Path, settings: dict[str, str] | None = None
) -> Iterator[BrokerProcess]:
    """A started broker, killed (kill -9) when the block ends."""
    process = BrokerProcess(data_dir, settings).start()
    try:
        yield process
    finally:
        process.kill()
