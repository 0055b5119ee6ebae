# client/connection.py — one TCP connection to one broker: ApiVersions negotiation on connect,
# pipelined requests matched to responses by correlation id, per-request timeouts.
#
# Invariants: a Kafka broker answers the requests of one connection in the order it received
# them, so in-flight requests form a FIFO and every response must carry the correlation id of
# its head; anything else means the stream is out of step and the connection is closed. A
# request that times out also closes the connection (as the Java client does): its response
# may still arrive, and nothing later on the stream can be trusted to line up until it has.
# Closing fails every request in flight with KafkaConnectionError.
# A request sent with send_encoded_then() has no future: its response (or the error that ended
# it) goes to its callback, called by the reader as soon as the response is read (an error from
# closing: soon after, from the loop, never from inside the code that closed).
from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import struct
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import lockgate
from lockgate.client.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
    error_for,
)
from lockgate.client.security import ClientSecurity
from lockgate.client.tls import client_context
from lockgate.protocol.api import (
    ApiKey,
    BodyDecodeError,
    build,
    decode_body,
    encode,
    is_flexible,
    request_class,
    response_class,
)
from lockgate.protocol.frame import MalformedFrame, skip_tagged_fields
from lockgate.security.scram import AuthenticationFailed, ScramClient, ScramMechanism, plain_token

log = logging.getLogger(__name__)

CLIENT_SOFTWARE_NAME = "lockgate-python"
DEFAULT_CLIENT_ID = "lockgate"
# Far above any sane response (Fetch answers are bounded by the request's max bytes) but small
# enough that a stream out of step cannot make us allocate gigabytes.
MAX_RESPONSE_SIZE = 512 * 1024 * 1024
# kio's highest generated version is below this for every API.
_VERSION_PROBE_LIMIT = 32

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_HEADER = struct.Struct(">hhi")

ResponseDecoder = Callable[[bytes, int], Any]  # (frame payload, body offset) → response
# send_encoded_then()'s callback: (the decoded response, None) or (None, the error).
ResponseCallback = Callable[[Any, KafkaError | None], None]


@dataclass(frozen=True, slots=True)
class VersionRange:
    min: int
    max: int

    def intersect(self, other: VersionRange) -> VersionRange | None:
        low, high = max(self.min, other.min), min(self.max, other.max)
        return VersionRange(low, high) if low <= high else None


@functools.cache
def kio_versions(api_key: int) -> VersionRange | None:
    """The versions kio can encode for an API: the client can never go beyond them."""
    known = [v for v in range(_VERSION_PROBE_LIMIT) if request_class(api_key, v) is not None]
    return VersionRange(min(known), max(known)) if known else None


