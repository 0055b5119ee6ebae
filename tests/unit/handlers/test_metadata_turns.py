"""An all-topics Metadata answer gives the event loop back every PARTITIONS_PER_TURN partitions
(at 10,000 partitions it is tens of milliseconds of work), and still lists every partition."""

from __future__ import annotations

import asyncio

import pytest

from lockgate.config.properties import BrokerConfig
from lockgate.handlers import k03_metadata
from lockgate.handlers.registry import HANDLERS, RawBody, RequestContext
from lockgate.protocol.api import ApiKey, build, request_class
from lockgate.security.session import SecurityProtocol, Session
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine


async def test_an_all_topics_answer_gives_the_loop_back_as_it_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(k03_metadata, "PARTITIONS_PER_TURN", 4)
    broker = Broker(
        BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.durability": "page-cache"}),
        MemoryEngine(),
    )
    await broker.start()
    try:
        for number in range(5):
            await broker.admin.create(f"t{number}", 4, 1, {})
        session = Session("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", "User:ANONYMOUS")
        ctx = RequestContext(
            broker.services, ApiKey.METADATA, 12, 1, "test", "127.0.0.1:1", 1, session
        )
        body = {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        request = build(request_class(ApiKey.METADATA, 12), body)  # type: ignore[arg-type]
        turns = 0

        async def other_work() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        worker = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        started = turns
        answer = await HANDLERS[ApiKey.METADATA].handler(ctx, request)
        worker.cancel()
        assert turns - started >= 5  # after each topic of 4 partitions (internal ones too)
        assert not isinstance(answer, RawBody) and answer is not None
        listed = {t["name"]: len(t["partitions"]) for t in answer["topics"]}
        assert all(listed[f"t{number}"] == 4 for number in range(5))
    finally:
        await broker.stop()
