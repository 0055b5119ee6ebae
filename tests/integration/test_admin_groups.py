"""lockgate.client.Admin's consumer-group calls against a broker, with a confluent-kafka consumer
as the group's member: list, describe with assignments, committed offsets, altering offsets of
an empty group, deleting offsets and groups, and the errors while members remain."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

TOPIC = "admin-groups"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("admin-groups") / "data"
    process = BrokerProcess(data, {"group.initial.rebalance.delay.ms": "0"}).start()
    create_topic(process.bootstrap, TOPIC, 2)
    producer = Producer({"bootstrap.servers": process.bootstrap})
    for i in range(10):
        producer.produce(TOPIC, value=b"v", partition=i % 2)
    assert producer.flush(30) == 0
    try:
        yield process
    finally:
        process.kill()


def member(broker: BrokerProcess, group: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "client.id": "admin-test",
        }
    )
    consumer.subscribe([TOPIC])
    seen, deadline = 0, time.monotonic() + 30
    while seen < 10 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            seen += 1
    assert seen == 10
    consumer.commit(asynchronous=False)
    return consumer


async def test_groups_through_the_admin_client(broker: BrokerProcess) -> None:
    group = "admin-group"
    consumer = await asyncio.to_thread(member, broker, group)
    tp0, tp1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    try:
        async with Admin(broker.bootstrap) as admin:
            listed = {g.group_id: g for g in await admin.list_groups()}
            assert (listed[group].state, listed[group].protocol_type) == ("Stable", "consumer")
            assert [g.group_id for g in await admin.list_groups(states=["Empty"])] == []

            described = (await admin.describe_groups([group]))[group]
            assert described.state == "Stable" and described.protocol == "range"
            (only,) = described.members
            assert only.client_id == "admin-test"
            assert sorted(only.assignment) == [tp0, tp1]
            assert await admin.list_group_offsets(group) == {tp0: 5, tp1: 5}

            with pytest.raises(KafkaError) as busy:
                await admin.alter_group_offsets(group, {tp0: 0})
            assert busy.value.code.name in ("unknown_member_id", "illegal_generation")
            with pytest.raises(KafkaError) as non_empty:
                await admin.delete_groups([group])
            assert non_empty.value.code.name == "non_empty_group"
    finally:
        await asyncio.to_thread(consumer.close)

    async with Admin(broker.bootstrap) as admin:
        await admin.alter_group_offsets(group, {tp0: 2})
        assert await admin.list_group_offsets(group) == {tp0: 2, tp1: 5}
        await admin.delete_group_offsets(group, [tp1])
        assert await admin.list_group_offsets(group) == {tp0: 2}
        await admin.delete_groups([group])
        assert group not in {g.group_id for g in await admin.list_groups()}
        with pytest.raises(KafkaError) as gone:  # DescribeGroups v6; older versions: Dead
            await admin.describe_groups([group])
        assert gone.value.code.name == "group_id_not_found"
