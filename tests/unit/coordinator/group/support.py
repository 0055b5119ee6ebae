"""An in-process broker on MemoryEngine for driving the group coordinator directly, and small
helpers around its join/sync calls. Every wait is bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.group.records import CommittedOffset
from lockgate.coordinator.group.service import GroupCoordinator
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine

TOPIC = "orders"
OTHER_TOPIC = "payments"
PARTITIONS = 3
SESSION_MS = 6_000
REBALANCE_MS = 10_000
PROTOCOLS: list[tuple[str, bytes]] = [("range", b"range-metadata")]

SETTINGS = {
    "listeners": "127.0.0.1:0",
    "lockgate.durability": "page-cache",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}

Answer = dict[str, Any]


async def start_broker(engine: MemoryEngine, **overrides: str) -> Broker:
    """Starts a broker over `engine` (fresh topics on a fresh engine) and waits until both
    coordinators have loaded their logs."""
    broker = Broker(BrokerConfig({**SETTINGS, **overrides}), engine)
    await broker.start()
    await wait_until(lambda: broker.groups.loaded and broker.transactions.loaded)
    for name in (TOPIC, OTHER_TOPIC):
        if name not in broker.topics.topics:
            broker.topics.create(name, PARTITIONS, 1, {})
    return broker


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


async def bounded(awaitable: Awaitable[Answer], timeout: float = 5.0) -> Answer:
    return await asyncio.wait_for(awaitable, timeout)


def join(
    groups: GroupCoordinator,
    group_id: str,
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    client_id: str = "client",
    require_known_member_id: bool = True,
) -> Coroutine[Any, Any, Answer]:
    return groups.join(
        group_id,
        member_id,
        instance,
        "consumer",
        PROTOCOLS if protocols is None else protocols,
        session_ms,
        rebalance_ms,
        client_id,
        "127.0.0.1",
        require_known_member_id,
    )


async def new_member_id(groups: GroupCoordinator, group_id: str, client_id: str = "c") -> str:
    """The first JoinGroup (v4+) of a dynamic member: answered at once with
    MEMBER_ID_REQUIRED and the id to join with."""
    answer = await bounded(join(groups, group_id, client_id=client_id))
    assert answer["error_code"] == ErrorCode.member_id_required
    member_id = answer["member_id"]
    assert isinstance(member_id, str) and member_id.startswith(client_id)
    return member_id


def sync(
    groups: GroupCoordinator,
    group_id: str,
    generation: int,
    member_id: str,
    assignments: dict[str, bytes] | None = None,
    instance: str | None = None,
) -> Coroutine[Any, Any, Answer]:
    return groups.sync(
        group_id, generation, member_id, instance, "consumer", "range", assignments or {}
    )


async def stable_group(
    groups: GroupCoordinator, group_id: str, count: int, **join_args: Any
) -> tuple[int, list[str]]:
    """`count` dynamic members joined in one generation and synced (assignment = member id):
    returns (generation, member ids with the leader first)."""
    ids = [await new_member_id(groups, group_id, f"c{i}") for i in range(count)]
    answers = await asyncio.wait_for(
        asyncio.gather(*(join(groups, group_id, m, **join_args) for m in ids)), 5
    )
    assert all(a["error_code"] == 0 for a in answers), answers
    generation = answers[0]["generation_id"]
    leader = answers[0]["leader"]
    ordered = [leader, *(m for m in ids if m != leader)]
    synced = await asyncio.wait_for(
        asyncio.gather(
            *(
                sync(groups, group_id, generation, m, {x: x.encode() for x in ids})
                if m == leader
                else sync(groups, group_id, generation, m)
                for m in ordered
            )
        ),
        5,
    )
    assert [a["error_code"] for a in synced] == [0] * count, synced
    return generation, ordered


def offsets(*entries: tuple[str, int, int]) -> dict[tuple[str, int], CommittedOffset]:
    return {(t, p): CommittedOffset(o, -1, f"at {o}", 1_000) for t, p, o in entries}


def visible(groups: GroupCoordinator, group_id: str) -> dict[tuple[str, int], int]:
    """Committed offsets of the group as OffsetFetch (all partitions, not RequireStable) sees
    them."""
    error, answers = groups.fetch(group_id, None, False)
    assert error == ErrorCode.none
    return {tp: c.offset for tp, (c, e) in answers.items() if c is not None and e == 0}
