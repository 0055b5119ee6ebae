# A loopback HTTP/1.1 proxy that injects object store faults between the broker's S3 client and
# an S3 server (S3Proxy): a 500 InternalError on some requests, slow responses, or the store
# down (the listening port closed: connections are refused).
#
# It listens on 127.0.0.1 and reads each request whole (headers, then a body framed by
# Content-Length or chunked encoding, forwarded byte for byte), sends it upstream on a fresh
# connection of its own, reads the one response the same way and relays it; the client's
# connection stays open for its next request. Nothing is rewritten: S3 SigV4 signs the Host
# header, and the client signed the proxy's address, which S3Proxy accepts as sent.
#
# Rules (set at run time, from any thread) match a method and a regular expression searched in
# the request target (path and query). A FAIL rule answers with a 500 and an S3 XML error
# body, either without forwarding the request (the store never saw it) or after forwarding it
# (the store did it, the client is told it failed: the ambiguous case). A DELAY rule holds the
# response back. Of the matching requests every `every`-th one, or with `percent` a seeded
# random share, is acted on, at most `limit` times.
#
# Invariants: the proxy runs its own event loop in a daemon thread, so blocking clients and
# tests can drive it; rules and counters are shared with the test thread under one lock; every
# read is bounded in size and time, delays are capped; stop() closes every socket and joins
# the thread.
from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import re
import socket
import threading
import uuid
from collections import Counter, deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

HOST = "127.0.0.1"
MAX_HEAD_BYTES = 64 << 10
MAX_BODY_BYTES = 256 << 20
MAX_DELAY_SECONDS = 60.0
UPSTREAM_TIMEOUT_SECONDS = 60.0
HISTORY = 10_000  # requests remembered for the tests' assertions

ERROR_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>InternalError</Code>"
    "<Message>We encountered an internal error. Please try again.</Message>"
    "<Resource>{resource}</Resource><RequestId>{request_id}</RequestId></Error>"
)


class Action(enum.Enum):
    FAIL = "fail"
    DELAY = "delay"


@dataclass
class Rule:
    """Acts on requests whose method is `method` (None: any) and whose target matches `path`
    (a regular expression searched in it; None: any)."""

    action: Action
    method: str | None = None
    path: str | None = None
    every: int = 1
    percent: float | None = None  # instead of every: this share of the matches, seeded
    limit: int | None = None  # None: no limit
    forward: bool = False  # FAIL: forward the request first (the store does it)
    delay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.every < 1 or (self.limit is not None and self.limit < 0):
            raise ValueError("every >= 1 and limit >= 0 are required")
        if self.percent is not None and not 0.0 <= self.percent <= 100.0:
            raise ValueError("percent must be within 0..100")
        if not 0.0 <= self.delay <= MAX_DELAY_SECONDS:
            raise ValueError(f"delay must be within 0..{MAX_DELAY_SECONDS} s")
        self._pattern = re.compile(self.path) if self.path is not None else None

    def matches(self, method: str, target: str) -> bool:
        return (self.method is None or self.method == method) and (
            self._pattern is None or self._pattern.search(target) is not None
        )


