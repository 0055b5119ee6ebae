"""Connection counts per address and in all, and the request memory budget."""

from __future__ import annotations

import asyncio

import pytest

from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.server.connection_limits import ConnectionLimits, RequestMemory, parse_overrides


def limits(**settings: str) -> ConnectionLimits:
    return ConnectionLimits(BrokerConfig({k.replace("_", "."): v for k, v in settings.items()}))


def test_per_address_limit_and_its_overrides() -> None:
    counted = ConnectionLimits(
        BrokerConfig(
            {"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "10.0.0.9:3"}
        )
    )
    assert [counted.admit("127.0.0.1") for _ in range(3)] == [True, True, False]
    assert [counted.admit("10.0.0.9") for _ in range(4)] == [True, True, True, False]
    counted.release("127.0.0.1")
    assert counted.admit("127.0.0.1")
    assert counted.refused == 2 and counted.open == 5


def test_broker_wide_limit() -> None:
    counted = limits(max_connections="2")
    assert [counted.admit(a) for a in ("a", "b", "c")] == [True, True, False]
    counted.release("a")
    assert counted.admit("c") and counted.by_address == {"b": 1, "c": 1}


def test_overrides_syntax() -> None:
    assert parse_overrides("") == {}
    assert parse_overrides("host1:5, 10.1.2.3:0") == {"host1": 5, "10.1.2.3": 0}
    with pytest.raises(ConfigError):
        parse_overrides("host-without-count")


async def test_request_memory_waits_until_memory_is_given_back() -> None:
    memory = RequestMemory(100)
    await memory.acquire(60)
    waiting = asyncio.create_task(memory.acquire(50))
    await asyncio.sleep(0.01)
    assert not waiting.done() and memory.used == 60
    memory.release(60)
    await asyncio.wait_for(waiting, 1)
    assert memory.used == 50


async def test_a_request_larger_than_the_budget_is_read_alone() -> None:
    memory = RequestMemory(100)
    await memory.acquire(10)
    huge = asyncio.create_task(memory.acquire(500))
    await asyncio.sleep(0.01)
    assert not huge.done()
    memory.release(10)
    await asyncio.wait_for(huge, 1)
    assert memory.used == 500


async def test_unbounded_memory_never_waits() -> None:
    memory = RequestMemory(0)
    await asyncio.wait_for(memory.acquire(10**12), 1)
    memory.release(10**12)
