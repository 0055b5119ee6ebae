"""offsets.retention.ms (Kafka's offsets.retention.minutes, KIP-211): offsets of an Empty group
expire once it has been Empty that long, offsets committed without group membership by their
commit time, a group with consumer members keeps its subscribed topics' offsets, and a group
left with nothing is removed; the expiry is logged, so a restart does not bring them back."""

from __future__ import annotations

import struct
import time
from collections.abc import AsyncIterator

import pytest

from lockgate.coordinator.group.records import CommittedOffset, decode_offset_value
from lockgate.coordinator.group.state import GroupState
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.coordinator.group.support import (
    OTHER_TOPIC,
    TOPIC,
    bounded,
    join,
    start_broker,
    sync,
    wait_until,
)

RETENTION_MS = 60_000


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    instance = await start_broker(MemoryEngine(), **{"offsets.retention.ms": str(RETENTION_MS)})
    try:
        yield instance
    finally:
        await instance.stop()


def committed_at(
    timestamp: int, *entries: tuple[str, int, int]
) -> dict[tuple[str, int], CommittedOffset]:
    return {(t, p): CommittedOffset(o, -1, "", timestamp) for t, p, o in entries}


def subscription(*topics: str) -> bytes:
    """A consumer-protocol subscription (version 0) naming `topics`."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


async def test_offsets_committed_without_a_group_expire_by_commit_time(broker: Broker) -> None:
    groups = broker.groups
    now = int(time.time() * 1000)
    await groups.commit(
        "standalone", -1, "", None, committed_at(now - 2 * RETENTION_MS, (TOPIC, 0, 5))
    )
    await groups.commit("standalone", -1, "", None, committed_at(now, (TOPIC, 1, 7)))
    assert groups.expire_offsets(now) == 1
    assert set(groups.groups["standalone"].offsets) == {(TOPIC, 1)}
    assert groups.expire_offsets(now + 2 * RETENTION_MS) == 1
    assert "standalone" not in groups.groups  # nothing left: the group is removed


async def test_an_empty_group_expires_by_the_time_it_became_empty(broker: Broker) -> None:
    groups = broker.groups
    answer = await bounded(join(groups, "billing", instance="i", client_id="c"))
    member, generation = answer["member_id"], answer["generation_id"]
    await bounded(sync(groups, "billing", generation, member, {member: b"x"}, "i"))
    old = int(time.time() * 1000) - 10 * RETENTION_MS  # committed long ago...
    await groups.commit("billing", generation, member, "i", committed_at(old, (TOPIC, 0, 3)))
    groups.leave("billing", [(member, "i")])
    await wait_until(lambda: groups.groups["billing"].state is GroupState.EMPTY)
    emptied = groups.groups["billing"].state_timestamp
    assert groups.expire_offsets(emptied + RETENTION_MS - 1) == 0  # ...but empty only now
    assert groups.expire_offsets(emptied + RETENTION_MS) == 1
    assert "billing" not in groups.groups


async def test_a_consumer_group_keeps_its_subscribed_topics_offsets(broker: Broker) -> None:
    groups = broker.groups
    protocols = [("range", subscription(TOPIC))]
    answer = await bounded(join(groups, "live", instance="i", client_id="c", protocols=protocols))
    member, generation = answer["member_id"], answer["generation_id"]
    await bounded(sync(groups, "live", generation, member, {member: b"x"}, "i"))
    old = int(time.time() * 1000) - 10 * RETENTION_MS
    await groups.commit(
        "live", generation, member, "i", committed_at(old, (TOPIC, 0, 3), (OTHER_TOPIC, 0, 4))
    )
    assert groups.expire_offsets(int(time.time() * 1000)) == 1
    assert set(groups.groups["live"].offsets) == {(TOPIC, 0)}


async def test_expired_offsets_stay_expired_after_a_restart() -> None:
    engine = MemoryEngine()
    settings = {"offsets.retention.ms": str(RETENTION_MS)}
    broker = await start_broker(engine, **settings)
    try:
        now = int(time.time() * 1000)
        await broker.groups.commit(
            "gone", -1, "", None, committed_at(now - 2 * RETENTION_MS, (TOPIC, 0, 1))
        )
        await broker.groups.commit("kept", -1, "", None, committed_at(now, (TOPIC, 0, 2)))
        assert broker.groups.expire_offsets(now) == 1
    finally:
        await broker.stop()
    restarted = await start_broker(engine, **settings)
    try:
        assert "gone" not in restarted.groups.groups
        kept = restarted.groups.groups["kept"].offsets[(TOPIC, 0)]
        assert decode_offset_value(kept).offset == 2
    finally:
        await restarted.stop()


def test_the_minutes_alias_sets_the_retention() -> None:
    from lockgate.config.properties import BrokerConfig

    assert (
        BrokerConfig({"offsets.retention.minutes": "2"}).integer("offsets.retention.ms") == 120_000
    )
