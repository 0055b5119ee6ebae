# The group coordinator's tests: a storage engine and an in-process broker over it, both
# coordinators loaded (tests that restart the broker start another over the same engine).
from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.coordinator.group.support import start_broker


@pytest.fixture
def engine() -> MemoryEngine:
    return MemoryEngine()


@pytest.fixture
async def broker(engine: MemoryEngine) -> AsyncIterator[Broker]:
    instance = await start_broker(engine)
    try:
        yield instance
    finally:
        await instance.stop()
