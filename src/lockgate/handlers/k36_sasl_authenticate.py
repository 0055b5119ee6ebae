"""SaslAuthenticate (key 36), versions 0–2.

Behaviour:
- On a SASL listener before authentication, the connection serves it with `authenticate`:
  the token goes to the mechanism chosen by SaslHandshake (PLAIN, SCRAM-SHA-256,
  SCRAM-SHA-512); the answer carries the server's token. On success the session is
  authenticated as "User:<name>" and session_lifetime_ms is 0 (KIP-368 re-authentication is
  not served).
- Any failure (unknown user, wrong password or proof, malformed token, a refused extension
  such as tokenauth, a token after the exchange ended) → SASL_AUTHENTICATION_FAILED (58) with
  Kafka's generic message naming only the mechanism, after
  connection.failed.authentication.delay.ms; the connection closes once it is written. The
  broker logs the cause, at most one line per interval with a count of the rest, so a
  password-guessing flood cannot flood the log.
- After authentication, and on a listener without SASL: ILLEGAL_SASL_STATE (34), as Kafka's
  request handler answers it.
Version notes: v1+ carries session_lifetime_ms (always 0 here).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.scram import (
    AuthenticationFailed,
    IllegalSaslState,
    SaslExchange,
    SaslStep,
    failure_message,
)

log = logging.getLogger(__name__)

FAILURE_LOG_INTERVAL_S = 10.0


class FailureLog:
    """One log line per interval for failed authentications, counting those not logged."""

    def __init__(self, interval_s: float = FAILURE_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last = -interval_s
        self._suppressed = 0

    def note(
        self, ctx: RequestContext, mechanism: str | None, cause: Exception, now: float
    ) -> bool:
        """Logs unless a line went out within the interval; True when it logged."""
        if now - self._last < self.interval_s:
            self._suppressed += 1
            return False
        more = f" ({self._suppressed} more failures not logged)" if self._suppressed else ""
        log.warning(
            "SASL authentication failed from %s (client id %r, listener %s, mechanism %s): %s%s",
            ctx.peer,
            ctx.client_id,
            ctx.session.listener,
            mechanism,
            cause,
            more,
        )
        self._last, self._suppressed = now, 0
        return True


FAILURES = FailureLog()


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    return {
        "error_code": ErrorCode.illegal_sasl_state,
        "error_message": "SaslAuthenticate request received after successful authentication",
        "auth_bytes": b"",
        "session_lifetime": 0,
    }


async def authenticate(exchange: SaslExchange, ctx: RequestContext, request: Any) -> HandlerResult:
    """SaslAuthenticate on a connection still authenticating."""
    try:
        reply = await evaluate(exchange, ctx, bytes(request.auth_bytes))
    except (AuthenticationFailed, IllegalSaslState):
        return {
            "error_code": ErrorCode.sasl_authentication_failed,
            "error_message": failure_message(exchange.mechanism),
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
    return {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": reply,
            "session_lifetime": 0}  # fmt: skip


async def evaluate(exchange: SaslExchange, ctx: RequestContext, token: bytes) -> bytes:
    """One client token → the server's token; on success the session is authenticated. A
    failure is logged (rate-limited) and delayed, then raised; the exchange has failed."""
    try:
        user = exchange.user_of(token)
        credentials = None
        if user is not None:
            try:
                credentials = await ctx.services.credentials.credentials(user)
            except Exception as exc:  # the store is away: nobody can be checked
                raise AuthenticationFailed(f"credentials could not be read: {exc!r}") from exc
        if exchange.mechanism == "PLAIN":  # PBKDF2 over the password: off the event loop
            reply = await asyncio.to_thread(exchange.evaluate, token, credentials)
        else:
            reply = exchange.evaluate(token, credentials)
    except (AuthenticationFailed, IllegalSaslState) as exc:
        exchange.step = SaslStep.FAILED
        FAILURES.note(ctx, exchange.mechanism, exc, time.monotonic())
        await asyncio.sleep(
            ctx.services.config.integer("connection.failed.authentication.delay.ms") / 1000
        )
        raise
    if exchange.step is SaslStep.COMPLETE:
        assert exchange.user is not None
        ctx.session.principal = f"User:{exchange.user}"
        ctx.session.mechanism = exchange.mechanism
        ctx.session.authenticated = True
        log.debug("%s authenticated as User:%s (%s)", ctx.peer, exchange.user, exchange.mechanism)
    return reply
