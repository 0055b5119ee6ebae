# The client against an in-process lockgate broker on 127.0.0.1: admin operations and their
# named errors, producer → consumer with every codec, keys, headers, acks and offsets.
from __future__ import annotations

import asyncio

import pytest

from lockgate.client import Admin, Consumer, Producer, TopicPartition, errors
from lockgate.client.admin import ConfigSource, NewTopic, ResourceType
from lockgate.client.partitioner import partition_for_key
from lockgate.client.sender import BATCH_RECORDS
from lockgate.protocol.records import COMPRESSION_CODECS
from lockgate.server.broker import Broker


def bootstrap(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


async def test_admin_topic_lifecycle(memory_broker: Broker) -> None:
    async with Admin(bootstrap(memory_broker), request_timeout_ms=10_000) as admin:
        ids = await admin.create_topics([NewTopic("orders", 3, 1, {"retention.ms": "3600000"})])
        assert ids["orders"] is not None
        await admin.create_topic("audit", 1)
        assert await admin.list_topics() == ["audit", "orders"]
        assert "__consumer_offsets" in await admin.list_topics(include_internal=True)

        (orders,) = await admin.describe_topics(["orders"])
        assert orders.topic_id == ids["orders"]
        assert [p.partition for p in orders.partitions] == [0, 1, 2]
        assert orders.replication_factor == 1
        assert all(p.leader_id >= 0 and p.leader_epoch >= 0 for p in orders.partitions)

        configs = await admin.describe_configs("orders")
        assert configs["retention.ms"].value == "3600000"
        assert configs["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
        await admin.alter_configs(
            "orders", set_configs={"retention.bytes": "1000000"}, delete_configs=["retention.ms"]
        )
        configs = await admin.describe_configs("orders")
        assert configs["retention.bytes"].value == "1000000"
        assert configs["retention.ms"].source is not ConfigSource.DYNAMIC_TOPIC_CONFIG

        await admin.create_partitions({"orders": 5})
        (orders,) = await admin.describe_topics(["orders"])
        assert len(orders.partitions) == 5

        await admin.delete_topics(["audit"])
        assert await admin.list_topics() == ["orders"]


async def test_admin_errors_are_named(memory_broker: Broker) -> None:
    async with Admin(bootstrap(memory_broker), request_timeout_ms=10_000) as admin:
        await admin.create_topic("t", 2)
        with pytest.raises(errors.InvalidPartitionsError):
            await admin.create_partitions({"t": 1})
        with pytest.raises(errors.InvalidConfigError):
            await admin.alter_configs("t", set_configs={"retention.ms": "soon"})
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await admin.describe_topics(["missing"])
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await admin.delete_topics(["missing"])
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await admin.describe_configs("missing")


async def test_admin_group_configs(memory_broker: Broker) -> None:
    async with Admin(bootstrap(memory_broker), request_timeout_ms=10_000) as admin:
        group = ResourceType.GROUP
        await admin.alter_configs(
            "queue", set_configs={"share.auto.offset.reset": "earliest"}, resource_type=group
        )
        configs = await admin.describe_configs("queue", group, include_synonyms=True)
        reset = configs["share.auto.offset.reset"]
        assert (reset.value, reset.source) == ("earliest", ConfigSource.GROUP_CONFIG)
        assert [source for _, _, source in reset.synonyms] == [
            ConfigSource.GROUP_CONFIG,
            ConfigSource.DEFAULT_CONFIG,
        ]
        assert configs["share.isolation.level"].is_default
        with pytest.raises(errors.InvalidConfigError):
            await admin.alter_configs(
                "queue", set_configs={"share.delivery.count.limit": "50"}, resource_type=group
            )


@pytest.mark.parametrize("compression", sorted(COMPRESSION_CODECS))
async def test_produce_then_consume(memory_broker: Broker, compression: str) -> None:
    async with Admin(bootstrap(memory_broker)) as admin:
        await admin.create_topic("events", 4)
    keys = [f"user-{i % 9}".encode() for i in range(60)]
    async with Producer(
        bootstrap(memory_broker), compression=compression, linger_ms=20
    ) as producer:
        futures = [
            await producer.send("events", f"v{i}".encode(), key, headers=[("n", str(i).encode())])
            for i, key in enumerate(keys)
        ]
        await producer.flush()
        sent = [f.result() for f in futures]
    for key, metadata in zip(keys, sent, strict=True):
        assert metadata.partition == partition_for_key(key, 4)
    for partition in range(4):
        offsets = [m.offset for m in sent if m.partition == partition]
        assert offsets == list(range(len(offsets)))

    async with Consumer(bootstrap(memory_broker), auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("events", p) for p in range(4)])
        received = [m async for m in consumer.messages(max_messages=60, idle_timeout_ms=5_000)]
    assert sorted((m.partition, m.offset) for m in received) == sorted(
        (m.partition, m.offset) for m in sent
    )
    by_value = {m.value: m for m in received}
    for i, key in enumerate(keys):
        message = by_value[f"v{i}".encode()]
        assert message.key == key
        assert message.headers == (("n", str(i).encode()),)
        assert message.partition == sent[i].partition and message.offset == sent[i].offset


async def test_keyless_records_spread_round_robin(memory_broker: Broker) -> None:
    async with Admin(bootstrap(memory_broker)) as admin:
        await admin.create_topic("spread", 3)
    async with Producer(bootstrap(memory_broker)) as producer:
        sent = [await producer.send_and_wait("spread", b"x") for _ in range(6)]
    assert [m.partition for m in sent] == [0, 1, 2, 0, 1, 2]


async def test_batches_go_and_come_back_while_the_caller_keeps_queueing(
    memory_broker: Broker,
) -> None:
    """A caller queueing in a loop of its own (no await but send()'s) still has its records
    delivered meanwhile: a batch full in records goes at once, whatever its linger, and send()
    yields often enough for the answers to be read and the next batch written."""
    async with Producer(bootstrap(memory_broker), linger_ms=60_000) as producer:
        await producer.send("t", b"first", partition=0)
        await producer.flush()  # the topic known; from here on only full batches go
        futures = [
            await producer.send("t", b"x" * 100, partition=0) for _ in range(8 * BATCH_RECORDS)
        ]
        assert futures[0].done() and futures[BATCH_RECORDS - 1].done()
        assert not futures[-1].done()
        await producer.flush()
        offsets = [future.result().offset for future in futures]
        assert offsets == list(range(1, 1 + 8 * BATCH_RECORDS))


async def test_acks_zero_gives_no_offsets_but_delivers(memory_broker: Broker) -> None:
    async with Admin(bootstrap(memory_broker)) as admin:
        await admin.create_topic("fire", 1)
    async with Producer(bootstrap(memory_broker), acks=0) as producer:
        sent = [await producer.send_and_wait("fire", f"{i}".encode()) for i in range(5)]
    assert {m.offset for m in sent} == {-1}
    async with Consumer(bootstrap(memory_broker), auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("fire", 0)])
        received = [m async for m in consumer.messages(max_messages=5, idle_timeout_ms=5_000)]
    assert [m.value for m in received] == [b"0", b"1", b"2", b"3", b"4"]


