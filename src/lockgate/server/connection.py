# One client connection: reads frames, runs each request as a task, writes responses in
# request order. Requests are started in arrival order and handlers change state before their
# first await, so pipelined requests take effect in order while slow ones (fsync, long-poll
# fetch) overlap. A frame that cannot be a valid request closes the connection, as Kafka does.
# Before a frame's body is read its size is reserved from the broker's request memory (released
# when the request has been handled), and a connection with no request in flight and no
# complete request for connections.max.idle.ms is closed.
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lockgate.handlers import k17_sasl_handshake, k36_sasl_authenticate
from lockgate.handlers.registry import (
    HANDLERS,
    HandlerResult,
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
from lockgate.protocol.frame import MalformedFrame, parse_request_header, peek_api, response_frame
from lockgate.security.listeners import enabled_mechanisms
from lockgate.security.quotas import SELF_CHARGED_API_KEYS, QuotaType, measured
from lockgate.security.scram import (
    STAND_IN_SECRET,
    AuthenticationFailed,
    IllegalSaslState,
    SaslExchange,
    SaslStep,
)
from lockgate.security.session import Session
from lockgate.security.tls import peer_principal

if TYPE_CHECKING:
    from lockgate.security.listeners import Listener
    from lockgate.server.broker import Broker
    from lockgate.server.connection_limits import RequestMemory

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_SERIALS = itertools.count(1)  # a newer connection has a larger serial
_WRITE_HIGH_WATER = 4 << 20
_FAILED_GRACE_S = 2.0  # how long a failed authentication's answer waits to be read


class CloseConnection(Exception):
    pass


class Connection:
    def __init__(
        self,
        broker: Broker,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        listener: Listener,
    ) -> None:
        self.broker = broker
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
        # SASL listeners: the authentication in progress (None once it is not needed)
        self.sasl = (
            SaslExchange(tuple(enabled_mechanisms(broker.config, listener.name)), STAND_IN_SECRET)
            if listener.protocol.uses_sasl
            else None
        )
        self.serial = next(_SERIALS)
        self._queue: asyncio.Queue[asyncio.Task[bytes | None] | bytes | None] = asyncio.Queue(
            maxsize=broker.config.integer("queued.max.requests")
        )
        self._read_task: asyncio.Task[None] | None = None
        self.last_active = time.monotonic()  # the last complete request or response written
        self.in_flight = 0  # requests read and not yet answered

    async def run(self) -> None:
        writer_task = asyncio.create_task(self._write_loop())
        self._read_task = asyncio.create_task(self._read_loop())
        idle_ms = self.broker.config.integer("connections.max.idle.ms")
        watch = asyncio.create_task(self._idle_watch(idle_ms / 1000)) if idle_ms > 0 else None
        try:
            await self._read_task
        except asyncio.CancelledError:
            pass
        finally:
            if watch is not None:
                watch.cancel()
            await self._queue.put(None)
            self.broker.quotas.mutes.pop(self.serial, None)
            try:
                await writer_task
            finally:
                self.writer.close()

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
        max_size = self.broker.config.integer("socket.request.max.bytes")
        memory = self.broker.request_memory
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
                    if self.broker.quotas.mutes:  # KIP-219: a throttled client is not read
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
        while (remaining := self.broker.quotas.mute_remaining(self.serial)) > 0:
            await asyncio.sleep(remaining)

    def _dispatch(self, payload: bytes) -> asyncio.Task[bytes | None] | bytes:
        sasl = self.sasl
        if sasl is not None and sasl.raw_tokens and not self.session.authenticated:
            return asyncio.create_task(self._raw_sasl_token(sasl, payload))
        try:
            api_key, version, correlation_id = peek_api(payload)
        except MalformedFrame as exc:
            raise CloseConnection(str(exc)) from None
        if sasl is not None and not self.session.authenticated:
            self._check_authenticating(sasl, api_key, payload)
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
        context = RequestContext(
            self.broker,
            api_key,
            version,
            correlation_id,
            header.client_id,
            self.peer,
            self.serial,
            self.session,
        )
        response_flexible = is_flexible(api_key, version) and api_key != ApiKey.API_VERSIONS
        if sasl is not None and not self.session.authenticated:
            spec = self._authenticating(sasl, spec)
        return asyncio.create_task(self._handle(spec, context, request, response_flexible))

    # -- SASL authentication (Kafka's SaslServerAuthenticator) ------------------------------

    def _check_authenticating(self, sasl: SaslExchange, api_key: int, payload: bytes) -> None:
        """Before authentication only ApiVersions and SaslHandshake, then SaslAuthenticate,
        are served; anything else closes the connection, as Kafka does."""
        allowed = {
            SaslStep.HANDSHAKE: (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE),
            SaslStep.AUTHENTICATE: (ApiKey.SASL_AUTHENTICATE,),
        }.get(sasl.step, ())
        if api_key not in allowed:
            self._note_client_id(payload)
            try:
                name = ApiKey(api_key).name
            except ValueError:
                name = f"API key {api_key}"
            raise CloseConnection(
                f"{name} on listener {self.session.listener} before SASL authentication "
                f"completed (step {sasl.step.name})"
            )

    def _authenticating(self, sasl: SaslExchange, spec: HandlerSpec) -> HandlerSpec:
        """The handler of a request while authenticating: the connection's exchange is
        passed in, and a failed exchange closes the connection after its answer."""
        step: Callable[[SaslExchange, RequestContext, Any], Awaitable[HandlerResult]]
        if spec.api_key == ApiKey.SASL_HANDSHAKE:
            step = k17_sasl_handshake.handshake
        elif spec.api_key == ApiKey.SASL_AUTHENTICATE:
            step = k36_sasl_authenticate.authenticate
        else:
            return spec  # ApiVersions

        async def handler(context: RequestContext, request: Any) -> HandlerResult:
            result = await step(sasl, context, request)
            self._after_sasl_step(sasl)
            return result

        return dataclasses.replace(spec, handler=handler)

    def _after_sasl_step(self, sasl: SaslExchange, answered: bool = True) -> None:
        if sasl.step is SaslStep.FAILED:
            # The connection closes once the client has read the failure: when it hangs up,
            # sends anything more (refused by the gate) or after a grace period. Closing
            # right after writing makes some clients (kafka-python) drop the answer unread
            # and report a lost connection instead of the authentication error.
            if answered:
                asyncio.get_running_loop().call_later(_FAILED_GRACE_S, self.stop_reading)
            else:
                self.stop_reading()
        elif sasl.step is SaslStep.COMPLETE:
            self.sasl = None

    async def _raw_sasl_token(self, sasl: SaslExchange, token: bytes) -> bytes | None:
        """After SaslHandshake v0: a token framed only by its length, answered the same way;
        a failure is answered by closing the connection (v0 has no way to say more)."""
        context = RequestContext(
            self.broker,
            ApiKey.SASL_AUTHENTICATE,
            0,
            0,
            self.client_id,
            self.peer,
            self.serial,
            self.session,
        )
        try:
            reply = await k36_sasl_authenticate.evaluate(sasl, context, token)
        except (AuthenticationFailed, IllegalSaslState):
            reply = None
        self._after_sasl_step(sasl, answered=reply is not None)
        return None if reply is None else _SIZE.pack(len(reply)) + reply

    def _note_client_id(self, payload: bytes) -> None:
        """Reads the client id of a request rejected before its header is parsed, so that the
        log line names the client: the header up to the client id is the same in every API."""
        with contextlib.suppress(MalformedFrame):
            self.client_id = parse_request_header(payload, None).client_id

    async def _handle(
        self, spec: HandlerSpec, context: RequestContext, request: object, flexible: bool
    ) -> bytes | None:
        try:
            quotas = self.broker.quotas
            if QuotaType.REQUEST in quotas.kinds and spec.api_key not in SELF_CHARGED_API_KEYS:
                result = await measured(quotas, spec.handler, context, request)
            else:
                result = await spec.handler(context, request)
            if result is None:
                body = None
            elif isinstance(result, RawBody):
                body = result.data
            else:
                body = encode(build(response_class(spec.api_key, context.api_version), result))
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
        self.broker.metrics.request_done(spec.api_key.name, time.monotonic() - context.started)
        if body is None:
            return None
        return response_frame(context.correlation_id, flexible, body)

    async def _write_loop(self) -> None:
        writer = self.writer
        broken = False
        while (item := await self._queue.get()) is not None:
            frame = item if isinstance(item, bytes) else await item
            self.in_flight -= 1
            self.last_active = time.monotonic()
            if frame is None or broken:
                continue
            try:
                writer.write(frame)
                if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                    await writer.drain()
            except (ConnectionError, RuntimeError):
                broken = True
                self.stop_reading()
        if not broken:
            with contextlib.suppress(ConnectionError):
                await writer.drain()


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
