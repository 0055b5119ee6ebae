"""confluent-kafka's ShareConsumer (librdkafka's share consumer, preview) against a broker
serving share groups: two members of one group read a topic of two partitions, acknowledging
explicitly (accept; release once, handed out again with delivery count 2; reject, never
again), held to tests/support/confluent_share.check. Runs against Apache Kafka 4.4 and, once it
serves share groups, against lockgate."""

from __future__ import annotations

import asyncio

import pytest

from lockgate.client.admin import Admin, NewTopic, ResourceType
from tests.support import confluent_share

pytestmark = pytest.mark.compat

BROKERS = ["kafka", "lockgate"]
RECORDS, PARTITIONS, CONSUMERS = 120, 2, 2


async def _prepare(bootstrap: str, topic: str, group: str) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        await admin.alter_configs(
            group,
            set_configs={"share.auto.offset.reset": "earliest"},
            resource_type=ResourceType.GROUP,
        )


@pytest.mark.parametrize("share_broker", BROKERS, indirect=True)
def test_share_consumers_answer_every_record_once(share_broker: str) -> None:
    topic, group = confluent_share.names()
    asyncio.run(_prepare(share_broker, topic, group))
    confluent_share.produce(share_broker, topic, RECORDS, PARTITIONS)
    tally = confluent_share.consume(share_broker, group, topic, RECORDS, CONSUMERS)
    confluent_share.check(tally, RECORDS, CONSUMERS)