class RuleHandle:
    """A rule installed in a proxy, with what it has done so far."""

    def __init__(self, rule: Rule, lock: threading.Lock) -> None:
        self.rule = rule
        self._lock = lock
        self._random = random.Random(rule.seed)
        self._matched = 0
        self._applied = 0

    @property
    def matched(self) -> int:
        with self._lock:
            return self._matched

    @property
    def applied(self) -> int:
        with self._lock:
            return self._applied

    def _take(self) -> bool:
        """Counts a matching request and says whether to act on it (caller holds the lock)."""
        rule = self.rule
        position = self._matched
        self._matched += 1
        if rule.limit is not None and self._applied >= rule.limit:
            return False
        if rule.percent is not None:
            if self._random.random() * 100.0 >= rule.percent:
                return False
        elif position % rule.every:
            return False
        self._applied += 1
        return True


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request as the proxy handled it: the status the client got (0: no answer)."""

    method: str
    target: str
    status: int
    failed: bool  # answered with the injected 500
    delayed: bool


class _Bad(Exception):
    """A message the proxy cannot frame: its connection is closed."""


@dataclass
class _Message:
    head: bytes  # start line and headers, up to and including the blank line
    start: list[str]  # the start line's words
    headers: dict[str, str]  # lower-case names (the last one wins)
    body: bytes = b""
    until_close: bool = False  # a response framed by the connection's end


class HttpFaultProxy:
    """See the module comment. Typical use: start it in front of S3Proxy's port, give the
    client `endpoint`, then add rules or take the store `down()` and `up()` again."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._lock = threading.Lock()
        self._rules: list[RuleHandle] = []
        self._counters: Counter[str] = Counter()
        self._history: deque[Exchange] = deque(maxlen=HISTORY)
        self._in_flight = 0
        self._down = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    # -- lifecycle (test thread) -----------------------------------------------------------

    def start(self, timeout: float = 10.0) -> HttpFaultProxy:
        if self._thread is not None:
            raise RuntimeError("the proxy is already running")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._thread.name = "http-fault-proxy"
        self._thread.start()
        try:
            self._call(self._listen(), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Closes the listener and every connection, then ends the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            with contextlib.suppress(Exception):
                self._call(self._close(cancel=True), timeout)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError("the HTTP fault proxy thread did not stop")
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> HttpFaultProxy:
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    # -- control (any thread) --------------------------------------------------------------

    def down(self, timeout: float = 10.0) -> None:
        """The store goes down: the port is closed (new connections are refused) and every
        open connection is cut, requests in flight included."""
        with self._lock:
            self._down = True
        self._call(self._close(cancel=True), timeout)

    def up(self, timeout: float = 10.0) -> None:
        """The store is back, on the same port."""
        with self._lock:
            self._down = False
        self._call(self._listen(), timeout)

    def add_rule(self, rule: Rule) -> RuleHandle:
        handle = RuleHandle(rule, self._lock)
        with self._lock:
            self._rules.append(handle)
        return handle

    def fail(
        self,
        method: str | None = None,
        path: str | None = None,
        *,
        every: int = 1,
        percent: float | None = None,
        limit: int | None = None,
        forward: bool = False,
        seed: int = 0,
    ) -> RuleHandle:
        """Answers matching requests with 500 InternalError (see Rule)."""
        rule = Rule(Action.FAIL, method, path, every, percent, limit, forward, seed=seed)
        return self.add_rule(rule)

    def delay(
        self,
        seconds: float,
        method: str | None = None,
        path: str | None = None,
        *,
        every: int = 1,
        limit: int | None = None,
    ) -> RuleHandle:
        """Holds the responses to matching requests back for `seconds`."""
        return self.add_rule(Rule(Action.DELAY, method, path, every, limit=limit, delay=seconds))

    def remove_rule(self, handle: RuleHandle) -> None:
        with self._lock:
            if handle in self._rules:
                self._rules.remove(handle)

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()

    @property
    def counters(self) -> dict[str, int]:
        """requests, forwarded, failed, delayed, upstream_failures, bad_requests."""
        with self._lock:
            return dict(self._counters)

    @property
    def in_flight(self) -> int:
        """Requests read and not answered yet."""
        with self._lock:
            return self._in_flight

    def history(self) -> list[Exchange]:
        with self._lock:
            return list(self._history)

    # -- the event loop thread ---------------------------------------------------------------

    def _call(self, coroutine: Coroutine[Any, Any, None], timeout: float) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _listen(self) -> None:
        if self._server is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, self.port))
        self.port = int(sock.getsockname()[1])
        self._server = await asyncio.start_server(self._accept, sock=sock, limit=MAX_HEAD_BYTES)

    async def _close(self, cancel: bool) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()
        tasks = list(self._tasks)
        if cancel:
            for task in tasks:
                task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        with self._lock:
            down = self._down
        if down:  # (accepted just before the port closed)
            writer.close()
            return
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            while await self._exchange(reader, writer):
                pass
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, _Bad):
            with self._lock:
                self._counters["bad_requests"] += 1
        except asyncio.CancelledError:
            pass  # down() or stop(): ends normally (asyncio's stream callback logs otherwise)
        finally:
            writer.close()
            self._writers.discard(writer)
            self._tasks.discard(task)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request and its response; whether the connection takes another."""
        try:
            request = await _read_message(reader, request=True, method="")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return False  # the client closed between requests
        method, target = request.start[0], request.start[1]
        if request.headers.get("expect", "").lower() == "100-continue":
            raise _Bad("Expect: 100-continue is not supported")
        with self._lock:
            self._counters["requests"] += 1
            self._in_flight += 1
            fail: Rule | None = None
            delay = 0.0
            for handle in self._rules:
                if handle.rule.matches(method, target) and handle._take():
                    if handle.rule.action is Action.FAIL and fail is None:
                        fail = handle.rule
                    elif handle.rule.action is Action.DELAY:
                        delay = max(delay, handle.rule.delay)
        answered = False
        try:
            response: _Message | None = None
            if fail is None or fail.forward:
                response = await self._forward(request, method)
            if delay:
                await asyncio.sleep(delay)
            if fail is not None:
                answer, status = _error_response(target), 500
            else:
                assert response is not None
                answer, status = response.head + response.body, int(response.start[1])
            with self._lock:  # counted before the client can see the answer
                self._counters["failed" if fail is not None else "answered"] += 1
                if delay:
                    self._counters["delayed"] += 1
                exchange = Exchange(method, target, status, fail is not None, bool(delay))
                self._history.append(exchange)
                self._in_flight -= 1
                answered = True
            writer.write(answer)
            await writer.drain()
        finally:
            if not answered:
                with self._lock:
                    self._in_flight -= 1
        keep = request.headers.get("connection", "").lower() != "close"
        return keep and not (response is not None and response.until_close)

    async def _forward(self, request: _Message, method: str) -> _Message:
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(HOST, self.upstream_port, limit=MAX_HEAD_BYTES), 5
            )
        except (OSError, TimeoutError):
            with self._lock:
                self._counters["upstream_failures"] += 1
            raise
        try:
            up_writer.write(request.head + request.body)
            await up_writer.drain()
            response = await asyncio.wait_for(
                _read_message(up_reader, request=False, method=method), UPSTREAM_TIMEOUT_SECONDS
            )
        finally:
            up_writer.close()
        with self._lock:
            self._counters["forwarded"] += 1
        return response


async def _read_message(reader: asyncio.StreamReader, *, request: bool, method: str) -> _Message:
    """A whole request or response (`method`: the request's, for a response's framing)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].decode("latin-1").split("\r\n")
    start = lines[0].split(" ", 2)
    if len(start) < 2 + request:
        raise _Bad(f"bad start line {lines[0]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise _Bad(f"bad header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    message = _Message(head, start, headers)
    if not request:
        status = int(start[1])
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return message
    if "chunked" in headers.get("transfer-encoding", "").lower():
        message.body = await _read_chunked(reader)
    elif "content-length" in headers:
        length = int(headers["content-length"])
        if not 0 <= length <= MAX_BODY_BYTES:
            raise _Bad(f"body of {length} bytes")
        message.body = await reader.readexactly(length)
    elif not request:  # a response without framing ends with its connection
        message.body = await reader.read(MAX_BODY_BYTES)
        message.until_close = True
    return message


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body as it came (sizes, data, trailers), to be forwarded unchanged."""
    parts: list[bytes] = []
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        parts.append(line)
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            break
        total += size
        if total > MAX_BODY_BYTES:
            raise _Bad("chunked body too large")
        parts.append(await reader.readexactly(size + 2))
    while True:  # trailers, up to the blank line
        line = await reader.readuntil(b"\r\n")
        parts.append(line)
        if line == b"\r\n":
            return b"".join(parts)


def _error_response(target: str) -> bytes:
    request_id = uuid.uuid4().hex[:16].upper()
    resource = target.split("?", 1)[0].replace("&", "&amp;").replace("<", "&lt;")
    body = ERROR_BODY.format(resource=resource, request_id=request_id).encode()
    head = (
        "HTTP/1.1 500 Internal Server Error\r\n"
        "Content-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"x-amz-request-id: {request_id}\r\n"
        "\r\n"
    )
    return head.encode() + body
