"""A deleted topic's group state end to end, against Apache Kafka 4.4 and lockgate alike: a
consumer group's committed offset of a topic that is deleted and created again under the same
name is gone (OffsetFetch answers none; a consumer of the group starts where
auto.offset.reset says, not at the old topic's offset), and a share group whose share
partitions of the deleted topic had state can be deleted (its record 15 and the share state
went with the topic). Kafka cleans up after answering DeleteTopics, in the background: the
checks poll, with a bound."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lockgate.client import cluster
from lockgate.client.admin import Admin
from lockgate.client.errors import UnknownTopicOrPartitionError

pytestmark = pytest.mark.compat

BROKERS = ["kafka", "lockgate"]
BOUND_S = 60.0
OLD_COMMIT = 2  # the old topic's committed offset: within the new topic's records
NEW_RECORDS = 5


def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND_S
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {BOUND_S} s"
        time.sleep(0.2)


def create_topic(admin: AdminClient, topic: str) -> None:
    """Creates the topic; right after a deletion Kafka may still refuse the name (the old
    topic is being removed): asked again until accepted."""

    def created() -> bool:
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        except KafkaException as exc:
            if "already exists" in str(exc) or "marked for deletion" in str(exc):
                return False
            raise
        return True

    until(f"creating {topic}", created)


def delete_topic(admin: AdminClient, topic: str) -> None:
    admin.delete_topics([topic])[topic].result(30)


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(count):
        producer.produce(topic, f"r{n}".encode(), partition=0)
    assert producer.flush(30) == 0


def group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 10_000,
    })  # fmt: skip


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The group's committed offset of partition 0 (OffsetFetch); -1001: none."""
    consumer = group_consumer(bootstrap, group)
    try:
        (found,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert found.error is None, found.error
        return int(found.offset)
    finally:
        consumer.close()


@pytest.mark.parametrize("share_broker", BROKERS, indirect=True)
def test_a_topic_created_again_has_no_committed_offset_of_the_old_one(share_broker: str) -> None:
    bootstrap = share_broker
    suffix = uuid.uuid4().hex[:10]
    topic, group = f"deleted-{suffix}", f"deleted-group-{suffix}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(admin, topic)
    produce(bootstrap, topic, 3)
    committer = group_consumer(bootstrap, group)
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, OLD_COMMIT)], asynchronous=False)
    finally:
        committer.close()
    assert committed(bootstrap, group, topic) == OLD_COMMIT

    delete_topic(admin, topic)
    create_topic(admin, topic)
    produce(bootstrap, topic, NEW_RECORDS)
    until("the old offset deleted", lambda: committed(bootstrap, group, topic) < 0)

    consumer = group_consumer(bootstrap, group)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + BOUND_S
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        assert message is not None and message.error() is None, message
        # auto.offset.reset (earliest) of the new topic, not the old topic's offset
        assert message.offset() == 0 and message.value() == b"r0"
    finally:
        consumer.close()


async def _share_group_with_state(bootstrap: str, topic: str, group: str) -> None:
    """A share group made by AlterShareGroupOffsets (no consumer): its share partitions of
    the topic initialized (state at the share coordinator, record 15)."""
    async with Admin(bootstrap) as admin:
        await admin.create_topic(topic, num_partitions=2, replication_factor=1)
        start = {cluster.TopicPartition(topic, p): 0 for p in (0, 1)}
        # Kafka's group coordinator learns of the new topic from its metadata image a moment
        # after CreateTopics answers: until then the alter answers UNKNOWN_TOPIC_OR_PARTITION
        # and changes nothing
        deadline = time.monotonic() + BOUND_S
        while True:
            altered = await admin.alter_share_group_offsets_by_partition(group, start)
            unknown = all(isinstance(e, UnknownTopicOrPartitionError) for e in altered.values())
            if not unknown or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert set(altered.values()) == {None}, altered
        described = await admin.describe_share_group_offsets(group)
        assert {tp.partition for tp in described} == {0, 1}


async def _deleted(bootstrap: str, group: str) -> bool:
    async with Admin(bootstrap) as admin:
        (failure,) = (await admin.delete_share_groups([group])).values()
        return failure is None


@pytest.mark.parametrize("share_broker", BROKERS, indirect=True)
def test_a_share_group_of_a_deleted_topic_can_be_deleted(share_broker: str) -> None:
    bootstrap = share_broker
    suffix = uuid.uuid4().hex[:10]
    topic, group = f"deleted-share-{suffix}", f"deleted-share-group-{suffix}"
    asyncio.run(_share_group_with_state(bootstrap, topic, group))
    delete_topic(AdminClient({"bootstrap.servers": bootstrap}), topic)
    # the group's state of the topic went with it: nothing is left to delete but the group
    # (a deletion that fails changes nothing: asked again until Kafka's cleanup ran)
    until(
        "the share group deleted",
        lambda: asyncio.run(_deleted(bootstrap, group)),
    )
