# A loopback TCP proxy that injects network faults between Kafka clients and a broker.
#
# It listens on 127.0.0.1 and forwards every accepted connection to an upstream port. It reads
# Kafka framing (int32 size prefix) in both directions, so rules can act per frame: drop, delay,
# duplicate (requests), fragment, truncate, or cut the connection before/after a frame or at a
# byte count. A request's API key comes from its header; a response is matched to its request
# through the correlation id, which on one connection is the same as matching by order but
# also stays right when a request gets no answer (Produce with acks=0) or is duplicated here.
# A size no broker would accept switches that stream to raw forwarding.
#
# Invariants: the proxy runs on its own event loop in a daemon thread, so tests may drive
# blocking clients; rules, counters and the upstream address are shared with the test thread
# under one lock; frames on one stream stay in order (a delay holds back what follows it);
# every rule acts a bounded number of times and the bookkeeping per connection is capped;
# stop() closes every socket and joins the thread.
from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.broker import BrokerProcess

HOST = "127.0.0.1"
MAX_FRAME_BYTES = 100 * 1024 * 1024  # the broker's socket.request.max.bytes
MAX_DELAY_SECONDS = 60.0
MAX_PENDING_REQUESTS = 10_000  # correlation ids remembered per connection (acks=0 never answer)
MAX_CLOSED_CONNECTIONS = 1000  # closed connections still listed by connections()
_SIZE = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
_CORRELATION = struct.Struct(">i")


class Direction(enum.Enum):
    REQUEST = "request"  # client → broker
    RESPONSE = "response"  # broker → client


class Action(enum.Enum):
    DROP = "drop"  # swallow the frame; the connection stays open
    DELAY = "delay"  # hold the frame, and the rest of its stream, `delay` seconds
    DUPLICATE = "duplicate"  # requests only: send twice; the answer to the copy is swallowed
    FRAGMENT = "fragment"  # forward in writes of `fragment_bytes`, `fragment_pause` apart
    TRUNCATE = "truncate"  # forward the first `truncate_to` bytes of the frame, then cut
    CUT = "cut"  # close the connection instead of forwarding the frame
    CUT_AFTER = "cut_after"  # forward the frame, then close the connection
    CUT_AT_BYTE = "cut_at_byte"  # raw: close once `at_byte` bytes went this way on a connection


@dataclass(frozen=True, slots=True)
class Frame:
    """What a rule sees of a frame. For a response, api key and version are those of the
    request it answers (None when the proxy saw no such request)."""

    connection: int
    direction: Direction
    size: int  # payload bytes, without the size prefix
    api_key: int | None
    api_version: int | None
    correlation_id: int | None
    index: int  # 0-based position of the frame on its connection and direction


@dataclass(frozen=True, slots=True)
class Rule:
    """Acts on frames that match `direction`, `api_keys` (None: any) and `connection` (None:
    any). Of the matching frames the first `skip` pass untouched, then every `every`-th one is
    acted on, at most `limit` times in all. With `per_connection` the skip/every counting
    restarts on each connection (the limit stays global)."""

    action: Action
    direction: Direction
    api_keys: frozenset[int] | None = None
    connection: int | None = None
    skip: int = 0
    every: int = 1
    limit: int = 1
    per_connection: bool = False
    delay: float = 0.0
    truncate_to: int = 0
    at_byte: int = 0
    fragment_bytes: int = 1
    fragment_pause: float = 0.0

    def __post_init__(self) -> None:
        if self.skip < 0 or self.every < 1 or self.limit < 0:
            raise ValueError("skip >= 0, every >= 1 and limit >= 0 are required")
        if not 0.0 <= self.delay <= MAX_DELAY_SECONDS:
            raise ValueError(f"delay must be within 0..{MAX_DELAY_SECONDS} s")
        if not 0.0 <= self.fragment_pause <= 1.0 or self.fragment_bytes < 1:
            raise ValueError("fragment_bytes >= 1 and 0 <= fragment_pause <= 1 s are required")
        if self.truncate_to < 0 or self.at_byte < 0:
            raise ValueError("truncate_to and at_byte must not be negative")
        if self.action is Action.DUPLICATE and self.direction is not Direction.REQUEST:
            raise ValueError("only requests can be duplicated")

    def matches(self, frame: Frame) -> bool:
        return (
            frame.direction is self.direction
            and (self.api_keys is None or frame.api_key in self.api_keys)
            and (self.connection is None or frame.connection == self.connection)
        )


