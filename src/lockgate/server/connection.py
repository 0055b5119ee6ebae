# One client connection: reads frames, runs each request as a task, writes responses in
# request order. Requests are started in arrival order and handlers change state before their
# first await, so pipelined requests take effect in order while slow ones (fsync, long-poll
# fetch) overlap. A frame that cannot be a valid request closes the connection, as Kafka does.
# Before a frame's body is read its size is reserved from the broker's request memory (released
# when the request has been handled), and a connection with no request in flight and no
# complete request for connections.max.idle.ms is closed. On a SASL listener requests pass
# the connection's SaslGate until it has authenticated; a connection throttled by a quota is
# not read until its throttle time has passed (KIP-219).
# A Fetch answer's record bytes may be ranges of segment files (protocol/file_range.py): on a
# plain TCP connection whose transport has nothing queued they go to the socket with sendfile
# (socket_writes.py), otherwise they are read and written through the transport. The
# connection owns the ranges of every answer handed to it: each is closed once written or
# dropped (a broken connection, a failed write, a closing connection with answers queued).
from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import socket
import struct
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from lockgate.handlers.registry import (
    HANDLERS,
    HandlerSpec,
    RawBody,
    RequestContext,
)
from lockgate.protocol.api import (
    ApiKey,
    BodyDecodeError,
    build,
    encode,
    is_flexible,
    response_class,
)
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.file_range import FileRange, Part, RangeCut, close_ranges
from lockgate.protocol.frame import (
    MalformedFrame,
    parse_request_header,
    peek_api,
    response_frame,
    response_frame_parts,
)
from lockgate.protocol.metadata import encode_metadata_response
from lockgate.security.listeners import enabled_mechanisms
from lockgate.security.quotas import SELF_CHARGED_API_KEYS, QuotaType, measured
from lockgate.security.session import Session
from lockgate.security.tls import peer_principal
from lockgate.server.log_context import (
    ConnectionContext,
    current_connection,
    current_request,
)
from lockgate.server.sasl_gate import SaslGate
from lockgate.server.socket_writes import as_buffers, write_parts

# Answers encoded by hand rather than by kio's builder, where the builder's cost grows with the
# answer (Metadata for thousands of partitions). Their handlers still answer a dict, so that the
# quota path can set its throttle time.
HAND_ENCODED: dict[int, Callable[[int, Mapping[str, Any]], bytes]] = {
    ApiKey.METADATA: encode_metadata_response,
}

if TYPE_CHECKING:
    from lockgate.handlers.services import Services
    from lockgate.security.listeners import Listener
    from lockgate.server.connection_limits import RequestMemory
    from lockgate.server.metrics import BrokerMetrics

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_SERIALS = itertools.count(1)  # a newer connection has a larger serial
_WRITE_HIGH_WATER = 4 << 20
_TCP_CORK: int | None = getattr(socket, "TCP_CORK", None)  # Linux
# A response as written: one buffer, or parts written in turn (a Fetch's record bytes are never
# joined into one frame: bytes as read, or ranges of segment files sent from there).
Frame = bytes | list[Part]


class CloseConnection(Exception):
    pass


