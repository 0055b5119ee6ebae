"""Fixtures shared by the integration modules (tests/conftest.py has the suite-wide ones)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lockgate.server.broker import Broker
from tests.integration.test_client_producer import FORGETFUL, start_broker
from tests.support.fault_proxy import FaultProxy


@pytest.fixture
async def proxied_memory_broker(fault_proxy: FaultProxy) -> AsyncIterator[Broker]:
    """An in-process broker (memory storage) reached through `fault_proxy` and advertising its
    address, so that clients reconnect through the proxy too."""
    instance = await start_broker({"advertised.listeners": fault_proxy.address})
    fault_proxy.set_upstream(instance.port)
    try:
        yield instance
    finally:
        await instance.stop()


@pytest.fixture
async def forgetful_broker() -> AsyncIterator[Broker]:
    """An in-process broker whose partitions forget producers idle for 300 ms."""
    instance = await start_broker(FORGETFUL)
    try:
        yield instance
    finally:
        await instance.stop()
