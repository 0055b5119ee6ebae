"""SaslHandshake (key 17), versions 0–1.

Behaviour:
- On a SASL listener before authentication, the connection serves it with `handshake`: a
  mechanism enabled on the listener (sasl.enabled.mechanisms, per listener as
  listener.name.<name>.sasl.enabled.mechanisms) → NONE and the enabled list; any other →
  UNSUPPORTED_SASL_MECHANISM (33) with the enabled list, after
  connection.failed.authentication.delay.ms, and the connection closes once it is written.
- A second SaslHandshake before authentication completes closes the connection (Kafka's
  authenticator expects SaslAuthenticate then).
- After authentication, and on a listener without SASL: ILLEGAL_SASL_STATE (34), as Kafka's
  request handler answers it. KIP-368 re-authentication is not served.
Version notes: after v0 the client's SASL tokens come framed only by their 4-byte length (no
request header), and so do the broker's answers; after v1 they come in SaslAuthenticate.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.scram import SaslExchange


@handles(ApiKey.SASL_HANDSHAKE, 0, 1)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()}


async def handshake(exchange: SaslExchange, ctx: RequestContext, request: Any) -> HandlerResult:
    """The handshake of a connection still authenticating (the exchange fails for good when
    the mechanism is refused: the connection then closes after this answer)."""
    mechanism = str(request.mechanism)
    if not exchange.handshake(mechanism, ctx.api_version):
        await asyncio.sleep(
            ctx.services.config.integer("connection.failed.authentication.delay.ms") / 1000
        )
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": exchange.enabled}
    ctx.session.mechanism = mechanism
    return {"error_code": ErrorCode.none, "mechanisms": exchange.enabled}
