# An S3-compatible object store for tests and benchmarks: S3Proxy (from the jars `make
# reference-deps` resolves from Maven Central) on its jclouds filesystem backend, listening on a
# free 127.0.0.1 port with its data under a directory of the caller's, signing checked
# (aws-v2-or-v4) against one access key, stopped by PID (SIGTERM, bounded wait, SIGKILL).
#
# Why these settings (found by probing S3Proxy 2.6.0, see docs/tiered-storage.md):
# - a bucket of the filesystem backend is a directory under its base directory, so buckets are
#   made before the start (S3Proxy has no bucket to offer until one exists);
# - s3proxy.ignore-unknown-headers: the obstore client (like current AWS SDKs) sends
#   x-amz-checksum-sha256 with DeleteObjects, which S3Proxy 2.6.0 does not know and would
#   answer with 501 NotImplemented; ignoring it lets batch deletes through (unverified);
# - logback's own default is DEBUG to stdout (the jar ships no configuration): a few megabytes
#   per test, so the server gets a configuration of ours at INFO.
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.support.broker import free_port

ROOT = Path(__file__).resolve().parents[2]
CLASSPATH_FILE = ROOT / ".cache" / "reference" / "s3proxy.classpath"
JAVA_OPTIONS = ["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
MAIN_CLASS = "org.gaul.s3proxy.Main"
REGION = "us-east-1"  # S3Proxy accepts any region in a v4 signature; this one is the default

LOGBACK = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
"""


def s3proxy_classpath() -> str:
    """The resolved classpath; a clear failure (not a skip) when `make reference-deps` has not
    run: the test command always resolves it, so its absence is a broken set-up."""
    text = CLASSPATH_FILE.read_text().strip() if CLASSPATH_FILE.exists() else ""
    if not text:
        raise RuntimeError("S3Proxy's jars are not resolved: run `make reference-deps`")
    return text


@dataclass(frozen=True)
class ObjectStoreEndpoint:
    """What a client needs to reach the server's bucket."""

    endpoint: str
    bucket: str
    access_key: str
    secret_key: str
    region: str

    def __repr__(self) -> str:  # a test failure's output must not carry the secret
        return f"ObjectStoreEndpoint({self.endpoint!r}, bucket={self.bucket!r})"


class S3ProxyServer:
    def __init__(self, root: Path, bucket: str = "lockgate", port: int | None = None) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.bucket = bucket
        self.port = port or free_port()
        self.access_key = "lockgate-test"
        self.secret_key = secrets.token_hex(16)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = root / "s3proxy.log"
        self.properties = root / "s3proxy.properties"
        self.logback = root / "logback.xml"
        self.started_in_s = 0.0

    @property
    def endpoint(self) -> ObjectStoreEndpoint:
        return ObjectStoreEndpoint(
            endpoint=f"http://127.0.0.1:{self.port}",
            bucket=self.bucket,
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=REGION,
        )

    def _write_configuration(self) -> None:
        values = {
            "s3proxy.endpoint": f"http://127.0.0.1:{self.port}",
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key,
            "s3proxy.credential": self.secret_key,
            "s3proxy.ignore-unknown-headers": "true",
            "jclouds.provider": "filesystem-nio2",
            "jclouds.filesystem.basedir": str(self.data_dir),
            # the backend's own login, required by jclouds and unused by a local directory
            "jclouds.identity": "local",
            "jclouds.credential": "local",
        }
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        self.logback.write_text(LOGBACK)

    def start(self, timeout: float = 60.0) -> S3ProxyServer:
        classpath = s3proxy_classpath()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.data_dir / self.bucket).mkdir(parents=True, exist_ok=True)
        self._write_configuration()
        command = [
            "java",
            *JAVA_OPTIONS,
            f"-Dlogback.configurationFile={self.logback}",
            "-cp",
            classpath,
            MAIN_CLASS,
            "--properties",
            str(self.properties),
        ]
        began = time.monotonic()
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        try:
            self._wait_until_answering(timeout)
        except (TimeoutError, RuntimeError):
            self.kill()
            raise RuntimeError(f"S3Proxy did not start:\n{self.log()[-5000:]}") from None
        self.started_in_s = time.monotonic() - began
        return self

    def _wait_until_answering(self, timeout: float) -> None:
        """Until an HTTP request gets an S3 answer (any status: unsigned, it is a 403): the
        port opens a little before the handler is in place."""
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.port}/"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=1.0):
                    return
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"S3Proxy does not answer on 127.0.0.1:{self.port} after {timeout}s")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL if it takes longer than `timeout`."""
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
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self.process = None
