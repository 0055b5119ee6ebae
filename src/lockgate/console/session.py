# console/session.py — what the signed session cookie holds: the signed-in user's name and the
# session's CSRF token. The cookie is signed (itsdangerous, a key made at each start, so a
# restart signs everyone out), not encrypted: it holds nothing secret, never the password.
from __future__ import annotations

import hmac
import secrets

from starlette.requests import Request

USER_KEY = "user"
CSRF_KEY = "csrf"


def current_user(request: Request) -> str | None:
    user = request.session.get(USER_KEY)
    return user if isinstance(user, str) else None


def csrf_token(request: Request) -> str:
    """The session's CSRF token, made on first use (every form of every page carries it)."""
    token = request.session.get(CSRF_KEY)
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session[CSRF_KEY] = token
    return token


def csrf_matches(request: Request, given: object) -> bool:
    expected = request.session.get(CSRF_KEY)
    if not isinstance(expected, str) or not isinstance(given, str):
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def sign_in(request: Request, user: str) -> None:
    """A fresh session for `user`: a new CSRF token too (one learnt before sign-in is void)."""
    request.session.clear()
    request.session[USER_KEY] = user
    request.session[CSRF_KEY] = secrets.token_urlsafe(32)


def sign_out(request: Request) -> None:
    request.session.clear()