def encode_request_header(
    api_key: int, version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    """Request header v1, or v2 (an empty tagged-field section) for flexible versions."""
    header = _HEADER.pack(api_key, version, correlation_id)
    if client_id is None:
        header += _INT16.pack(-1)
    else:
        raw = client_id.encode("utf-8")
        header += _INT16.pack(len(raw)) + raw
    return header + (b"\x00" if flexible else b"")


def response_body_offset(api_key: int, version: int) -> int:
    """Where the body starts after the correlation id: response header v1 adds tagged fields,
    except for ApiVersions, whose responses always use header v0 (KIP-511)."""
    return 4 if api_key == ApiKey.API_VERSIONS or not is_flexible(api_key, version) else -1


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    version: int
    decoder: ResponseDecoder
    future: asyncio.Future[Any] | None  # None: `callback` takes the outcome
    callback: ResponseCallback | None = None
    timer: asyncio.TimerHandle | None = None  # the callback's request timeout
    error: KafkaError | None = None  # set when this request's own timeout closed the stream


class BrokerConnection:
    """A connection to one broker. `await connect()` opens it and negotiates versions;
    `await request(...)` sends one request and returns its decoded kio response."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int | None = None,
        client_id: str | None = DEFAULT_CLIENT_ID,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.security = security  # None: PLAINTEXT
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.broker_versions: dict[int, VersionRange] = {}
        # ApiVersions v3+: feature name → finalized max version level (e.g.
        # "transaction.version" → 2 where the broker runs transaction version 2, KIP-890).
        self.finalized_features: dict[str, int] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._in_flight: deque[_InFlight] = deque()
        self._correlation_ids = itertools.count(1)
        self._closed_because: KafkaError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it was connected on

    def __repr__(self) -> str:
        node = "" if self.node_id is None else f" node {self.node_id}"
        return f"<BrokerConnection {self.address}{node}>"

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._closed_because is None

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    # ------------------------------------------------------------------------------------------
    # Connecting and negotiating

    async def connect(self) -> None:
        if self._writer is not None:
            raise RuntimeError(f"{self!r} is already connected (connections are not reused)")
        tls = self.security is not None and self.security.security_protocol.uses_tls
        self._loop = asyncio.get_running_loop()
        try:
            context = client_context(self.security) if tls and self.security else None
            reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=context,
                    server_hostname=self.host if context is not None else None,
                ),
                self.connect_timeout_ms / 1000,
            )
        except TimeoutError:
            raise KafkaTimeoutError(
                f"connecting to {self.address} took more than {self.connect_timeout_ms} ms"
            ) from None
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {self.address}: {exc}") from exc
        self._reader_task = asyncio.create_task(
            self._read_responses(reader), name=f"lockgate-client-reader {self.address}"
        )
        try:
            await self._negotiate_versions()
            if self.security is not None and self.security.security_protocol.uses_sasl:
                await self._authenticate(self.security)
        except BaseException:
            await self.close()
            raise

    async def _authenticate(self, security: ClientSecurity) -> None:
        """SASL after ApiVersions: SaslHandshake v1, then the mechanism's tokens in
        SaslAuthenticate (PLAIN: one; SCRAM: client-first, client-final, then the server's
        signature is checked). Failures raise SaslAuthenticationFailedError (not retriable)
        or UnsupportedSaslMechanismError."""
        mechanism = security.sasl_mechanism.upper()
        if security.sasl_username is None or security.sasl_password is None:
            raise SaslAuthenticationFailedError(f"SASL {mechanism} needs a username and password")
        user, password = security.sasl_username, security.sasl_password
        response = await self.request(
            ApiKey.SASL_HANDSHAKE,
            {"mechanism": mechanism},
            version=self.version_for(ApiKey.SASL_HANDSHAKE, min_version=1),
        )
        if response.error_code != 0:
            enabled = ", ".join(response.mechanisms)
            raise error_for(response.error_code, f"{self.address} enables {enabled}", mechanism)
        version = self.version_for(ApiKey.SASL_AUTHENTICATE)

        async def step(token: bytes) -> bytes:
            answer = await self.request(
                ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}, version=version
            )
            if answer.error_code != 0:
                raise error_for(answer.error_code, answer.error_message, self.address)
            return bytes(answer.auth_bytes)

        if mechanism == "PLAIN":
            await step(plain_token(user, password))
            return
        scram = ScramMechanism.by_name(mechanism)
        if scram is None:
            raise UnsupportedSaslMechanismError(f"lockgate's client does not speak {mechanism}")
        client = ScramClient(scram, user, password)
        try:
            server_first = await step(client.first())
            # PBKDF2 over the password: off the event loop
            final = await asyncio.to_thread(client.final, server_first)
            client.verify(await step(final))
        except AuthenticationFailed as exc:
            raise SaslAuthenticationFailedError(f"{self.address}: {exc}") from None

    async def _negotiate_versions(self) -> None:
        """ApiVersions at the highest version kio knows; a broker that does not know it answers
        UNSUPPORTED_VERSION in the v0 layout with its own range, and we retry within it."""
        ours = kio_versions(ApiKey.API_VERSIONS)
        assert ours is not None
        version = ours.max
        for _attempt in range(2):
            response = await self._send(
                ApiKey.API_VERSIONS,
                version,
                {
                    "client_software_name": CLIENT_SOFTWARE_NAME,
                    "client_software_version": lockgate.__version__,
                },
                functools.partial(_decode_api_versions, version),
                self.request_timeout_ms,
            )
            ranges = {
                int(item.api_key): VersionRange(int(item.min_version), int(item.max_version))
                for item in response.api_keys
            }
            if response.error_code == 0:
                self.broker_versions = ranges
                self.finalized_features = {
                    str(feature.name): int(feature.max_version_level)
                    for feature in getattr(response, "finalized_features", ())
                }
                return
            theirs = ranges.get(ApiKey.API_VERSIONS)
            common = theirs.intersect(ours) if theirs else None
            if response.error_code != UnsupportedVersionError.code or common is None:
                raise error_for(response.error_code, None, f"ApiVersions v{version}")
            version = common.max
        raise UnsupportedVersionError(f"{self.address} refused every ApiVersions version")

    def version_range(self, api_key: int) -> VersionRange | None:
        """Versions of an API that both this broker and kio know, or None."""
        theirs = self.broker_versions.get(int(api_key))
        ours = kio_versions(int(api_key))
        if theirs is None or ours is None:
            return None
        return theirs.intersect(ours)

    def version_for(
        self, api_key: int, *, min_version: int = 0, max_version: int | None = None
    ) -> int:
        """The highest version both sides support within [min_version, max_version]."""
        common = self.version_range(api_key)
        high = _VERSION_PROBE_LIMIT if max_version is None else max_version
        wanted = VersionRange(min_version, high)
        usable = common.intersect(wanted) if common is not None else None
        if usable is None:
            theirs = self.broker_versions.get(int(api_key))
            ours = kio_versions(int(api_key))
            offered = "not at all" if theirs is None else f"v{theirs.min}-{theirs.max}"
            known = "nothing" if ours is None else f"v{ours.min}-{ours.max}"
            needed = f"v{min_version}+" if max_version is None else f"v{min_version}-{max_version}"
            raise UnsupportedVersionError(
                f"{self.address} supports {api_name(api_key)} {offered}; this client knows "
                f"{known} and needs {needed}"
            )
        return usable.max

    # ------------------------------------------------------------------------------------------
    # Requests

    async def request(
        self,
        api_key: int,
        body: Mapping[str, Any],
        *,
        version: int | None = None,
        timeout_ms: float | None = None,
        decoder: ResponseDecoder | None = None,
    ) -> Any:
        """Sends one request and returns the decoded kio response. `body` is a dict in the
        shape of the newest version (fields the chosen version lacks are ignored). `version`
        defaults to the highest both sides support; `timeout_ms` to the request timeout;
        `decoder` replaces kio for a response it cannot represent."""
        if version is None:
            version = self.version_for(api_key)
        if decoder is None:
            decoder = _body_decoder(api_key, version)
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        return await self._send(api_key, version, body, decoder, timeout)

    async def send_without_response(
        self, api_key: int, body: Mapping[str, Any] | bytes, *, version: int
    ) -> None:
        """For the one request Kafka never answers (Produce with acks=0): written and flushed
        to the socket, not awaited. No correlation entry: no response will ever match it.
        `body` is a dict for kio, or a body the caller encoded itself."""
        self._check_open()
        self._write(
            api_key, version, next(self._correlation_ids), _body_bytes(api_key, version, body)
        )
        writer = self._writer
        assert writer is not None
        try:
            async with asyncio.timeout(self.request_timeout_ms / 1000):
                await writer.drain()
        except TimeoutError:
            error = KafkaTimeoutError(
                f"{self.address} accepted no data for {self.request_timeout_ms} ms"
            )
            self._abort(KafkaConnectionError(f"connection closed after a timeout: {error}"))
            raise error from None
        except ConnectionError as exc:
            self._abort(KafkaConnectionError(f"{self.address}: {exc}"))
            raise KafkaConnectionError(f"{self.address}: {exc}") from exc

    def send_encoded(
        self, api_key: int, version: int, body: bytes, *, timeout_ms: float | None = None
    ) -> Coroutine[Any, Any, Any]:
        """Writes a request whose body the caller encoded (Produce with lockgate's KIP-359
        tag, which kio cannot write) before returning, so that the order of calls is the
        order on the wire, and returns the coroutine to await for the decoded kio response.
        Raises KafkaConnectionError at once when the connection is closed."""
        future = self._enqueue(api_key, version, body, _body_decoder(api_key, version))
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        return self._await_response(api_key, version, future, timeout)

    def send_encoded_then(
        self,
        api_key: int,
        version: int,
        body: bytes,
        callback: ResponseCallback,
        *,
        timeout_ms: float | None = None,
    ) -> None:
        """send_encoded() without a coroutine to await: `callback(response, None)` runs as
        soon as the reader has the response, `callback(None, error)` when the request fails
        (KafkaTimeoutError when its own timeout passed, which closes the connection as for
        send_encoded; KafkaConnectionError when the connection closes, called from the loop
        soon after). No task per request and no loop iterations between the answer and what
        the caller does with it: the producer sends its next batch right away. The caller
        keeps its requests within what it can have in flight (the transport buffers what
        the socket does not take at once). Raises KafkaConnectionError at once when the
        connection is closed."""
        self._check_open()
        correlation_id = next(self._correlation_ids)
        entry = _InFlight(
            correlation_id, api_key, version, _body_decoder(api_key, version), None, callback
        )
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        assert self._loop is not None  # connected
        entry.timer = self._loop.call_later(timeout / 1000, self._timed_out, entry, timeout)
        self._in_flight.append(entry)
        self._write(api_key, version, correlation_id, body)

    def _timed_out(self, entry: _InFlight, timeout_ms: float) -> None:
        """A send_encoded_then() request got no answer in time (its timer is cancelled when
        the answer comes, and by closing)."""
        if entry.callback is None:
            return
        entry.error = KafkaTimeoutError(
            f"{api_name(entry.api_key)} v{entry.version} to {self.address} got no response "
            f"within {timeout_ms:.0f} ms"
        )
        self._abort(KafkaConnectionError(f"connection closed after a timeout: {entry.error}"))

    async def _send(
        self,
        api_key: int,
        version: int,
        body: Mapping[str, Any],
        decoder: ResponseDecoder,
        timeout_ms: float,
    ) -> Any:
        future = self._enqueue(api_key, version, _body_bytes(api_key, version, body), decoder)
        return await self._await_response(api_key, version, future, timeout_ms)

    def _enqueue(
        self, api_key: int, version: int, body: bytes, decoder: ResponseDecoder
    ) -> asyncio.Future[Any]:
        self._check_open()
        correlation_id = next(self._correlation_ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # Queue before writing, with no await in between: the FIFO order is the write order.
        self._in_flight.append(_InFlight(correlation_id, api_key, version, decoder, future))
        self._write(api_key, version, correlation_id, body)
        return future

    async def _await_response(
        self, api_key: int, version: int, future: asyncio.Future[Any], timeout_ms: float
    ) -> Any:
        writer = self._writer
        assert writer is not None
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                with contextlib.suppress(ConnectionError):
                    await writer.drain()  # a broken pipe surfaces through the reader
                return await asyncio.shield(future)
        except TimeoutError:
            if future.done() and not future.cancelled() and future.exception() is None:
                return future.result()
            error = KafkaTimeoutError(
                f"{api_name(api_key)} v{version} to {self.address} got no response "
                f"within {timeout_ms:.0f} ms"
            )
            self._abort(KafkaConnectionError(f"connection closed after a timeout: {error}"))
            raise error from None

    def _write(self, api_key: int, version: int, correlation_id: int, body: bytes) -> None:
        header = encode_request_header(
            api_key, version, correlation_id, self.client_id, is_flexible(api_key, version)
        )
        assert self._writer is not None
        # one copy of a body that may be a megabyte of records, not one per concatenation
        self._writer.write(b"".join((_INT32.pack(len(header) + len(body)), header, body)))

    def _check_open(self) -> None:
        if self._closed_because is not None:
            raise KafkaConnectionError(f"{self.address}: {self._closed_because}")
        if self._writer is None:
            raise KafkaConnectionError(f"{self.address}: not connected")

    # ------------------------------------------------------------------------------------------
    # Responses

    async def _read_responses(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = _INT32.unpack(await reader.readexactly(4))
                if not 4 <= size <= MAX_RESPONSE_SIZE:
                    raise MalformedFrame(f"response size {size}")
                payload = await reader.readexactly(size)
                self._dispatch(payload)
        except asyncio.IncompleteReadError:
            self._abort(KafkaConnectionError(f"{self.address} closed the connection"))
        except (OSError, MalformedFrame) as exc:
            self._abort(KafkaConnectionError(f"{self.address}: {exc}"))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave callers waiting forever
            log.exception("reader for %s failed", self.address)
            self._abort(KafkaConnectionError(f"{self.address}: reader failed: {exc!r}"))

    def _dispatch(self, payload: bytes) -> None:
        (correlation_id,) = _INT32.unpack_from(payload, 0)
        if not self._in_flight:
            raise MalformedFrame(f"unexpected response with correlation id {correlation_id}")
        head = self._in_flight[0]
        if head.correlation_id != correlation_id:
            raise MalformedFrame(
                f"response correlation id {correlation_id}, expected {head.correlation_id}"
            )
        self._in_flight.popleft()
        future, callback = head.future, head.callback
        if callback is not None:
            head.callback = None
            if head.timer is not None:
                head.timer.cancel()
        elif future is None or future.done():  # the caller gave up; the stream stays in step
            return
        error: KafkaError | None = None
        try:
            offset = response_body_offset(head.api_key, head.version)
            if offset < 0:
                offset = skip_tagged_fields(payload, 4)
            response = head.decoder(payload, offset)
        except (BodyDecodeError, MalformedFrame) as exc:
            # Framing is intact, so only this request fails; the connection carries on.
            error = KafkaConnectionError(
                f"undecodable {api_name(head.api_key)} v{head.version} response "
                f"from {self.address}: {exc}"
            )
        except Exception as exc:
            if callback is None:
                raise  # the reader closes the connection; the caller's timeout ends its wait
            # a callback has no timeout left to end it: it must hear of the failure
            log.exception("decoding a %s response failed", api_name(head.api_key))
            error = KafkaConnectionError(f"{self.address}: unexpected failure: {exc!r}")
        if callback is not None:
            _call_back(callback, None if error else response, error)
        elif error is not None:
            assert future is not None
            future.set_exception(error)
        else:
            assert future is not None
            future.set_result(response)

    # ------------------------------------------------------------------------------------------
    # Closing

    def _abort(self, reason: KafkaError) -> None:
        if self._closed_because is None:
            self._closed_because = reason
        while self._in_flight:
            entry = self._in_flight.popleft()
            if entry.callback is not None:
                if entry.timer is not None:
                    entry.timer.cancel()
                error = entry.error or type(reason)(reason.message)
                # From the loop: whoever closed may be in the middle of the callback's owner.
                assert self._loop is not None  # only a connected connection sends
                self._loop.call_soon(_call_back, entry.callback, None, error)
                entry.callback = None
            elif entry.future is not None and not entry.future.done():
                entry.future.set_exception(type(reason)(reason.message))
                # Nobody may be awaiting it any more (a timed-out caller): do not warn.
                entry.future.exception()
        if self._writer is not None:
            self._writer.close()
        task = self._reader_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def close(self) -> None:
        self._abort(KafkaConnectionError("connection closed by the client"))
        if self._reader_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
        if self._writer is not None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await self._writer.wait_closed()


def _call_back(callback: ResponseCallback, response: Any, error: KafkaError | None) -> None:
    """A send_encoded_then() callback's failure is its owner's bug: logged, never the reader's
    end (the stream is still in step)."""
    try:
        callback(response, error)
    except Exception:
        log.exception("a response callback failed")


def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API {api_key}"


def _request_class(api_key: int, version: int) -> type[Any]:
    cls = request_class(api_key, version)
    if cls is None:
        raise UnsupportedVersionError(f"no schema for API {api_key} v{version}")
    return cls


def _body_bytes(api_key: int, version: int, body: Mapping[str, Any] | bytes) -> bytes:
    if isinstance(body, bytes):
        return body
    return encode(build(_request_class(api_key, version), body))


def _body_decoder(api_key: int, version: int) -> ResponseDecoder:
    cls = response_class(api_key, version)
    return lambda payload, offset: decode_body(cls, payload, offset)


def _decode_api_versions(version: int, payload: bytes, offset: int) -> Any:
    """An UNSUPPORTED_VERSION answer comes in the v0 layout whatever version was asked;
    the error code leads the body in every version, so it tells which layout to read."""
    if len(payload) >= offset + 2:
        (error_code,) = _INT16.unpack_from(payload, offset)
        if error_code == UnsupportedVersionError.code:
            version = 0
    return decode_body(response_class(ApiKey.API_VERSIONS, version), payload, offset)
