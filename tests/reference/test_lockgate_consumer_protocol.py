"""lockgate's consumer with group_protocol="consumer" (KIP-848) against Apache Kafka 4.4, the
reference implementation of the protocol: two members split four partitions (each owned once)
after one hands two over, commits under the member epoch are read back, and Kafka's
ConsumerGroupDescribe shows the group as lockgate's admin decodes it."""

from __future__ import annotations

import asyncio
import time

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from tests.support.clients import create_topic
from tests.support.reference_kafka import ReferenceKafka

TOPIC = "lockgate-kip848"


async def test_lockgate_consumers_share_a_consumer_protocol_group(
    reference_kafka: ReferenceKafka,
) -> None:
    bootstrap = reference_kafka.bootstrap
    create_topic(bootstrap, TOPIC, 4)
    async with Producer(bootstrap, linger_ms=0) as producer:
        for i in range(8):
            await producer.send(TOPIC, f"{i}".encode(), partition=i % 4)
    options: dict[str, object] = {
        "group_id": "lockgate-kip848",
        "group_protocol": "consumer",
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
    }
    first = Consumer(bootstrap, **options)  # type: ignore[arg-type]
    second = Consumer(bootstrap, **options)  # type: ignore[arg-type]
    async with first, second:
        first.subscribe([TOPIC])
        read = 0
        deadline = time.monotonic() + 30
        while read < 8 and time.monotonic() < deadline:
            read += len(await first.poll(100))
        assert read == 8 and len(first.assignment()) == 4
        await first.commit()
        second.subscribe([TOPIC])
        # Kafka's heartbeat interval is 5 s: the hand-over takes one or two of them
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            await asyncio.gather(first.poll(100), second.poll(100))
            owned = first.assignment() + second.assignment()
            if len(first.assignment()) == 2 and len(second.assignment()) == 2:
                break
        assert sorted(owned) == [TopicPartition(TOPIC, p) for p in range(4)]
        committed = await second.committed([TopicPartition(TOPIC, p) for p in range(4)])
        assert {tp.partition: o.offset for tp, o in committed.items() if o} == dict.fromkeys(
            range(4), 2
        )
        async with Admin(bootstrap) as admin:
            group = (await admin.describe_groups(["lockgate-kip848"]))["lockgate-kip848"]
        assert (group.group_type, group.protocol, group.state) == ("consumer", "uniform", "Stable")
        assert sorted(tp for m in group.members for tp in m.assignment) == sorted(owned)
