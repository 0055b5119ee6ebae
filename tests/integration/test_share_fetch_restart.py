"""A share-partition leader killed (kill -9) with records acquired and not acknowledged: after
the restart those records are AVAILABLE again (acquisitions are never written, KIP-932), and
what was acknowledged stays done. Before that, a consumer's connection closing releases its
records to another member. Records are produced by confluent-kafka; the share partition
is initialized over the wire as the group coordinator does (InitializeShareGroupState), then
ShareFetch / ShareAcknowledge are sent by hand (the member need not be in a group)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lockgate.client.connection import BrokerConnection
from lockgate.protocol.api import ApiKey
from tests.support.broker import BrokerProcess

TOPIC = "share-restart"
TIMEOUT = 30.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        yield process
    finally:
        process.kill()


def produce(broker: BrokerProcess, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        future.result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(TOPIC, value=b"r%d" % i, partition=0)
        assert producer.flush(TIMEOUT) == 0  # one batch per record


async def connect(broker: BrokerProcess) -> BrokerConnection:
    connection = BrokerConnection("127.0.0.1", broker.port)
    await connection.connect()
    return connection


async def topic_id(connection: BrokerConnection) -> uuid.UUID:
    answer = await connection.request(
        ApiKey.METADATA,
        {
            "topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
        version=12,
    )
    (topic,) = answer.topics
    return uuid.UUID(str(topic.topic_id))


async def share_fetch(
    connection: BrokerConnection,
    tid: uuid.UUID,
    epoch: int,
    member: str = "member-1",
    max_wait: int = 0,
) -> Any:
    return await connection.request(
        ApiKey.SHARE_FETCH,
        {
            "group_id": "g",
            "member_id": member,
            "share_session_epoch": epoch,
            "max_wait": max_wait,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 100,
            "batch_size": 100,
            "topics": [
                {
                    "topic_id": tid,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": []}],
                }
            ],
            "forgotten_topics_data": [],
        },
        version=2,
    )


def acquired(answer: Any) -> list[tuple[int, int, int]]:
    assert answer.error_code == 0
    (topic,) = answer.responses
    (partition,) = topic.partitions
    assert partition.error_code == 0 and partition.acknowledge_error_code == 0
    return [
        (int(r.first_offset), int(r.last_offset), int(r.delivery_count))
        for r in partition.acquired_records
    ]


async def test_acquired_records_come_back_after_kill_9(broker: BrokerProcess) -> None:
    produce(broker, 4)
    connection = await connect(broker)
    try:
        tid = await topic_id(connection)
        initialized = await connection.request(
            ApiKey.INITIALIZE_SHARE_GROUP_STATE,
            {
                "group_id": "g",
                "topics": [
                    {
                        "topic_id": tid,
                        "partitions": [{"partition": 0, "state_epoch": 1, "start_offset": 0}],
                    }
                ],
            },
            version=0,
        )
        assert initialized.results[0].partitions[0].error_code == 0
        assert acquired(await share_fetch(connection, tid, 0)) == [(0, 3, 1)]
        # 1 accepted, 2 rejected (answered once durable); 0 and 3 stay acquired
        answer = await connection.request(
            ApiKey.SHARE_ACKNOWLEDGE,
            {
                "group_id": "g",
                "member_id": "member-1",
                "share_session_epoch": 1,
                "is_renew_ack": False,
                "topics": [
                    {
                        "topic_id": tid,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "acknowledgement_batches": [
                                    {
                                        "first_offset": 1,
                                        "last_offset": 2,
                                        "acknowledge_types": [1, 3],
                                    }
                                ],
                            }
                        ],
                    }
                ],
            },
            version=2,
        )
        assert answer.error_code == 0 and answer.responses[0].partitions[0].error_code == 0
    finally:
        await connection.close()
    # the connection closed: its session ends, 0 and 3 are released (their delivery counted,
    # as Kafka 4.4); another member gets them (its fetch waits until the broker has seen the
    # close)
    other = await connect(broker)
    try:
        assert acquired(await share_fetch(other, tid, 0, "member-2", 20_000)) == [
            (0, 0, 2),
            (3, 3, 2),
        ]
        # kill -9 while member-2 holds them: closing its connection first would release
        # them, and that release's write could reach the log before the kill, or not
        broker.restart(clean=False)
    finally:
        await other.close()
    connection = await connect(broker)
    try:
        # 0 and 3 again (their second acquisition was never written: the count of their
        # last write, the release, plus this delivery), 1-2 stay done
        assert acquired(await share_fetch(connection, tid, 0)) == [(0, 0, 2), (3, 3, 2)]
    finally:
        await connection.close()