class RuleHandle:
    """A rule installed in a proxy, with what it has done so far."""

    def __init__(self, rule: Rule, lock: threading.Lock) -> None:
        self.rule = rule
        self._lock = lock
        self._matched: Counter[int | None] = Counter()  # by connection when per_connection
        self._applied = 0

    @property
    def matched(self) -> int:
        with self._lock:
            return sum(self._matched.values())

    @property
    def applied(self) -> int:
        with self._lock:
            return self._applied

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return self._applied >= self.rule.limit

    def _take(self, frame: Frame) -> bool:
        """Counts a matching frame and says whether to act on it (caller holds the lock)."""
        rule = self.rule
        key = frame.connection if rule.per_connection else None
        position = self._matched[key]
        self._matched[key] += 1
        if self._applied >= rule.limit or position < rule.skip:
            return False
        if (position - rule.skip) % rule.every:
            return False
        self._applied += 1
        return True


@dataclass(slots=True)
class ConnectionInfo:
    id: int
    client: str
    open: bool = True
    frames: Counter[Direction] = field(default_factory=Counter)
    bytes: Counter[Direction] = field(default_factory=Counter)


@dataclass(slots=True)
class _Decision:
    delay: float = 0.0
    action: Action | None = None  # the first non-delay action that applies
    rule: Rule | None = None


