# console/errors.py — how a failure becomes a page: bad input 400, something missing 404, a
# refused action 403, the cluster's own error 502 (its message), an unreachable cluster 503,
# anything else 500 with no detail (the traceback goes to the log only). Invariant: no
# traceback and nothing but the message of a known error ever reaches a page.
from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from lockgate.client.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
)
from lockgate.console.web import render

log = logging.getLogger(__name__)


class ConsoleError(Exception):
    """A failure the person at the browser can act on; `status` is the HTTP status."""

    status = 400
    title = "Bad request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadInput(ConsoleError):
    status = 400
    title = "Bad input"


class NotFound(ConsoleError):
    status = 404
    title = "Not found"


class Forbidden(ConsoleError):
    status = 403
    title = "Not allowed"


def error_page(request: Request, status: int, title: str, message: str) -> Response:
    return render(
        request, "error.html", {"title": title, "message": message, "status": status}, status
    )


async def console_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConsoleError)
    return error_page(request, exc.status, exc.title, exc.message)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    titles = {404: "Not found", 405: "Method not allowed", 403: "Not allowed"}
    title = titles.get(exc.status_code, "Error")
    message = exc.detail if exc.status_code not in (404, 405) else title
    return error_page(request, exc.status_code, title, str(message))


async def kafka_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, KafkaError)
    if isinstance(exc, UnknownTopicOrPartitionError):
        return error_page(request, 404, "Not found", f"No such topic or partition: {exc}")
    if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
        log.warning("console: cluster unreachable for %s: %s", request.url.path, exc)
        return error_page(request, 503, "Cluster unreachable", f"Cannot reach the cluster: {exc}")
    return error_page(request, 502, "The cluster refused", f"The cluster answered: {exc}")


async def internal_error(request: Request, exc: Exception) -> Response:
    log.exception("console: internal error on %s %s", request.method, request.url.path)
    return error_page(
        request, 500, "Internal error", "Something went wrong on the console's side (see its log)."
    )


EXCEPTION_HANDLERS = {
    ConsoleError: console_error,
    HTTPException: http_error,
    KafkaError: kafka_error,
    Exception: internal_error,
}
