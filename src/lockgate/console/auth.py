# console/auth.py — who may change anything, and the one guard every mutating route goes
# through. A mutation needs: a console that is not --read-only, a password configured
# (--password-file or LOCKGATE_CONSOLE_PASSWORD), a signed-in session, the session's CSRF
# token in the form, and a confirmation (a second page, or the form's own "confirmed" box).
# Every attempt that passes the checks is logged with who (the name given at sign-in and the
# client's address) and what (the action and the form's fields); refusals are logged too.
# Invariant: fields that look secret (password, secret, token) are never logged, echoed in a
# page, or carried through the confirmation page.
from __future__ import annotations

import functools
import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from lockgate.console import session
from lockgate.console.errors import Forbidden
from lockgate.console.settings import ConsoleSettings
from lockgate.console.web import console_settings, render

log = logging.getLogger("lockgate.console.audit")

CSRF_FIELD = "csrf_token"
CONFIRM_FIELD = "confirmed"
_SECRET_MARKS = ("password", "secret", "token")

MutationHandler = Callable[[Request, FormData], Awaitable[Response]]
# (label, value) rows the confirmation page shows before the action runs (a dry run's result)
Preview = Callable[[Request, FormData], Awaitable[Sequence[tuple[str, str]]]]


def password_matches(settings: ConsoleSettings, given: str) -> bool:
    if settings.password is None:
        return False
    return hmac.compare_digest(settings.password.encode(), given.encode())


def is_secret_field(name: str) -> bool:
    if name in (CSRF_FIELD, CONFIRM_FIELD):
        return False  # the guard's own fields (the CSRF token is no secret to its session)
    lowered = name.lower()
    return any(mark in lowered for mark in _SECRET_MARKS)


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "?"


def form_summary(form: FormData) -> list[tuple[str, str]]:
    """The form's fields as (name, value), secrets masked, the guard's own fields left out."""
    return [
        (name, "***" if is_secret_field(name) else str(value))
        for name, value in form.multi_items()
        if name not in (CSRF_FIELD, CONFIRM_FIELD)
    ]


def check_mutation_allowed(request: Request, form: FormData, action: str) -> str:
    """The signed-in user allowed to run `action` with `form`; Forbidden (logged) if not."""
    settings = console_settings(request)
    user = session.current_user(request)
    reason = None
    if settings.read_only:
        reason = "This console is read-only (started with --read-only)."
    elif settings.password is None:
        reason = (
            "No console password is set (--password-file or LOCKGATE_CONSOLE_PASSWORD), "
            "so no one can sign in to change anything."
        )
    elif user is None:
        reason = "Sign in first: changes need the console's login."
    elif not session.csrf_matches(request, form.get(CSRF_FIELD)):
        reason = "The form's CSRF token does not match your session: reload the page and retry."
    if reason is not None:
        log.warning(
            "refused %s by %s from %s: %s", action, user or "-", client_address(request), reason
        )
        raise Forbidden(reason)
    assert user is not None
    return user


def mutation(
    action: str, *, preview: Preview | None = None
) -> Callable[[MutationHandler], Callable[[Request], Awaitable[Response]]]:
    """Wraps a POST handler `(request, form) -> Response` with the guard: the checks above,
    then (unless the form says confirmed=yes) a confirmation page that posts the same fields
    again with confirmed=yes, then the log line, then the handler."""

    def decorate(handler: MutationHandler) -> Callable[[Request], Awaitable[Response]]:
        @functools.wraps(handler)
        async def guarded(request: Request) -> Response:
            form = await request.form()
            user = check_mutation_allowed(request, form, action)
            summary = form_summary(form)
            if form.get(CONFIRM_FIELD) != "yes":
                rows = await preview(request, form) if preview is not None else ()
                carried = [
                    (name, str(value))
                    for name, value in form.multi_items()
                    if name not in (CSRF_FIELD, CONFIRM_FIELD) and not is_secret_field(name)
                ]
                return render(
                    request,
                    "confirm.html",
                    {
                        "title": f"Confirm: {action}",
                        "action": action,
                        "target": request.url.path,
                        "summary": summary,
                        "carried": carried,
                        "preview": rows,
                        "dropped_secret": any(is_secret_field(n) for n, _v in form.multi_items()),
                    },
                )
            where = client_address(request)
            details = ", ".join(f"{name}={value}" for name, value in summary)
            log.info("%s from %s: %s (%s)", user, where, action, details)
            try:
                response = await handler(request, form)
            except Exception as exc:
                log.warning("%s from %s: %s failed: %s", user, where, action, exc)
                raise
            log.info("%s from %s: %s done", user, where, action)
            return response

        return guarded

    return decorate
