"""Consumer-protocol groups (KIP-848) when the coordinator moves (cluster mode): losing the
leadership of a __consumer_offsets partition forgets its consumer groups and their timers
(heartbeats get NOT_COORDINATOR); leading it again replays them, members and epochs included,
with fresh sessions. Driven by calling on_leadership directly on a broker that is not started."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.group.consumer_group import HeartbeatRequest, HeartbeatResponse
from lockgate.coordinator.group.service import GroupCoordinator
from lockgate.protocol.errors import ErrorCode
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC
from tests.unit.coordinator.group.support import wait_until
from tests.unit.coordinator.test_group_ownership import GROUP, PARTITIONS, SETTINGS, TOPIC


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(SETTINGS), MemoryEngine())
    broker.topics.create(CONSUMER_OFFSETS_TOPIC, PARTITIONS, 1, {}, internal=True)
    broker.topics.create(TOPIC, 2, 1, {})
    try:
        yield broker
    finally:
        for index in list(broker.groups.runtime.owned):
            broker.groups.runtime.on_leadership(index, None)
        broker.topics.close()


async def lead(groups: GroupCoordinator, epoch: int) -> None:
    groups.runtime.on_leadership(0, epoch)
    await wait_until(lambda: 0 in groups.runtime.loaded_partitions)


async def beat(groups: GroupCoordinator, epoch: int) -> HeartbeatResponse:
    request = HeartbeatRequest(
        GROUP, "m1", epoch, rebalance_timeout_ms=5000 if epoch == 0 else -1,
        subscribed_topic_names=(TOPIC,) if epoch == 0 else None, owned={} if epoch == 0 else None,
    )  # fmt: skip
    return await groups.consumer.heartbeat(request)


async def test_consumer_groups_follow_the_leadership(broker: Broker) -> None:
    groups = broker.groups
    await lead(groups, 1)
    joined = await beat(groups, 0)
    assert joined.error == ErrorCode.none and joined.assignment == {TOPIC: frozenset({0, 1})}
    assert (GROUP, "m1") in groups.consumer.sessions
    groups.runtime.on_leadership(0, None)
    assert GROUP not in groups.groups and not groups.consumer.sessions
    assert (await beat(groups, joined.member_epoch)).error == ErrorCode.not_coordinator
    await lead(groups, 2)
    restored = groups.groups[GROUP].consumer
    assert restored is not None and restored.members["m1"].member_epoch == joined.member_epoch
    assert (GROUP, "m1") in groups.consumer.sessions
    assert (await beat(groups, joined.member_epoch)).error == ErrorCode.none