class Connection:
    def __init__(
        self,
        services: Services,
        metrics: BrokerMetrics,
        request_memory: RequestMemory,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: Listener,
    ) -> None:
        self.services = services
        self.config = services.config
        self.quotas = services.quotas
        self.metrics = metrics
        self.request_memory = request_memory
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        host = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self.session = Session(
            listener.name, listener.protocol, host, authenticated=not listener.protocol.uses_sasl
        )
        if listener.protocol.uses_tls and not listener.protocol.uses_sasl:
            # SSL: the client certificate's DN when it sent one (SASL_SSL: the SASL user)
            principal = peer_principal(writer.get_extra_info("peercert"))
            if principal is not None:
                self.session.principal = principal
        self.client_id: str | None = None
        # SASL listeners: the authentication (requests pass it until the session is
        # authenticated)
        self.sasl = (
            SaslGate(tuple(enabled_mechanisms(services.config, listener.name)), self.stop_reading)
            if listener.protocol.uses_sasl
            else None
        )
        self.serial = next(_SERIALS)
        self._queue: asyncio.Queue[asyncio.Task[Frame | None] | bytes | None] = asyncio.Queue(
            maxsize=services.config.integer("queued.max.requests")
        )
        self._read_task: asyncio.Task[None] | None = None
        # the socket to sendfile to: plain TCP only (TLS encrypts in Python: ranges are read)
        self.socket_fd = None if listener.protocol.uses_tls else _socket_fd(writer)
        self._socket = writer.get_extra_info("socket") if self.socket_fd is not None else None
        self.last_active = time.monotonic()  # the last complete request or response written
        self.in_flight = 0  # requests read and not yet answered

    async def run(self) -> None:
        # the tasks below inherit it: log lines about this connection name its client
        current_connection.set(ConnectionContext(self.peer, self.session.listener, self.serial))
        metrics = self.metrics
        metrics.connection_opened(self.session.listener)
        writer_task = asyncio.create_task(self._write_loop())
        self._read_task = asyncio.create_task(self._read_loop())
        idle_ms = self.config.integer("connections.max.idle.ms")
        watch = asyncio.create_task(self._idle_watch(idle_ms / 1000)) if idle_ms > 0 else None
        try:
            await self._read_task
        except asyncio.CancelledError:
            pass
        finally:
            if watch is not None:
                watch.cancel()
            await self._queue.put(None)
            self.quotas.mutes.pop(self.serial, None)
            try:
                await writer_task
            finally:
                self.writer.close()
                metrics.connection_closed(self.session.listener)

    async def _idle_watch(self, idle_s: float) -> None:
        """Closes the connection once it has had nothing in flight and no complete request
        for `idle_s`. A partial frame does not count as activity: a client trickling a huge
        frame must not hold its reserved memory for ever."""
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 10.0))
            idle = time.monotonic() - self.last_active
            if self.in_flight == 0 and idle >= idle_s:
                log.info(
                    "closing connection from %s (client id %r): idle for %.0f ms "
                    "(connections.max.idle.ms)",
                    self.peer,
                    self.client_id,
                    idle * 1000,
                )
                self.stop_reading()
                return

    def stop_reading(self) -> None:
        """Graceful shutdown: no new requests; in-flight ones are answered, then we close."""
        if self._read_task is not None:
            self._read_task.cancel()

    async def _read_loop(self) -> None:
        max_size = self.config.integer("socket.request.max.bytes")
        memory = self.request_memory
        try:
            while True:
                (size,) = _SIZE.unpack(await self.reader.readexactly(4))
                if size < 0 or size > max_size:
                    raise CloseConnection(
                        f"frame of {size} bytes is outside 0..socket.request.max.bytes={max_size}"
                    )
                await memory.acquire(size)
                try:
                    payload = await self.reader.readexactly(size)
                    if self.quotas.mutes:  # KIP-219: a throttled client is not read
                        await self._throttled()
                    item = self._dispatch(payload)
                except BaseException as exc:
                    memory.release(size)
                    if isinstance(exc, asyncio.IncompleteReadError):
                        raise CloseConnection(
                            f"the stream ended {len(exc.partial)} bytes into a frame of {size}"
                        ) from None
                    raise
                if isinstance(item, asyncio.Task):
                    item.add_done_callback(functools.partial(_give_back, memory, size))
                else:
                    memory.release(size)
                self.last_active = time.monotonic()
                self.in_flight += 1
                await self._queue.put(item)
                if not self.session.authenticated and isinstance(item, asyncio.Task):
                    # one step of authentication at a time: the next frame's meaning (a
                    # request, a raw SASL token, or refused) depends on this one's outcome
                    await asyncio.wait([item])
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                log.warning(
                    "connection from %s (client id %r) ended inside a frame size prefix",
                    self.peer,
                    self.client_id,
                )
        except ConnectionError:
            return
        except CloseConnection as exc:
            log.warning(
                "closing connection from %s (client id %r): %s", self.peer, self.client_id, exc
            )

    async def _throttled(self) -> None:
        while (remaining := self.quotas.mute_remaining(self.serial)) > 0:
            await asyncio.sleep(remaining)

    def _dispatch(self, payload: bytes) -> asyncio.Task[Frame | None] | bytes:
        gate = None if self.session.authenticated else self.sasl
        if gate is not None and gate.raw_tokens:
            context = self._context(ApiKey.SASL_AUTHENTICATE, 0, 0, self.client_id)
            return asyncio.create_task(gate.raw_token(context, payload))
        try:
            api_key, version, correlation_id = peek_api(payload)
        except MalformedFrame as exc:
            raise CloseConnection(str(exc)) from None
        if gate is not None and (refusal := gate.refusal(api_key, self.session.listener)):
            self._note_client_id(payload)
            raise CloseConnection(refusal)
        spec = HANDLERS.get(api_key)
        if spec is None:
            self._note_client_id(payload)
            raise CloseConnection(f"unknown API key {api_key}")
        if not spec.min_version <= version <= spec.max_version:
            self._note_client_id(payload)
            if api_key == ApiKey.API_VERSIONS:
                log.info(
                    "%s (client id %r) asked for ApiVersions v%d; answering with v0",
                    self.peer,
                    self.client_id,
                    version,
                )
                return response_frame(correlation_id, False, unsupported_api_versions())
            raise CloseConnection(
                f"{ApiKey(api_key).name} v{version} is not supported "
                f"(v{spec.min_version}-{spec.max_version})"
            )
        try:
            header, request = spec.decode(payload, version)
        except (MalformedFrame, BodyDecodeError) as exc:
            self._note_client_id(payload)
            raise CloseConnection(f"malformed {ApiKey(api_key).name} v{version}: {exc}") from None
        self.client_id = header.client_id
        context = self._context(api_key, version, correlation_id, header.client_id)
        response_flexible = is_flexible(api_key, version) and api_key != ApiKey.API_VERSIONS
        if gate is not None:
            spec = gate.handler_for(spec)
        return asyncio.create_task(self._handle(spec, context, request, response_flexible))

    def _context(
        self, api_key: int, version: int, correlation_id: int, client_id: str | None
    ) -> RequestContext:
        return RequestContext(
            self.services,
            api_key,
            version,
            correlation_id,
            client_id,
            self.peer,
            self.serial,
            self.session,
        )

    def _note_client_id(self, payload: bytes) -> None:
        """Reads the client id of a request rejected before its header is parsed, so that the
        log line names the client: the header up to the client id is the same in every API."""
        with contextlib.suppress(MalformedFrame):
            self.client_id = parse_request_header(payload, None).client_id

    async def _handle(
        self, spec: HandlerSpec, context: RequestContext, request: object, flexible: bool
    ) -> Frame | None:
        current_request.set(context)  # this request's task only: its log lines carry it
        try:
            quotas = self.quotas
            if QuotaType.REQUEST in quotas.kinds and spec.api_key not in SELF_CHARGED_API_KEYS:
                result = await measured(quotas, spec.handler, context, request)
            else:
                result = await spec.handler(context, request)
            error = None  # the top-level error code (a hand-encoded answer gives its own, if any)
            if result is None:
                body = None
            elif isinstance(result, RawBody):
                body = result.data
                error = result.error
            else:
                version = context.api_version
                hand = HAND_ENCODED.get(spec.api_key)
                if hand is not None:
                    body = hand(version, result)
                else:
                    body = encode(build(response_class(spec.api_key, version), result))
                error = result.get("error_code")
        except Exception:
            log.exception(
                "%s v%d from %s (client id %r) failed; closing the connection",
                spec.api_key.name,
                context.api_version,
                self.peer,
                self.client_id,
            )
            self.stop_reading()
            return None
        self.metrics.request_done(spec.api_key, time.monotonic() - context.started, error)
        if body is None:
            return None
        if isinstance(body, list):
            return response_frame_parts(context.correlation_id, flexible, body)
        return response_frame(context.correlation_id, flexible, body)

    async def _write_loop(self) -> None:
        writer = self.writer
        broken = False
        try:
            while (item := await self._queue.get()) is not None:
                frame = item if isinstance(item, bytes) else await item
                self.in_flight -= 1
                self.last_active = time.monotonic()
                if frame is None:
                    continue
                try:
                    if broken:
                        continue
                    if isinstance(frame, list):
                        self._write_parts(frame)
                    else:
                        writer.write(frame)
                    if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                        await writer.drain()
                except RangeCut as exc:
                    # the frame's size promised bytes the file no longer holds: no wrong-sized
                    # (or wrong) frame goes out; the client reconnects and fetches again
                    log.warning(
                        "closing connection from %s (client id %r): a Fetch answer's records "
                        "were cut from their segment before they were sent (%s)",
                        self.peer,
                        self.client_id,
                        exc,
                    )
                    writer.transport.abort()
                    broken = True
                    self.stop_reading()
                except (ConnectionError, RuntimeError):  # the client went away
                    broken = True
                    self.stop_reading()
                except OSError as exc:  # reading a range, or writing to the socket directly
                    log.warning(
                        "closing connection from %s (client id %r): writing a response failed: %s",
                        self.peer,
                        self.client_id,
                        exc,
                    )
                    writer.transport.abort()
                    broken = True
                    self.stop_reading()
                finally:
                    close_ranges(frame)
            if not broken:
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
        finally:
            self._drop_queued()

    def _write_parts(self, parts: list[Part]) -> None:
        """Writes a frame's parts. Ranges of segment files go by sendfile when the socket's
        transport has nothing queued: then nothing the transport was given is still waiting to
        go, so bytes written to the socket directly come after everything written before them.
        (uvloop, read in its source, handles/stream.pyx: get_write_buffer_size() is
        UVStream._get_write_buffer_size, its own buffer, written at the end of the loop
        iteration when libuv's queue is not empty, plus libuv's write queue; asyncio's
        selector transport: the bytes its send() did not take.) What the socket does not take
        at once goes through the transport, the ranges read into bytes. Otherwise (data
        queued, TLS, no socket) every range is read and the transport writes it all: the
        copying path."""
        transport = self.writer.transport
        if not any(isinstance(part, FileRange) for part in parts):
            self.writer.writelines(as_buffers(parts))  # one vectored write on uvloop
            return
        socket_fd = self.socket_fd
        if (
            socket_fd is not None
            and transport.get_write_buffer_size() == 0
            and not transport.is_closing()  # its descriptor may be closed (and reused) soon
        ):
            # corked: the framing between the ranges joins their segments instead of going
            # as packets of a few bytes each (the socket has TCP_NODELAY); uncorking sends
            self._cork(1)
            try:
                rest = write_parts(socket_fd, parts)
            finally:
                self._cork(0)
        else:
            rest = as_buffers(parts)
        if rest:
            self.writer.writelines(rest)

    def _cork(self, on: int) -> None:
        if _TCP_CORK is not None and self._socket is not None:
            with contextlib.suppress(OSError):  # a closing socket: the write says so
                self._socket.setsockopt(socket.IPPROTO_TCP, _TCP_CORK, on)

    def _drop_queued(self) -> None:
        """Closes the file ranges of answers the write loop will not write (it ended early:
        cancelled, or failed): those answered already now, the others when they are."""
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, asyncio.Task):
                item.add_done_callback(_close_answer)


def _close_answer(task: asyncio.Task[Frame | None]) -> None:
    if not task.cancelled() and task.exception() is None:
        close_ranges(task.result())


def _socket_fd(writer: asyncio.StreamWriter) -> int | None:
    """The descriptor of the connection's TCP socket, None when there is none to write to
    directly (a TLS transport, or a transport without a socket)."""
    if writer.get_extra_info("ssl_object") is not None:
        return None
    sock = writer.get_extra_info("socket")
    if sock is None:
        return None
    fd = sock.fileno()
    return fd if isinstance(fd, int) and fd >= 0 else None


def _give_back(memory: RequestMemory, size: int, _handled: object) -> None:
    memory.release(size)


def unsupported_api_versions() -> bytes:
    """The v0 ApiVersions answer to a version we do not know, listing what we support."""
    from lockgate.handlers.k18_api_versions import supported_versions

    return encode(
        build(
            response_class(ApiKey.API_VERSIONS, 0),
            {"error_code": ErrorCode.unsupported_version, "api_keys": supported_versions()},
        )
    )
