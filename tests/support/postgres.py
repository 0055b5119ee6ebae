# A PostgreSQL server for tests (Debian's postgresql package): initdb in a temporary directory,
# the postmaster started by us on a free 127.0.0.1 port and a private Unix socket directory,
# fsync on, stopped (fast shutdown), crashed (SIGKILL of the postmaster and its backends) and
# restarted by PID. PostgreSQL refuses to run as root, so under root the data directory is
# handed to the `postgres` account (the package creates it) and the server runs as that user.
from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg

from tests.support.broker import free_port

__all__ = ["PostgresServer", "postgres_binaries", "running_postgres"]

SUPERUSER = "postgres"


def postgres_binaries() -> Path | None:
    """The directory holding initdb and postgres: PATH first, then Debian's versioned
    /usr/lib/postgresql/<major>/bin (not on PATH), newest major first."""
    found = shutil.which("initdb")
    if found is not None:
        directory = Path(found).resolve().parent
        if (directory / "postgres").exists():
            return directory
    candidates = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not candidates:
        return None
    newest = max(candidates, key=lambda path: int(Path(path).parts[-3]))
    return Path(newest).parent


def _server_account() -> pwd.struct_passwd | None:
    """The account to run the server as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and no 'postgres' or 'nobody' account to run PostgreSQL")


class PostgresServer:
    def __init__(self, binaries: Path) -> None:
        self.binaries = binaries
        self.account = _server_account()
        # Our own directory under the system temp dir: pytest's are 0700 and owned by root,
        # which the postgres account could not enter.
        self.root = Path(tempfile.mkdtemp(prefix="lockgate-postgres-"))
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "socket"
        self.log_path = self.root / "server.log"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.socket_dir.mkdir()
        if self.account is not None:
            for path in (self.root, self.socket_dir):
                os.chown(path, self.account.pw_uid, self.account.pw_gid)
        self._run_as_server(
            [
                str(binaries / "initdb"),
                "--pgdata",
                str(self.data_dir),
                "--username",
                SUPERUSER,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--no-sync",  # a throw-away cluster; the server itself runs with fsync on
            ]
        )

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres connect_timeout=5"

    def _as_server(self) -> dict[str, object]:
        if self.account is None:
            return {}
        return {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}

    def _run_as_server(self, command: list[str]) -> None:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=self.root,
            **self._as_server(),  # type: ignore[call-overload]
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command[0]} failed:\n{done.stdout}\n{done.stderr}")

    def start(self, timeout: float = 30.0) -> PostgresServer:
        command = [
            str(self.binaries / "postgres"),
            "-D",
            str(self.data_dir),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"port={self.port}",
            "-c",
            f"unix_socket_directories={self.socket_dir}",
            "-c",
            "fsync=on",
            "-c",
            "synchronous_commit=on",
            "-c",
            "max_connections=40",
            "-c",
            "shared_buffers=16MB",
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            **self._as_server(),  # type: ignore[call-overload]
        )
        log.close()
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        # The port opens before recovery ends ("the database system is starting up"): wait
        # for a session that can run a query.
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"postgres exited at start:\n{self.log()}")
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as connection:
                    connection.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.crash()
                    raise RuntimeError(f"postgres did not start:\n{self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT): sessions are rolled back, a checkpoint is written."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.crash()
        self.process = None

    def crash(self) -> None:
        """SIGKILL of the postmaster and of its backends: the next start replays the WAL."""
        if self.process is None:
            return
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        _wait_dead(children, timeout=10)
        self.process = None

    def restart(self, crash: bool = False) -> PostgresServer:
        if crash:
            self.crash()
        else:
            self.stop()
        return self.start()

    def remove(self) -> None:
        self.crash()
        shutil.rmtree(self.root, ignore_errors=True)


def _wait_dead(processes: list[psutil.Process], timeout: float) -> None:
    """Until each has exited: a zombie counts (it holds no shared memory any more), which
    spares waiting for the reparented backends to be reaped by init."""
    deadline = time.monotonic() + timeout
    for process in processes:
        while time.monotonic() < deadline:
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.005)


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """A started server, crashed and deleted when the block ends. Raises LookupError when
    PostgreSQL is not installed (`make system-deps` installs it)."""
    binaries = postgres_binaries()
    if binaries is None:
        raise LookupError("PostgreSQL is not installed: run `make system-deps`")
    server = PostgresServer(binaries)
    try:
        server.start()
        yield server
    finally:
        server.remove()
