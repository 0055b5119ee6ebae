# Apache Kafka as the reference broker for tests: started from the jars `make reference-deps`
# resolves from Maven Central (KRaft, one node that is both broker and controller) on
# 127.0.0.1, with its data in a directory of the test's, stopped by PID. Kafka's own tools
# run from the same classpath.
from __future__ import annotations

import base64
import os
import signal
import subprocess
import uuid
from pathlib import Path

from tests.support.broker import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
CLASSPATH_FILE = ROOT / ".cache" / "reference" / "kafka.classpath"
SPARK_KAFKA_CLASSPATH_FILE = ROOT / ".cache" / "reference" / "spark-kafka.classpath"
JAVA_OPTIONS = ["-Xms256m", "-Xmx768m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]


def reference_classpath() -> str | None:
    """The resolved classpath, or None when `make reference-deps` has not run."""
    return _read_classpath(CLASSPATH_FILE)


def spark_kafka_jars() -> list[str]:
    """The jars of Spark's Kafka connector for `spark.jars`; none before `make reference-deps`."""
    classpath = _read_classpath(SPARK_KAFKA_CLASSPATH_FILE)
    return classpath.split(os.pathsep) if classpath else []


def _read_classpath(path: Path) -> str | None:
    text = path.read_text().strip() if path.exists() else ""
    return text or None


class ReferenceKafka:
    def __init__(
        self,
        data_dir: Path,
        classpath: str,
        settings: dict[str, str] | None = None,
        port: int | None = None,
    ):
        self.data_dir = data_dir
        self.classpath = classpath
        self.port = port or free_port()
        self.controller_port = free_port()
        self.settings = dict(settings or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-kafka.log"
        self.properties = data_dir.parent / f"{data_dir.name}-server.properties"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_properties(self) -> None:
        values = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            **self.settings,
        }
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in values.items()))

    def java(self, main_class: str, *args: str) -> list[str]:
        return ["java", *JAVA_OPTIONS, "-cp", self.classpath, main_class, *args]

    def prepare(self) -> list[str]:
        """Writes the configuration, formats the data directory on first use, and returns the
        command that runs the broker."""
        self._write_properties()
        if not (self.data_dir / "meta.properties").exists():
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            subprocess.run(
                self.java(
                    "kafka.tools.StorageTool",
                    "format",
                    "--standalone",
                    f"--cluster-id={cluster_id}",  # an id may start with "-"
                    "-c",
                    str(self.properties),
                ),
                check=True,
                capture_output=True,
                timeout=120,
            )
        return self.java("kafka.Kafka", str(self.properties))

    def start(self) -> ReferenceKafka:
        command = self.prepare()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        try:
            wait_for_port(self.port, timeout=120)
        except TimeoutError:
            self.kill()
            raise RuntimeError(f"Apache Kafka did not start:\n{self.log()[-5000:]}") from None
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 60.0) -> None:
        """A controlled shutdown (SIGTERM), then SIGKILL if it takes too long."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None

    def kill(self) -> None:
        if self.process is None:
            return
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self.process = None


def kafka_command(port: int, data_dir: Path, settings: dict[str, str] | None = None) -> list[str]:
    """The command of an Apache Kafka broker on 127.0.0.1:`port` (for the benchmarks, which
    run and stop brokers themselves), with `settings` over the defaults above."""
    classpath = reference_classpath()
    if classpath is None:
        raise RuntimeError("Apache Kafka's jars are not resolved: run `make reference-deps`")
    data_dir.mkdir(parents=True, exist_ok=True)
    return ReferenceKafka(data_dir, classpath, settings, port=port).prepare()
