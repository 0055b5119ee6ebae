# Who a log line is about: the connection and request being handled when it was emitted.
# Context variables follow asyncio tasks, so setting them in a connection's tasks labels every
# line that the request's handler (and anything it calls or spawns) logs, and nothing else.
# The connection sets `current_connection` once (the tasks it creates inherit it) and
# `current_request` at the start of each request's own task; nothing needs resetting.
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockgate.protocol.api import ApiKey

if TYPE_CHECKING:
    from lockgate.handlers.registry import RequestContext


@dataclass(frozen=True, slots=True)
class ConnectionContext:
    peer: str  # the client's address, HOST:PORT
    listener: str
    serial: int  # the connection's number in this process


current_connection: ContextVar[ConnectionContext | None] = ContextVar(
    "lockgate_connection", default=None
)
# the request itself, not a copy: setting it costs nothing per request, and its fields are
# read only when a line is actually logged
current_request: ContextVar[RequestContext | None] = ContextVar("lockgate_request", default=None)


def context_fields() -> dict[str, object]:
    """The context of the running task as log fields (empty outside connections)."""
    fields: dict[str, object] = {}
    connection = current_connection.get()
    if connection is not None:
        fields["client_address"] = connection.peer
        fields["listener"] = connection.listener
        fields["connection"] = connection.serial
    request = current_request.get()
    if request is not None:
        fields["client_address"] = request.peer
        fields["listener"] = request.session.listener
        fields["connection"] = request.connection
        if request.client_id is not None:
            fields["client_id"] = request.client_id
        with contextlib.suppress(ValueError):
            fields["api"] = ApiKey(request.api_key).name
        fields["api_key"] = request.api_key
        fields["api_version"] = request.api_version
        fields["correlation_id"] = request.correlation_id
        if request.session.authenticated:
            fields["principal"] = request.session.principal
    return fields
