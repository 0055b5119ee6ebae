# The console under test: an in-process ASGI client (requests straight into the app, with a
# cookie jar; no server, no network) for unit tests of its routes, and for the browser tests a
# `lockgate console` subprocess on a free loopback port with bounded waits. The browser
# fixtures themselves are in tests/browser/conftest.py.
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message

from lockgate.tools.devcluster import free_port, wait_for_port

HOST = "127.0.0.1:8080"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # lower-case names; the last of repeated ones
    text: str

    def csrf_token(self) -> str:
        found = _CSRF.search(self.text)
        assert found is not None, "the page carries no CSRF token"
        return found.group(1)


class AsgiClient:
    """Requests into an ASGI app in this event loop, keeping the cookies it sets."""

    def __init__(self, app: ASGIApp, host: str = HOST) -> None:
        self.app = app
        self.host = host
        self.cookies: dict[str, str] = {}

    async def get(self, path: str, **kwargs: Any) -> Answer:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, form: Mapping[str, str], **kwargs: Any) -> Answer:
        return await self.request("POST", path, form=form, **kwargs)

    async def request(
        self,
        method: str,
        path: str,
        *,
        form: Mapping[str, str] | None = None,
        host: str | None = None,
    ) -> Answer:
        target, _sep, query = path.partition("?")
        body = urllib.parse.urlencode(form or {}).encode()
        headers = [(b"host", (host or self.host).encode())]
        if self.cookies:
            cookie = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            headers.append((b"cookie", cookie.encode()))
        if form is not None:
            headers.append((b"content-type", b"application/x-www-form-urlencoded"))
            headers.append((b"content-length", str(len(body)).encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": urllib.parse.unquote(target),
            "raw_path": target.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8080),
        }
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        status = 0
        answer_headers: dict[str, str] = {}
        chunks: list[bytes] = []

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", []):
                    answer_headers[name.decode().lower()] = value.decode()
                    if name.lower() == b"set-cookie":
                        self._keep_cookie(value.decode())
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, receive, send)
        except Exception:
            # Starlette re-raises an unhandled error after its 500 page has been sent, for the
            # server to log; the page is what a browser gets
            if status == 0:
                raise
        return Answer(status, answer_headers, b"".join(chunks).decode())

    def _keep_cookie(self, header: str) -> None:
        pair, *attributes = header.split(";")
        name, _sep, value = pair.strip().partition("=")
        if any("1970" in attribute for attribute in attributes):
            self.cookies.pop(name, None)
        else:
            self.cookies[name] = value


class ConsoleProcess:
    """`lockgate console` in a child process on a free loopback port."""

    def __init__(
        self,
        bootstrap: str,
        log_path: Path,
        *,
        extra_args: tuple[str, ...] = (),
        password: str | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.command = [
            sys.executable,
            "-m",
            "lockgate.cli",
            "console",
            "--bootstrap-server",
            bootstrap,
            "--listen",
            f"127.0.0.1:{self.port}",
            *extra_args,
        ]
        self.env = dict(os.environ)
        self.env.pop("LOCKGATE_CONSOLE_PASSWORD", None)
        if password is not None:
            self.env["LOCKGATE_CONSOLE_PASSWORD"] = password
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ConsoleProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env
        )
        log.close()
        process = self.process
        try:
            wait_for_port(self.port, alive=lambda: process.poll() is None)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"the console did not start:\n{self.log()}") from None
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None


@contextlib.contextmanager
def running_console(bootstrap: str, log_path: Path, **kwargs: Any) -> Iterator[ConsoleProcess]:
    console = ConsoleProcess(bootstrap, log_path, **kwargs).start()
    try:
        yield console
    finally:
        console.stop()


# ---------------------------------------------------------------------------------------------
# Real data for the console to show, written by confluent-kafka (librdkafka).

PLAIN_TOPIC = "orders-plain"
JSON_TOPIC = "orders-json"
BINARY_TOPIC = "blobs-binary"
TXN_TOPIC = "payments-txn"
BULK_PREFIX = "bulk-"
BULK_TOPICS = 120  # more than a page of the topics list
RECORDS = 30
JSON_BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z; JSON record i is 1 s after i-1


@dataclass(frozen=True)
class ConsoleData:
    bootstrap: str
    committed_values: tuple[str, ...]
    aborted_values: tuple[str, ...]


def json_value(index: int) -> bytes:
    import json

    return json.dumps({"id": index, "item": f"widget-{index}", "price": 10 + index}).encode()


def binary_value(index: int) -> bytes:
    return bytes([0, 0xFF, index, 0x80, 0x7F]) + bytes(range(index % 7))


def write_console_data(bootstrap: str) -> ConsoleData:
    """Topics of plain, JSON and binary records (with headers), a topic holding a committed
    and an aborted transaction, and BULK_TOPICS small topics; returns what the pages show."""
    # blocking clients only: the browser tests' Playwright runs an event loop in this thread
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [
            NewTopic(PLAIN_TOPIC, 3, 1, config={"retention.ms": "86400000"}),
            NewTopic(JSON_TOPIC, 1, 1),
            NewTopic(BINARY_TOPIC, 1, 1),
            NewTopic(TXN_TOPIC, 1, 1),
            *(NewTopic(f"{BULK_PREFIX}{i:03d}", 1, 1) for i in range(BULK_TOPICS)),
        ],
        operation_timeout=30,
    )
    for future in created.values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(PLAIN_TOPIC, f"plain value {i}".encode(), f"key-{i}".encode(), i % 3)
        producer.produce(
            JSON_TOPIC, json_value(i), f"order-{i}".encode(), 0, timestamp=JSON_BASE_MS + i * 1000
        )
        producer.produce(
            BINARY_TOPIC,
            binary_value(i),
            None,
            0,
            headers=[("trace-id", f"trace-{i}".encode()), ("raw", b"\x00\xfe")],
        )
    assert producer.flush(30) == 0
    committed = tuple(f"committed-{i}" for i in range(3))
    aborted = tuple(f"aborted-{i}" for i in range(2))
    transactional = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "console-txn", "linger.ms": 5}
    )
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for value in committed:
        transactional.produce(TXN_TOPIC, value.encode(), b"t", 0)
    transactional.commit_transaction(30)
    transactional.begin_transaction()
    for value in aborted:
        transactional.produce(TXN_TOPIC, value.encode(), b"t", 0)
    transactional.flush(30)
    transactional.abort_transaction(30)
    producer.produce(TXN_TOPIC, b"after-transactions", b"p", 0)
    assert producer.flush(30) == 0
    return ConsoleData(bootstrap, committed, aborted)
