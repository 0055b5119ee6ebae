# console/web.py — what every web handler shares: the templates (package data, autoescaped),
# the values every page sees (the signed-in user, the CSRF token, read-only), and access to
# the app's settings, clients and sampler from a request. Handlers stay thin: parse, call a
# data module, render.
from __future__ import annotations

from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from lockgate.console import session
from lockgate.console.clients import ConsoleClients
from lockgate.console.sampler import Sampler
from lockgate.console.settings import ConsoleSettings

# (label, path) of the nav bar, in order; pages not built yet answer 404
NAV = (
    ("Cluster", "/cluster"),
    ("Topics", "/topics"),
    ("Groups", "/groups"),
    ("Transactions", "/transactions"),
    ("Producers", "/producers"),
    ("Security", "/security"),
)


def _page_context(request: Request) -> dict[str, Any]:
    settings = console_settings(request)
    return {
        "nav": NAV,
        "user": session.current_user(request),
        "read_only": settings.read_only,
        "can_mutate": settings.can_mutate,
        "csrf_token": lambda: session.csrf_token(request),
    }


def make_templates() -> Jinja2Templates:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("lockgate.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["thousands"] = lambda n: f"{n:,}" if isinstance(n, int) else n
    environment.filters["bytes"] = human_bytes
    return Jinja2Templates(env=environment, context_processors=[_page_context])


def human_bytes(count: int | None) -> str:
    if count is None:
        return "–"
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def render(
    request: Request, name: str, context: dict[str, Any] | None = None, status: int = 200
) -> Response:
    templates: Jinja2Templates = request.app.state.templates
    return templates.TemplateResponse(request, name, context or {}, status_code=status)


def console_settings(request: Request) -> ConsoleSettings:
    settings: ConsoleSettings = request.app.state.settings
    return settings


def clients(request: Request) -> ConsoleClients:
    value: ConsoleClients = request.app.state.clients
    return value


def sampler(request: Request) -> Sampler:
    value: Sampler = request.app.state.sampler
    return value
