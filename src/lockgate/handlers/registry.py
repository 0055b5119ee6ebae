# The handler table: @handles(key, min, max) registers one handler per API key. It feeds
# ApiVersions and the protocol coverage table in docs/, so what is advertised is what exists.
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lockgate.log.clock import now_ms
from lockgate.protocol.api import ApiKey, decode_body, is_flexible, request_class
from lockgate.protocol.file_range import Part
from lockgate.protocol.frame import RequestHeader, parse_request_header
from lockgate.security.session import Session

if TYPE_CHECKING:
    from lockgate.handlers.services import Services
    from lockgate.security.authorizer import Authorizer


@dataclass(frozen=True, slots=True)
class RawBody:
    """An already encoded response body (hot paths that bypass the kio builder): one buffer,
    or a list of parts written in turn (Fetch: record bytes are not joined into the frame, and
    may be ranges of segment files that the connection then owns: protocol/file_range.py).
    `error`: the response's top-level error code, for the request metrics, if it has one."""

    data: bytes | list[Part]
    error: int | None = None


NO_RESPONSE = None  # e.g. Produce with acks=0
HandlerResult = Mapping[str, Any] | RawBody | None


@dataclass(slots=True)
class RequestContext:
    services: Services
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    # the connection's serial: this process numbers connections from 1 as they open
    connection: int = 0
    # who sent it: listener, security protocol, authenticated principal and client host
    session: Session = field(default_factory=Session.plaintext)
    received_ms: int = field(default_factory=now_ms)
    started: float = field(default_factory=time.monotonic)

    @property
    def authorizer(self) -> Authorizer | None:
        return self.services.authorizer


Handler = Callable[[RequestContext, Any], Awaitable[HandlerResult]]
Decoder = Callable[[bytes, int, int], Any]  # (frame payload, body offset, version) → request


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    api_key: ApiKey
    min_version: int
    max_version: int
    handler: Handler
    decoder: Decoder | None

    def decode(self, payload: bytes, version: int) -> tuple[RequestHeader, Any]:
        """The header and the request of a frame of this API at a supported version; raises
        MalformedFrame or BodyDecodeError, which close the connection."""
        header = parse_request_header(payload, is_flexible(self.api_key, version))
        return header, self.decode_body(payload, header.body_offset, version)

    def decode_body(self, payload: bytes, offset: int, version: int) -> Any:
        """The request body at `offset`: the hand-written decoder, else kio's."""
        if self.decoder is not None:
            return self.decoder(payload, offset, version)
        cls = request_class(self.api_key, version)
        assert cls is not None
        return decode_body(cls, payload, offset)


HANDLERS: dict[int, HandlerSpec] = {}


def handles(
    api_key: ApiKey,
    min_version: int,
    max_version: int,
    *,
    advertised_min: int | None = None,
    decoder: Decoder | None = None,
) -> Callable[[Handler], Handler]:
    """Registers a handler for versions min..max. `advertised_min` lets ApiVersions announce
    lower versions that the handler answers with an error (Produce 0-2). `decoder` replaces
    kio for hand-written hot paths and raises MalformedFrame on bad input."""

    def register(function: Handler) -> Handler:
        assert api_key not in HANDLERS, f"two handlers for {api_key.name}"
        low = min_version if advertised_min is None else advertised_min
        HANDLERS[api_key] = HandlerSpec(api_key, low, max_version, function, decoder)
        return function

    return register
