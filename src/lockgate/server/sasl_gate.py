# The SASL authentication of one connection on a SASL listener (Kafka's
# SaslServerAuthenticator): which requests may pass before it completes, the handshake and
# authenticate steps run against the connection's own exchange, SaslHandshake v0's raw tokens,
# and closing the connection after a failure once the client has read the answer.
from __future__ import annotations

import asyncio
import dataclasses
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from lockgate.handlers import k17_sasl_handshake, k36_sasl_authenticate
from lockgate.handlers.registry import HandlerResult, HandlerSpec, RequestContext
from lockgate.protocol.api import ApiKey
from lockgate.security.scram import (
    STAND_IN_SECRET,
    AuthenticationFailed,
    IllegalSaslState,
    SaslExchange,
    SaslStep,
)

_SIZE = struct.Struct(">i")
_FAILED_GRACE_S = 2.0  # how long a failed authentication's answer waits to be read

# what each step of the exchange lets through; anything else closes the connection
_ALLOWED = {
    SaslStep.HANDSHAKE: (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE),
    SaslStep.AUTHENTICATE: (ApiKey.SASL_AUTHENTICATE,),
}


class SaslGate:
    def __init__(self, mechanisms: tuple[str, ...], close: Callable[[], None]) -> None:
        self.exchange = SaslExchange(mechanisms, STAND_IN_SECRET)
        self._close = close  # stops reading the connection, which then closes

    @property
    def raw_tokens(self) -> bool:
        """After SaslHandshake v0 the next frames are bare SASL tokens, not requests."""
        return self.exchange.raw_tokens

    def refusal(self, api_key: int, listener: str) -> str | None:
        """Why a request may not be served at this step (None: it may)."""
        if api_key in _ALLOWED.get(self.exchange.step, ()):
            return None
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = f"API key {api_key}"
        return (
            f"{name} on listener {listener} before SASL authentication completed "
            f"(step {self.exchange.step.name})"
        )

    def handler_for(self, spec: HandlerSpec) -> HandlerSpec:
        """The handler of an admitted request: the SASL steps run on this connection's
        exchange, and a failed one closes the connection after its answer."""
        step: Callable[[SaslExchange, RequestContext, Any], Awaitable[HandlerResult]]
        if spec.api_key == ApiKey.SASL_HANDSHAKE:
            step = k17_sasl_handshake.handshake
        elif spec.api_key == ApiKey.SASL_AUTHENTICATE:
            step = k36_sasl_authenticate.authenticate
        else:
            return spec  # ApiVersions

        async def handler(context: RequestContext, request: Any) -> HandlerResult:
            result = await step(self.exchange, context, request)
            self._after_step(answered=True)
            return result

        return dataclasses.replace(spec, handler=handler)

    async def raw_token(self, context: RequestContext, token: bytes) -> bytes | None:
        """After SaslHandshake v0: a token framed only by its length, answered the same way;
        a failure is answered by closing the connection (v0 has no way to say more)."""
        try:
            reply = await k36_sasl_authenticate.evaluate(self.exchange, context, token)
        except (AuthenticationFailed, IllegalSaslState):
            reply = None
        self._after_step(answered=reply is not None)
        return None if reply is None else _SIZE.pack(len(reply)) + reply

    def _after_step(self, answered: bool) -> None:
        if self.exchange.step is not SaslStep.FAILED:
            return
        if answered:
            # Closed once the client has read the failure: when it hangs up, sends anything
            # more (refused) or after a grace period. Closing right after writing makes some
            # clients (kafka-python) drop the answer unread and report a lost connection.
            asyncio.get_running_loop().call_later(_FAILED_GRACE_S, self._close)
        else:
            self._close()