async def test_producer_errors(memory_broker: Broker) -> None:
    async with Admin(bootstrap(memory_broker)) as admin:
        await admin.create_topic("small", 1, configs={"max.message.bytes": "2000"})
    async with Producer(bootstrap(memory_broker), allow_auto_topic_creation=False) as producer:
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await producer.send("small", b"x", partition=1)
        with pytest.raises(errors.UnknownTopicOrPartitionError):
            await producer.send("no-such-topic", b"x")
        too_big_for_the_topic = await producer.send("small", b"y" * 5_000)
        with pytest.raises(errors.MessageTooLargeError):  # the broker's answer, not retried
            await too_big_for_the_topic
        with pytest.raises(errors.MessageTooLargeError):
            await producer.send("small", b"z" * 2_000_000)  # beyond max_request_size: at once


async def test_consumer_positions(memory_broker: Broker) -> None:
    async with Admin(bootstrap(memory_broker)) as admin:
        await admin.create_topic("log", 1)
    tp = TopicPartition("log", 0)
    async with Producer(bootstrap(memory_broker)) as producer:
        for i in range(10):
            await producer.send("log", f"{i}".encode())
        await producer.flush()
    async with Consumer(bootstrap(memory_broker)) as consumer:
        consumer.assign([tp])
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 10}
        assert await consumer.position(tp) == 10  # auto_offset_reset latest
        assert await consumer.poll(100) == []

        consumer.seek(tp, 7)
        received = [m async for m in consumer.messages(max_messages=3, idle_timeout_ms=5_000)]
        assert [m.value for m in received] == [b"7", b"8", b"9"]
        assert await consumer.position(tp) == 10

        await consumer.seek_to_beginning()
        assert await consumer.position(tp) == 0

        consumer.seek(tp, 1_000)  # out of range: reset to latest
        assert await consumer.poll(100) == []
        assert await consumer.position(tp) == 10


async def test_consumer_out_of_range_without_reset_raises(memory_broker: Broker) -> None:
    async with Admin(bootstrap(memory_broker)) as admin:
        await admin.create_topic("strict", 1)
    tp = TopicPartition("strict", 0)
    async with Consumer(bootstrap(memory_broker), auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        with pytest.raises(errors.OffsetOutOfRangeError):
            await consumer.poll(100)
        consumer.seek(tp, 50)
        with pytest.raises(errors.OffsetOutOfRangeError):
            await consumer.poll(100)


async def test_waiting_consumer_sees_new_records(memory_broker: Broker) -> None:
    async with Admin(bootstrap(memory_broker)) as admin:
        await admin.create_topic("live", 1)
    async with Consumer(bootstrap(memory_broker), fetch_max_wait_ms=2_000) as consumer:
        consumer.assign([TopicPartition("live", 0)])
        await consumer.seek_to_end()
        waiting = asyncio.create_task(consumer.poll(2_000))
        await asyncio.sleep(0.1)
        async with Producer(bootstrap(memory_broker)) as producer:
            await producer.send_and_wait("live", b"hello")
        messages = await asyncio.wait_for(waiting, 10)
        if not messages:  # the broker may answer the long poll at the first append only later
            messages = await consumer.poll(2_000)
    assert [m.value for m in messages] == [b"hello"]
