"""Fetch naming a replica id on a single node: it has no followers (NoFollowers), so the fetch
is read as a consumer's. With read_committed it stops at the last stable offset, where a
cluster leader's follower would read on to the log end."""

from __future__ import annotations

import pytest

from lockgate.client.connection import BrokerConnection
from lockgate.protocol.api import ApiKey
from lockgate.protocol.records import TRANSACTIONAL_BIT, build_batch, validate_produced_batch
from lockgate.server.broker import Broker

TOPIC = "replica-id"
PID = 77
READ_COMMITTED = 1


def fetch(replica_id: int, isolation: int) -> dict[str, object]:
    partition = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}  # fmt: skip
    return {"cluster_id": None, "replica_id": replica_id, "max_wait": 0, "min_bytes": 0,
            "max_bytes": 1 << 20, "isolation_level": isolation, "session_id": 0,
            "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [partition]}],
            "forgotten_topics_data": [], "rack_id": ""}  # fmt: skip


@pytest.mark.parametrize("replica_id", [-1, 1])
async def test_a_fetch_naming_a_replica_reads_as_a_consumer(
    memory_broker: Broker, replica_id: int
) -> None:
    memory_broker.topics.create(TOPIC, 1, 1, {})
    partition = memory_broker.topics.get(TOPIC, 0)
    assert partition is not None
    batch = build_batch(
        [(None, b"open")], attributes=TRANSACTIONAL_BIT, producer_id=PID, producer_epoch=0,
        base_sequence=0,
    )  # fmt: skip
    partition.append(bytearray(batch), validate_produced_batch(batch), 1_000)
    await memory_broker.group_commit.appended(partition)  # the high watermark passes it
    assert partition.last_stable_offset == 0 < partition.high_watermark
    connection = BrokerConnection("127.0.0.1", memory_broker.port)
    await connection.connect()
    try:
        answer = await connection.request(
            ApiKey.FETCH, fetch(replica_id, READ_COMMITTED), version=12
        )
        uncommitted = await connection.request(ApiKey.FETCH, fetch(replica_id, 0), version=12)
    finally:
        await connection.close()
    (read,) = answer.responses[0].partitions
    assert read.error_code == 0 and not read.records  # the open transaction is not visible
    assert read.last_stable_offset == 0
    (read,) = uncommitted.responses[0].partitions
    assert read.error_code == 0 and read.records  # read_uncommitted sees it
