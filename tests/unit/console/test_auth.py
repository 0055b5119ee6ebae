"""The console's safety model, through requests into the app (no server): sign-in with CSRF,
the mutation guard (read-only, no password, not signed in, bad CSRF, confirmation, audit
log with secrets masked), the Host check, and error pages without tracebacks."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from lockgate.console.app import create_app
from lockgate.console.auth import mutation
from lockgate.console.settings import ConsoleSettings
from lockgate.console.sign_ins import FREE_FAILURES, SignInThrottle
from tests.support.console import AsgiClient

PASSWORD = "correct horse"
done: list[list[tuple[str, str]]] = []


@mutation("poke the thing")
async def poke(request: Request, form: FormData) -> Response:
    done.append([(k, str(v)) for k, v in form.multi_items()])
    return PlainTextResponse("poked")


async def explode(request: Request) -> Response:
    raise RuntimeError("secret internals")


async def make_client(**settings: object) -> AsyncIterator[AsgiClient]:
    done.clear()
    app = create_app(ConsoleSettings("127.0.0.1:1", **settings))  # type: ignore[arg-type]
    app.router.routes.append(Route("/test/poke", poke, methods=["POST"]))
    app.router.routes.append(Route("/test/explode", explode))
    yield AsgiClient(app)
    await app.state.clients.close()


@pytest.fixture
async def client() -> AsyncIterator[AsgiClient]:
    async for made in make_client(password=PASSWORD):
        yield made


async def sign_in(client: AsgiClient, user: str = "ann") -> str:
    token = (await client.get("/login")).csrf_token()
    answer = await client.post(
        "/login", {"csrf_token": token, "user": user, "password": PASSWORD, "next": "/cluster"}
    )
    assert answer.status == 303 and answer.headers["location"] == "/cluster"
    return (await client.get("/login")).csrf_token()


async def test_sign_in_needs_the_password_and_the_session_csrf_token(client: AsgiClient) -> None:
    token = (await client.get("/login")).csrf_token()
    wrong = await client.post("/login", {"csrf_token": token, "user": "ann", "password": "x"})
    assert wrong.status == 403 and "Wrong name or password" in wrong.text
    forged = await client.post(
        "/login", {"csrf_token": "forged", "user": "ann", "password": PASSWORD}
    )
    assert forged.status == 403 and "CSRF" in forged.text
    await sign_in(client)
    assert 'class="user">ann<' in (await client.get("/login")).text


async def test_wrong_passwords_in_a_row_slow_the_address_down(client: AsgiClient) -> None:
    token = (await client.get("/login")).csrf_token()
    for _ in range(FREE_FAILURES):
        wrong = await client.post("/login", {"csrf_token": token, "user": "ann", "password": "x"})
        assert wrong.status == 403
    # even the right password waits now, with a page saying how long
    held = await client.post("/login", {"csrf_token": token, "user": "ann", "password": PASSWORD})
    assert held.status == 429 and "try again in 1 s" in held.text


def test_the_sign_in_delay_doubles_and_a_success_clears_it() -> None:
    now = [100.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    for _ in range(FREE_FAILURES - 1):
        throttle.failed("a")
    assert throttle.wait_s("a") == 0
    throttle.failed("a")
    assert throttle.wait_s("a") == 1.0 and throttle.wait_s("b") == 0
    throttle.failed("a")
    assert throttle.wait_s("a") == 2.0
    now[0] += 2.0
    assert throttle.wait_s("a") == 0
    for _ in range(20):
        throttle.failed("a")
    assert throttle.wait_s("a") == 60.0  # capped
    throttle.succeeded("a")
    assert throttle.wait_s("a") == 0


async def test_sign_in_redirects_only_within_the_console(client: AsgiClient) -> None:
    token = (await client.get("/login")).csrf_token()
    answer = await client.post(
        "/login",
        {"csrf_token": token, "user": "ann", "password": PASSWORD, "next": "//evil.example/"},
    )
    assert answer.status == 303 and answer.headers["location"] == "/"


async def test_a_mutation_needs_a_signed_in_session(client: AsgiClient) -> None:
    token = (await client.get("/login")).csrf_token()
    answer = await client.post("/test/poke", {"csrf_token": token, "what": "x"})
    assert answer.status == 403 and "Sign in first" in answer.text
    assert done == []


async def test_a_mutation_needs_the_session_csrf_token(client: AsgiClient) -> None:
    await sign_in(client)
    answer = await client.post("/test/poke", {"csrf_token": "forged", "confirmed": "yes"})
    assert answer.status == 403 and "CSRF" in answer.text
    assert done == []


async def test_a_mutation_is_confirmed_then_logged_without_secrets(
    client: AsgiClient, caplog: pytest.LogCaptureFixture
) -> None:
    token = await sign_in(client)
    first = await client.post("/test/poke", {"csrf_token": token, "what": "topic-a"})
    assert first.status == 200 and "Confirm: poke the thing" in first.text
    assert 'name="what" value="topic-a"' in first.text and done == []
    caplog.set_level(logging.INFO, logger="lockgate.console.audit")
    second = await client.post(
        "/test/poke", {"csrf_token": first.csrf_token(), "what": "topic-a", "confirmed": "yes"}
    )
    assert second.status == 200 and second.text == "poked"
    assert done == [[("csrf_token", token), ("what", "topic-a"), ("confirmed", "yes")]]
    assert any(
        "ann from 127.0.0.1: poke the thing (what=topic-a)" in r.getMessage()
        for r in caplog.records
    )


async def test_secret_fields_are_masked_and_never_carried(
    client: AsgiClient, caplog: pytest.LogCaptureFixture
) -> None:
    token = await sign_in(client)
    caplog.set_level(logging.INFO, logger="lockgate.console.audit")
    page = await client.post("/test/poke", {"csrf_token": token, "new_password": "hunter2"})
    assert "hunter2" not in page.text and "***" in page.text and "not carried" in page.text
    inline = await client.post(
        "/test/poke", {"csrf_token": token, "new_password": "hunter2", "confirmed": "yes"}
    )
    assert inline.text == "poked"
    assert all("hunter2" not in r.getMessage() for r in caplog.records)
    assert any("new_password=***" in r.getMessage() for r in caplog.records)


async def test_read_only_refuses_every_post() -> None:
    async for client in make_client(password=PASSWORD, read_only=True):
        page = await client.get("/login")
        assert "read-only" in page.text
        for path in ("/login", "/logout", "/test/poke", "/cluster"):
            answer = await client.post(path, {"csrf_token": "x", "confirmed": "yes"})
            assert answer.status == 403 and "read-only" in answer.text
        assert done == []


async def test_without_a_password_nothing_can_change() -> None:
    async for client in make_client(password=None):
        assert "No console password is set" in (await client.get("/login")).text
        answer = await client.post("/test/poke", {"csrf_token": "x", "confirmed": "yes"})
        assert answer.status == 403 and "No console password" in answer.text


async def test_hosts_other_than_loopback_names_are_refused(client: AsgiClient) -> None:
    assert (await client.get("/login", host="evil.example:8080")).status == 400
    assert (await client.get("/login", host="localhost:8080")).status == 200


async def test_errors_are_pages_without_tracebacks(client: AsgiClient) -> None:
    missing = await client.get("/no/such/page")
    assert missing.status == 404 and "<h1>Not found</h1>" in missing.text
    broken = await client.get("/test/explode")
    assert broken.status == 500 and "Internal error" in broken.text
    assert "secret internals" not in broken.text and "Traceback" not in broken.text


async def test_pages_carry_the_security_headers(client: AsgiClient) -> None:
    answer = await client.get("/login")
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    assert answer.headers["x-frame-options"] == "DENY"
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
