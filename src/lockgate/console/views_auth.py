# console/views_auth.py — sign in and sign out. Signing in needs the console's password and
# the CSRF token of the session that showed the form (so another site cannot sign a browser
# in); the name given is who the audit log says made each change. Every attempt is logged,
# never the password; an address that keeps giving a wrong one is slowed down (sign_ins.py)
# with a 429 page saying how long to wait.
from __future__ import annotations

import logging
import math

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from lockgate.console import session
from lockgate.console.auth import CSRF_FIELD, client_address, password_matches
from lockgate.console.errors import Forbidden
from lockgate.console.sign_ins import SignInThrottle
from lockgate.console.web import console_settings, render

log = logging.getLogger("lockgate.console.audit")
MAX_NAME = 64


def _local_target(target: str | None) -> str:
    """Where to go after signing in: a path of this console only (no open redirect)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


async def login_form(request: Request) -> Response:
    return render(
        request,
        "login.html",
        {"title": "Sign in", "next": _local_target(request.query_params.get("next")), "error": ""},
    )


async def login(request: Request) -> Response:
    settings = console_settings(request)
    form = await request.form()
    if not session.csrf_matches(request, form.get(CSRF_FIELD)):
        raise Forbidden("The form's CSRF token does not match your session: reload and retry.")
    name = str(form.get("user", "")).strip()[:MAX_NAME]
    target = _local_target(str(form.get("next", "")))
    where = client_address(request)
    if settings.password is None:
        raise Forbidden(
            "No console password is set (--password-file or LOCKGATE_CONSOLE_PASSWORD)."
        )
    throttle: SignInThrottle = request.app.state.sign_ins
    wait_s = throttle.wait_s(where)
    if wait_s > 0:
        log.warning("sign-in of %r from %s not tried: too many wrong passwords", name, where)
        error = f"Too many wrong passwords: try again in {math.ceil(wait_s)} s."
        context = {"title": "Sign in", "next": target, "error": error}
        return render(request, "login.html", context, 429)
    if (
        not name
        or not name.isprintable()
        or not password_matches(settings, str(form.get("password", "")))
    ):
        throttle.failed(where)
        log.warning("sign-in refused for %r from %s", name, where)
        context = {"title": "Sign in", "next": target, "error": "Wrong name or password."}
        return render(request, "login.html", context, 403)
    throttle.succeeded(where)
    session.sign_in(request, name)
    log.info("%s signed in from %s", name, where)
    return RedirectResponse(target, status_code=303)


async def logout(request: Request) -> Response:
    form = await request.form()
    if not session.csrf_matches(request, form.get(CSRF_FIELD)):
        raise Forbidden("The form's CSRF token does not match your session: reload and retry.")
    user = session.current_user(request)
    session.sign_out(request)
    if user is not None:
        log.info("%s signed out from %s", user, client_address(request))
    return RedirectResponse("/", status_code=303)


ROUTES: list[BaseRoute] = [
    Route("/login", login_form, methods=["GET"]),
    Route("/login", login, methods=["POST"]),
    Route("/logout", logout, methods=["POST"]),
]