class _Connection:
    def __init__(
        self,
        info: ConnectionInfo,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.info = info
        self.client_reader, self.client_writer = client
        self.upstream_writer: asyncio.StreamWriter | None = None
        # correlation id → (api key, version, swallow the answer) per request sent, in order
        self.pending: OrderedDict[int, deque[tuple[int, int, bool]]] = OrderedDict()
        self.tasks: list[asyncio.Task[None]] = []
        self.closed = asyncio.Event()

    def close(self) -> None:
        for writer in (self.client_writer, self.upstream_writer):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
        self.closed.set()


class _Cut(Exception):
    """Ends both directions of a connection."""


class FaultProxy:
    """See the module comment. Typical use: start it, point the broker's
    advertised.listeners at `address`, `set_upstream(broker_port)`, then add rules."""

    def __init__(self, upstream_port: int | None = None, listen_port: int = 0) -> None:
        self._lock = threading.Lock()
        self._upstream_port = upstream_port
        self._listen_port = listen_port
        self._rules: list[RuleHandle] = []
        self._counters: Counter[str] = Counter()
        self._connections: dict[int, _Connection] = {}
        self._next_connection = 1
        self._refusing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self.port = 0

    # -- lifecycle (test thread) -----------------------------------------------------------

    def start(self, timeout: float = 10.0) -> FaultProxy:
        """Binds the listening port (known from then on as `port`) and starts serving."""
        if self._thread is not None:
            raise RuntimeError("the proxy is already running")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._run, args=(loop,), daemon=True)
        self._thread.name = "fault-proxy"
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._listen(), loop)
        try:
            started.result(timeout)
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
            stopped = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            with contextlib.suppress(Exception):
                stopped.result(timeout)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError("the fault proxy thread did not stop")
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> FaultProxy:
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """host:port for clients and for the broker's advertised.listeners."""
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- control (any thread) --------------------------------------------------------------

    def set_upstream(self, port: int | None) -> None:
        """Where new connections go (None: nowhere, they are closed at once)."""
        with self._lock:
            self._upstream_port = port

    def refuse_connections(self, refuse: bool = True) -> None:
        """While refusing, new connections are accepted and closed at once (broker down)."""
        with self._lock:
            self._refusing = refuse

    def add_rule(self, rule: Rule) -> RuleHandle:
        handle = RuleHandle(rule, self._lock)
        with self._lock:
            self._rules.append(handle)
        return handle

    def drop(
        self,
        direction: Direction,
        api_keys: Iterable[int] | None = None,
        *,
        skip: int = 0,
        every: int = 1,
        limit: int = 1,
        connection: int | None = None,
        per_connection: bool = False,
    ) -> RuleHandle:
        return self.add_rule(
            Rule(
                Action.DROP,
                direction,
                _keys(api_keys),
                connection,
                skip,
                every,
                limit,
                per_connection,
            )
        )

    def delay(
        self,
        direction: Direction,
        seconds: float,
        api_keys: Iterable[int] | None = None,
        *,
        skip: int = 0,
        every: int = 1,
        limit: int = 1,
        connection: int | None = None,
    ) -> RuleHandle:
        return self.add_rule(
            Rule(
                Action.DELAY,
                direction,
                _keys(api_keys),
                connection,
                skip,
                every,
                limit,
                delay=seconds,
            )
        )

    def duplicate_requests(
        self,
        api_keys: Iterable[int] | None = None,
        *,
        skip: int = 0,
        every: int = 1,
        limit: int = 1,
        connection: int | None = None,
    ) -> RuleHandle:
        return self.add_rule(
            Rule(
                Action.DUPLICATE,
                Direction.REQUEST,
                _keys(api_keys),
                connection,
                skip,
                every,
                limit,
            )
        )

    def cut(
        self,
        direction: Direction,
        api_keys: Iterable[int] | None = None,
        *,
        after: bool = False,
        skip: int = 0,
        every: int = 1,
        limit: int = 1,
        connection: int | None = None,
        per_connection: bool = False,
    ) -> RuleHandle:
        """Closes the connection on a matching frame: before forwarding it, or with
        `after=True` once it has been forwarded."""
        return self.add_rule(
            Rule(
                Action.CUT_AFTER if after else Action.CUT,
                direction,
                _keys(api_keys),
                connection,
                skip,
                every,
                limit,
                per_connection,
            )
        )

    def cut_at_byte(
        self, direction: Direction, at_byte: int, *, limit: int = 1, connection: int | None = None
    ) -> RuleHandle:
        """Closes a connection once `at_byte` bytes (size prefixes included) have gone in
        `direction` on it, even in the middle of a frame."""
        return self.add_rule(
            Rule(
                Action.CUT_AT_BYTE,
                direction,
                connection=connection,
                limit=limit,
                per_connection=True,
                at_byte=at_byte,
            )
        )

    def remove_rule(self, handle: RuleHandle) -> None:
        with self._lock:
            if handle in self._rules:
                self._rules.remove(handle)

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()

    def cut_connections(self, connection: int | None = None) -> int:
        """Closes one connection (or all) now; returns how many were open."""
        loop = self._loop
        if loop is None:
            return 0
        with self._lock:
            doomed = [
                c
                for c in self._connections.values()
                if c.info.open and (connection is None or c.info.id == connection)
            ]
            self._counters["cut_by_test"] += len(doomed)
        for doomed_connection in doomed:
            loop.call_soon_threadsafe(doomed_connection.close)
        return len(doomed)

    def counters(self) -> dict[str, int]:
        """A snapshot: frames_<direction>, bytes_<direction>, <action>_<direction>,
        connections_accepted/closed, refused, upstream_failures, raw_<direction>, ..."""
        with self._lock:
            return dict(self._counters)

    def count(self, action: Action, direction: Direction | None = None) -> int:
        with self._lock:
            directions = [direction] if direction is not None else list(Direction)
            return sum(self._counters[f"{action.value}_{d.value}"] for d in directions)

    def frames(self, direction: Direction, api_key: int | None = None) -> int:
        """Frames forwarded (or acted on) in `direction`, optionally of one API key."""
        with self._lock:
            suffix = "" if api_key is None else f"_key{api_key}"
            return self._counters[f"frames_{direction.value}{suffix}"]

    def connections(self) -> list[ConnectionInfo]:
        with self._lock:
            return [
                ConnectionInfo(
                    c.info.id,
                    c.info.client,
                    c.info.open,
                    Counter(c.info.frames),
                    Counter(c.info.bytes),
                )
                for c in self._connections.values()
            ]

    # -- the event loop thread ---------------------------------------------------------------

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))

    async def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, self._listen_port))
        self.port = int(sock.getsockname()[1])
        self._server = await asyncio.start_server(self._accept, sock=sock)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        with self._lock:
            connections = list(self._connections.values())
        for connection in connections:
            connection.close()
        tasks = [task for connection in connections for task in connection.tasks]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = f"{peer[0]}:{peer[1]}" if peer else "?"
        with self._lock:
            self._counters["connections_accepted"] += 1
            refusing, upstream_port = self._refusing, self._upstream_port
            connection_id = self._next_connection
            self._next_connection += 1
            if refusing or upstream_port is None:
                self._counters["refused"] += 1
        if refusing or upstream_port is None:
            writer.close()
            return
        connection = _Connection(ConnectionInfo(connection_id, client), (reader, writer))
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(HOST, upstream_port), 5
            )
        except (OSError, TimeoutError):
            with self._lock:
                self._counters["upstream_failures"] += 1
            writer.close()
            return
        connection.upstream_writer = upstream_writer
        with self._lock:
            self._connections[connection_id] = connection
        connection.tasks = [
            asyncio.create_task(self._pump(connection, Direction.REQUEST, reader, upstream_writer)),
            asyncio.create_task(
                self._pump(connection, Direction.RESPONSE, upstream_reader, writer)
            ),
        ]
        await connection.closed.wait()
        for task in connection.tasks:
            task.cancel()
        await asyncio.gather(*connection.tasks, return_exceptions=True)
        connection.close()
        with self._lock:
            connection.info.open = False
            self._counters["connections_closed"] += 1
            closed = [c for c, known in self._connections.items() if not known.info.open]
            for old in closed[: max(0, len(closed) - MAX_CLOSED_CONNECTIONS)]:
                del self._connections[old]

    async def _pump(
        self,
        connection: _Connection,
        direction: Direction,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Forwards one direction of a connection frame by frame until either side closes."""
        try:
            index = 0
            while True:
                prefix = await reader.readexactly(4)
                (size,) = _SIZE.unpack(prefix)
                if size < 0 or size > MAX_FRAME_BYTES:
                    await self._raw(connection, direction, prefix, reader, writer)
                    return
                payload = await reader.readexactly(size)
                frame, swallow = self._describe(connection, direction, payload, index)
                index += 1
                if swallow:
                    self._bump("swallowed_duplicate_responses")
                    continue
                await self._forward(connection, frame, prefix + payload, writer)
        except (asyncio.IncompleteReadError, ConnectionError, _Cut, OSError):
            pass
        finally:
            connection.close()

    def _describe(
        self, connection: _Connection, direction: Direction, payload: bytes, index: int
    ) -> tuple[Frame, bool]:
        """The frame as rules see it, and whether it is the answer to a copy made here (which
        the client must not see). A response consumes the request it answers."""
        connection_id = connection.info.id
        api_key = version = correlation_id = None
        swallow = False
        if direction is Direction.REQUEST:
            if len(payload) >= _REQUEST_HEADER.size:
                api_key, version, correlation_id = _REQUEST_HEADER.unpack_from(payload)
        elif len(payload) >= _CORRELATION.size:
            (correlation_id,) = _CORRELATION.unpack_from(payload)
            waiting = connection.pending.get(correlation_id)
            if waiting:
                api_key, version, swallow = waiting.popleft()
                if not waiting:
                    del connection.pending[correlation_id]
        frame = Frame(
            connection_id, direction, len(payload), api_key, version, correlation_id, index
        )
        return frame, swallow

    def _decide(self, frame: Frame, sent_before: int) -> _Decision:
        decision = _Decision()
        with self._lock:
            counters = self._counters
            counters[f"frames_{frame.direction.value}"] += 1
            if frame.api_key is not None:
                counters[f"frames_{frame.direction.value}_key{frame.api_key}"] += 1
            for handle in self._rules:
                rule = handle.rule
                if not rule.matches(frame):
                    continue
                if rule.action is Action.CUT_AT_BYTE:
                    crosses = sent_before + 4 + frame.size > rule.at_byte
                    if not crosses or decision.action is not None:
                        continue
                elif rule.action is not Action.DELAY and decision.action is not None:
                    continue  # one disposition per frame; later rules keep their turn
                if not handle._take(frame):
                    continue
                counters[f"{rule.action.value}_{frame.direction.value}"] += 1
                if rule.action is Action.DELAY:
                    decision.delay += rule.delay
                else:
                    decision.action, decision.rule = rule.action, rule
        return decision

    async def _forward(
        self, connection: _Connection, frame: Frame, data: bytes, writer: asyncio.StreamWriter
    ) -> None:
        direction = frame.direction
        info = connection.info
        decision = self._decide(frame, info.bytes[direction])
        if decision.delay:
            await asyncio.sleep(decision.delay)
        action = decision.action
        if action is Action.DROP:
            return
        if action is Action.CUT:
            raise _Cut
        if direction is Direction.REQUEST and frame.correlation_id is not None:
            copies = 2 if action is Action.DUPLICATE else 1
            self._expect(connection, frame, copies)
        rule = decision.rule
        if action is Action.TRUNCATE and rule is not None:
            await self._write(connection, direction, writer, data[: rule.truncate_to])
            raise _Cut
        if action is Action.CUT_AT_BYTE and rule is not None:
            await self._write(
                connection, direction, writer, data[: rule.at_byte - info.bytes[direction]]
            )
            raise _Cut
        if action is Action.FRAGMENT and rule is not None:
            step = rule.fragment_bytes
            for start in range(0, len(data), step):
                await self._write(connection, direction, writer, data[start : start + step])
                if rule.fragment_pause:
                    await asyncio.sleep(rule.fragment_pause)
        else:
            await self._write(connection, direction, writer, data)
        if action is Action.DUPLICATE:
            await self._write(connection, direction, writer, data)
        with self._lock:
            info.frames[direction] += 1
        if action is Action.CUT_AFTER:
            raise _Cut

    async def _write(
        self,
        connection: _Connection,
        direction: Direction,
        writer: asyncio.StreamWriter,
        data: bytes,
    ) -> None:
        writer.write(data)
        await writer.drain()
        with self._lock:
            connection.info.bytes[direction] += len(data)
            self._counters[f"bytes_{direction.value}"] += len(data)

    def _expect(self, connection: _Connection, frame: Frame, copies: int) -> None:
        """Remembers a forwarded request so its answer can be matched (and a copy's
        answer swallowed)."""
        assert frame.correlation_id is not None
        assert frame.api_key is not None and frame.api_version is not None
        pending = connection.pending
        waiting = pending.setdefault(frame.correlation_id, deque())
        waiting.append((frame.api_key, frame.api_version, False))
        for _ in range(copies - 1):
            waiting.append((frame.api_key, frame.api_version, True))
        while len(pending) > MAX_PENDING_REQUESTS:
            pending.popitem(last=False)

    async def _raw(
        self,
        connection: _Connection,
        direction: Direction,
        first: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Not Kafka framing (a size no broker accepts): forward bytes as they come."""
        self._bump(f"raw_{direction.value}")
        data = first
        while data:
            await self._write(connection, direction, writer, data)
            data = await reader.read(65536)

    def _bump(self, counter: str) -> None:
        with self._lock:
            self._counters[counter] += 1


def _keys(api_keys: Iterable[int] | None) -> frozenset[int] | None:
    return None if api_keys is None else frozenset(api_keys)


def broker_behind(
    proxy: FaultProxy, data_dir: Path, settings: dict[str, str] | None = None
) -> BrokerProcess:
    """A broker (not yet started) that advertises the proxy's address, so that clients
    bootstrapped through the proxy reconnect through it too; the proxy forwards to it. Its
    port stays the same across restarts, so the pair survives `broker.restart()`."""
    broker = BrokerProcess(
        data_dir, settings={**(settings or {}), "advertised.listeners": proxy.address}
    )
    proxy.set_upstream(broker.port)
    return broker
