from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from lockgate.server.broker import Broker
from lockgate.server.config import BrokerConfig
from lockgate.storage.memory import MemoryEngine
from tests.support.broker import BrokerProcess


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker in a child process with its data under tmp_path; stopped afterwards."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture
async def memory_broker() -> AsyncIterator[Broker]:
    """An in-process broker on an ephemeral port, storing in memory."""
    config = BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.durability": "page-cache"})
    broker = Broker(config, MemoryEngine())
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()
