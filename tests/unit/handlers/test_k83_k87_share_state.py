"""The share-state APIs (83-87) and FindCoordinator key type 2 at the handler, against a broker
in this process (memory storage, the ACL authorizer on): each request built and each answer
encoded with kio at the version under test; the share coordinator's state through a restart
and through pruning."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.coordinator.share.routing import topic_id_string
from lockgate.protocol.api import ApiKey, build, response_class
from lockgate.protocol.errors import ErrorCode
from lockgate.security.session import Session
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.internal import SHARE_GROUP_STATE_TOPIC
from tests.unit.handlers.support import (
    ADMIN,
    ALICE,
    SHARE_SETTINGS,
    call,
    running,
    started,
    topic_id,
)

SETTINGS = {**SHARE_SETTINGS, "share.coordinator.snapshot.update.records.per.snapshot": "2"}
INIT, READ, WRITE, DELETE, SUMMARY = (
    ApiKey.INITIALIZE_SHARE_GROUP_STATE,
    ApiKey.READ_SHARE_GROUP_STATE,
    ApiKey.WRITE_SHARE_GROUP_STATE,
    ApiKey.DELETE_SHARE_GROUP_STATE,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
)


@pytest.fixture
async def engine() -> MemoryEngine:
    return MemoryEngine()


@pytest.fixture
async def broker(engine: MemoryEngine) -> AsyncIterator[Broker]:
    async with running(engine, SETTINGS) as broker:
        await broker.admin.create("t", 2, 1, {})
        yield broker


def one(answer: Any) -> dict[str, Any]:
    (result,) = answer["results"]
    (partition,) = result["partitions"]
    return dict(partition)


async def initialize(broker: Broker, state_epoch: int = 1, start: int = 0, p: int = 0) -> Any:
    return one(
        await call(
            broker,
            INIT,
            0,
            {
                "group_id": "g",
                "topics": [
                    {
                        "topic_id": topic_id(broker),
                        "partitions": [
                            {"partition": p, "state_epoch": state_epoch, "start_offset": start}
                        ],
                    }
                ],
            },
        )
    )


async def read(broker: Broker, leader_epoch: int = 1, p: int = 0) -> Any:
    return one(
        await call(
            broker,
            READ,
            0,
            {
                "group_id": "g",
                "topics": [
                    {
                        "topic_id": topic_id(broker),
                        "partitions": [{"partition": p, "leader_epoch": leader_epoch}],
                    }
                ],
            },
        )
    )


async def write(
    broker: Broker,
    batches: list[tuple[int, int, int, int]],
    start: int = 0,
    leader_epoch: int = 1,
    state_epoch: int = 1,
    complete: int = -1,
    version: int = 1,
) -> Any:
    partition: dict[str, Any] = {
        "partition": 0,
        "state_epoch": state_epoch,
        "leader_epoch": leader_epoch,
        "start_offset": start,
        "state_batches": [
            {"first_offset": f, "last_offset": last, "delivery_state": s, "delivery_count": c}
            for f, last, s, c in batches
        ],
    }
    if version >= 1:
        partition["delivery_complete_count"] = complete
    return one(
        await call(
            broker,
            WRITE,
            version,
            {
                "group_id": "g",
                "topics": [{"topic_id": topic_id(broker), "partitions": [partition]}],
            },
        )
    )


async def summary(broker: Broker, version: int = 1) -> Any:
    return one(
        await call(
            broker,
            SUMMARY,
            version,
            {
                "group_id": "g",
                "topics": [
                    {
                        "topic_id": topic_id(broker),
                        "partitions": [{"partition": 0, "leader_epoch": 0}],
                    }
                ],
            },
        )
    )


def batches(answer: Any) -> list[tuple[int, int, int, int]]:
    return [
        (b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
        for b in answer["state_batches"]
    ]


async def test_initialize_write_read_summary_delete(broker: Broker) -> None:
    assert (await read(broker))["error_code"] == ErrorCode.invalid_request  # uninitialized
    assert (await initialize(broker, state_epoch=3, start=10))["error_code"] == ErrorCode.none
    assert (await write(broker, [(10, 19, 2, 1)], start=10, state_epoch=3, complete=10))[
        "error_code"
    ] == ErrorCode.none
    assert (await write(broker, [(15, 24, 0, 2)], start=12, state_epoch=3))["error_code"] == 0
    answer = await read(broker, leader_epoch=1)
    assert (answer["state_epoch"], answer["start_offset"]) == (3, 12)
    assert batches(answer) == [(12, 14, 2, 1), (15, 24, 0, 2)]
    described = await summary(broker)
    assert (described["start_offset"], described["leader_epoch"], described["state_epoch"]) == (
        12,
        1,
        3,
    )
    v0 = await call(
        broker,
        SUMMARY,
        0,
        {
            "group_id": "g",
            "topics": [
                {"topic_id": topic_id(broker), "partitions": [{"partition": 0, "leader_epoch": 0}]}
            ],
        },
    )
    built = build(response_class(SUMMARY, 0), v0)
    assert not hasattr(built.results[0].partitions[0], "delivery_complete_count")
    assert (
        one(
            await call(
                broker,
                DELETE,
                0,
                {
                    "group_id": "g",
                    "topics": [{"topic_id": topic_id(broker), "partitions": [{"partition": 0}]}],
                },
            )
        )["error_code"]
        == 0
    )
    assert (await summary(broker))["start_offset"] == -1
    assert (await read(broker))["error_code"] == ErrorCode.invalid_request


async def test_epoch_fences(broker: Broker) -> None:
    await initialize(broker, state_epoch=2)
    assert (await read(broker, leader_epoch=5))["error_code"] == ErrorCode.none
    assert (await read(broker, leader_epoch=4))["error_code"] == ErrorCode.fenced_leader_epoch
    fenced = await write(broker, [], leader_epoch=4, state_epoch=2)
    assert fenced["error_code"] == ErrorCode.fenced_leader_epoch
    stale = await write(broker, [], leader_epoch=5, state_epoch=1)
    assert stale["error_code"] == ErrorCode.fenced_state_epoch
    assert (await initialize(broker, state_epoch=1))["error_code"] == ErrorCode.fenced_state_epoch
    assert (await write(broker, [], leader_epoch=5, state_epoch=2, version=0))["error_code"] == 0


async def test_metadata_and_request_errors(broker: Broker) -> None:
    assert (await initialize(broker, p=2))["error_code"] == ErrorCode.unknown_topic_or_partition
    assert (await initialize(broker, p=-1))["error_code"] == ErrorCode.invalid_request
    assert (await initialize(broker, state_epoch=-1))["error_code"] == ErrorCode.invalid_request
    unknown = await call(
        broker,
        SUMMARY,
        1,
        {
            "group_id": "g",
            "topics": [
                {"topic_id": uuid.uuid4(), "partitions": [{"partition": 0, "leader_epoch": 0}]}
            ],
        },
    )
    assert one(unknown)["error_code"] == ErrorCode.unknown_topic_or_partition
    # no topics, a topic with no partitions, an empty group id: an empty answer
    assert await call(broker, READ, 0, {"group_id": "g", "topics": []}) == {"results": []}
    no_partitions = {"group_id": "g", "topics": [{"topic_id": topic_id(broker), "partitions": []}]}
    assert await call(broker, DELETE, 0, no_partitions) == {"results": []}
    no_group = {
        "group_id": "",
        "topics": [{"topic_id": topic_id(broker), "partitions": [{"partition": 0}]}],
    }
    assert await call(broker, DELETE, 0, no_group) == {"results": []}


async def test_cluster_action_is_required(broker: Broker) -> None:
    body = {
        "group_id": "g",
        "topics": [
            {"topic_id": topic_id(broker), "partitions": [{"partition": 0}, {"partition": 1}]}
        ],
    }
    answer = await call(broker, DELETE, 0, body, session=ALICE)
    codes = [p["error_code"] for p in answer["results"][0]["partitions"]]
    assert codes == [ErrorCode.cluster_authorization_failed] * 2


async def test_loading_and_not_coordinating(broker: Broker) -> None:
    await broker.shares.open()
    key_partition = broker.shares.runtime.partition_for(f"g:{topic_id_string(topic_id(broker))}:0")
    broker.shares.runtime.loaded_partitions.discard(key_partition)
    assert (await initialize(broker))["error_code"] == ErrorCode.coordinator_load_in_progress
    broker.shares.runtime.unload(key_partition)
    assert (await initialize(broker))["error_code"] == ErrorCode.not_coordinator


async def find(broker: Broker, key: str, version: int = 6, session: Session = ADMIN) -> Any:
    body = (
        {"key_type": 2, "coordinator_keys": [key]} if version >= 4 else {"key_type": 2, "key": key}
    )
    answer = await call(broker, ApiKey.FIND_COORDINATOR, version, body, session)
    return answer["coordinators"][0] if version >= 4 else answer


async def test_find_coordinator_share_keys(broker: Broker) -> None:
    key = f"g:{topic_id_string(topic_id(broker))}:0"
    # the first lookup makes the topic (as Kafka's does): not available until it is
    assert SHARE_GROUP_STATE_TOPIC not in broker.topics.topics
    assert (await find(broker, key))["error_code"] == ErrorCode.coordinator_not_available
    await broker.coordinators._creating[SHARE_GROUP_STATE_TOPIC]
    assert broker.topics.topics[SHARE_GROUP_STATE_TOPIC].partitions == 3
    assert (await find(broker, key))["node_id"] == broker.node_id
    assert (await find(broker, key, version=5))["error_code"] == ErrorCode.invalid_request
    assert (await find(broker, "g:nonsense:0"))["error_code"] == ErrorCode.invalid_request
    assert (await find(broker, key, session=ALICE))["error_code"] == (
        ErrorCode.cluster_authorization_failed
    )


async def test_the_first_share_state_call_makes_the_topic(broker: Broker) -> None:
    assert SHARE_GROUP_STATE_TOPIC not in broker.topics.topics
    first, second = await asyncio.gather(initialize(broker), read(broker, leader_epoch=0))
    assert first["error_code"] == ErrorCode.none
    assert broker.topics.topics[SHARE_GROUP_STATE_TOPIC].partitions == 3
    assert broker.shares.runtime.loaded
    # a read queued behind the opening, then behind the initialize of the same partition
    assert second["error_code"] == ErrorCode.none


async def test_a_restart_loads_the_same_state_and_pruning_changes_nothing(
    engine: MemoryEngine, broker: Broker
) -> None:
    await initialize(broker, state_epoch=1, start=0)
    for offset in range(7):  # with a snapshot every 2 updates: snapshots and updates mixed
        await write(broker, [(offset, offset, 2, 1)], start=0)
    await read(broker, leader_epoch=4)
    before = (await read(broker, leader_epoch=4), await summary(broker))
    moved = broker.shares.prune()
    ((index, start),) = moved.items()
    log = broker.topics.get(SHARE_GROUP_STATE_TOPIC, index)
    assert log is not None and log.log_start_offset == start > 0
    await broker.stop()
    again = await started(engine, SETTINGS)
    try:
        assert (await read(again, leader_epoch=4), await summary(again)) == before
        assert batches(before[0]) == [(0, 6, 2, 1)]
        assert (await read(again, leader_epoch=3))["error_code"] == ErrorCode.fenced_leader_epoch
    finally:
        await again.stop()
