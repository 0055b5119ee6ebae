# console/app.py — the ASGI application: routes of every views_* module, the static files
# (package data), and the safety layers around them, outermost first: security headers on
# every answer (a CSP allowing only the console's own script and style, no framing), the
# allowed Host names (loopback names only when listening on loopback, against DNS
# rebinding), the signed session cookie, and --read-only refusing every unsafe method (403)
# before any route runs. Routes stay thin; a page's data comes from its <area>.py module.
from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lockgate.console import (
    views_auth,
    views_cluster,
    views_groups,
    views_producers,
    views_security,
    views_topics,
    views_transactions,
)
from lockgate.console.clients import ConsoleClients
from lockgate.console.errors import EXCEPTION_HANDLERS, error_page
from lockgate.console.sampler import Sampler
from lockgate.console.settings import ConsoleSettings
from lockgate.console.sign_ins import SignInThrottle
from lockgate.console.web import make_templates

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


class ReadOnly:
    """--read-only: every unsafe method answers 403, whatever route it was meant for."""

    def __init__(self, app: ASGIApp, read_only: bool) -> None:
        self.app = app
        self.read_only = read_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.read_only and scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            request = Request(scope, receive)
            response = error_page(
                request, 403, "Read-only", "This console is read-only (started with --read-only)."
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def routes() -> list[BaseRoute]:
    return [
        *views_auth.ROUTES,
        *views_cluster.ROUTES,
        *views_topics.ROUTES,
        *views_groups.ROUTES,
        *views_transactions.ROUTES,
        *views_producers.ROUTES,
        *views_security.ROUTES,
        Mount(
            "/static",
            StaticFiles(packages=[("lockgate.console", "static")]),
            name="static",
        ),
    ]


def create_app(settings: ConsoleSettings, *, sampler: Sampler | None = None) -> Starlette:
    clients = ConsoleClients(settings)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await clients.close()

    allowed_hosts = LOOPBACK_NAMES if settings.loopback_only else ["*"]
    app = Starlette(
        routes=routes(),
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts),
            Middleware(
                SessionMiddleware,
                secret_key=secrets.token_urlsafe(32),
                session_cookie="lockgate_console",
                max_age=settings.session_max_age_s,
                same_site="strict",
            ),
            Middleware(ReadOnly, read_only=settings.read_only),
        ],
        exception_handlers=dict(EXCEPTION_HANDLERS),
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.clients = clients
    app.state.templates = make_templates()
    app.state.sampler = sampler or Sampler()
    app.state.sign_ins = SignInThrottle()
    return app
