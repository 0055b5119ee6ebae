"""JSON log lines: the fixed fields, the connection's and request's context as set by the
connection's tasks (and only inside them), exceptions as fields, and plain text unchanged."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.cli import main
from lockgate.handlers.registry import RequestContext
from lockgate.protocol.api import ApiKey
from lockgate.security.session import Session
from lockgate.server.log_context import (
    ConnectionContext,
    current_connection,
    current_request,
)
from lockgate.server.log_format import log_handler


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    logger = logging.getLogger("lockgate.test.json")
    handler = log_handler("json", stream)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def request(api_key: int = ApiKey.PRODUCE, authenticated: bool = True) -> RequestContext:
    session = Session.plaintext("10.0.0.7")
    session.authenticated = authenticated
    session.principal = "User:alice"
    return RequestContext(
        None,  # type: ignore[arg-type]  # (no service is read)
        api_key,
        9,
        42,
        "app-1",
        "10.0.0.7:5555",
        3,
        session,
    )


def test_fixed_fields_outside_any_connection(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged
    logger.warning("two\nlines %d", 5)
    (line,) = lines(stream)
    assert line["message"] == "two\nlines 5"
    assert line["level"] == "WARNING"
    assert line["logger"] == "lockgate.test.json"
    timestamp = str(line["timestamp"])
    assert timestamp.endswith("+00:00") and "T" in timestamp and "." in timestamp
    assert set(line) == {"timestamp", "level", "logger", "message"}
    assert stream.getvalue().count("\n") == 1  # one line per record


def test_request_context_follows_the_task(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = logged

    async def connection() -> None:
        current_connection.set(ConnectionContext("10.0.0.7:5555", "PLAINTEXT", 3))

        async def handle() -> None:
            current_request.set(request())
            await asyncio.sleep(0)
            logger.info("in the handler")

        async def read_loop() -> None:
            logger.info("closing")

        await asyncio.gather(asyncio.create_task(handle()), asyncio.create_task(read_loop()))

    asyncio.run(connection())
    logger.info("afterwards")
    by_message = {line["message"]: line for line in lines(stream)}
    assert {k: v for k, v in by_message["in the handler"].items() if k != "timestamp"} == {
        "level": "INFO",
        "logger": "lockgate.test.json",
        "message": "in the handler",
        "client_address": "10.0.0.7:5555",
        "listener": "PLAINTEXT",
        "connection": 3,
        "client_id": "app-1",
        "api": "PRODUCE",
        "api_key": 0,
        "api_version": 9,
        "correlation_id": 42,
        "principal": "User:alice",
    }
    closing = by_message["closing"]  # the connection's task: its address, no request
    assert closing["client_address"] == "10.0.0.7:5555" and "api" not in closing
    assert "client_address" not in by_message["afterwards"]


def test_unauthenticated_requests_name_no_principal(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged

    async def handle() -> None:
        current_request.set(request(ApiKey.SASL_HANDSHAKE, authenticated=False))
        logger.info("handshake")

    asyncio.run(handle())
    (line,) = lines(stream)
    assert line["api"] == "SASL_HANDSHAKE" and "principal" not in line


def test_exceptions_are_fields(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = logged
    try:
        raise ValueError("bad")
    except ValueError:
        logger.exception("failed")
    (line,) = lines(stream)
    assert line["message"] == "failed"
    assert line["exception_type"] == "ValueError"
    assert "Traceback" in str(line["exception"]) and "ValueError: bad" in str(line["exception"])


def test_plain_text_is_the_default_format() -> None:
    stream = io.StringIO()
    handler = log_handler("plain", stream)
    record = logging.LogRecord("lockgate.x", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    handler.emit(record)
    assert stream.getvalue().rstrip().endswith("INFO lockgate.x: hello you")
    with pytest.raises(ValueError):
        log_handler("xml")


def test_serve_refuses_an_unknown_log_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    assert main(["serve", "--data-dir", str(data), "--set", "lockgate.log.format=xml"]) == 2
    assert "lockgate.log.format='xml'" in capsys.readouterr().err
    assert not data.exists()  # refused before anything started
