"""console/producers.py: the producer state of every partition of a topic, or of one, with an
idempotent producer and an open transaction; an unknown topic raises."""

from __future__ import annotations

import pytest

from lockgate.client.admin import Admin
from lockgate.client.errors import KafkaError
from lockgate.client.producer import Producer
from lockgate.console import producers
from tests.unit.console.in_process_broker import bootstrap, running_broker

TOPIC = "console-producers"


async def test_producers_per_partition() -> None:
    async with running_broker() as broker, Admin(bootstrap(broker)) as admin:
        await admin.create_topic(TOPIC, 3)
        async with Producer(bootstrap(broker), linger_ms=0) as idempotent:
            for _ in range(3):
                await idempotent.send(TOPIC, b"v", partition=0)
            await idempotent.flush()
            idempotent_id = idempotent.identity.producer_id  # type: ignore[union-attr]
        async with Producer(bootstrap(broker), transactional_id="p-txn") as transactional:
            await transactional.init_transactions()
            transactional.begin_transaction()
            await transactional.send(TOPIC, b"open", partition=1)
            await transactional.flush()

            view = await producers.describe_producers(admin, TOPIC)
            assert [p.topic_partition.partition for p in view.partitions] == [0, 1, 2]
            (first,) = view.partitions[0].producers
            assert (first.producer_id, first.last_sequence) == (idempotent_id, 2)
            assert first.current_txn_start_offset is None
            (open_one,) = view.partitions[1].producers
            assert open_one.current_txn_start_offset == 0
            assert view.partitions[2].producers == ()
            assert (view.producer_count, view.open_transactions) == (2, 1)

            one = await producers.describe_producers(admin, TOPIC, 1)
            assert [p.topic_partition.partition for p in one.partitions] == [1]
            await transactional.abort_transaction()

        with pytest.raises(KafkaError) as unknown:
            await producers.describe_producers(admin, "no-such-topic")
        assert unknown.value.code.name == "unknown_topic_or_partition"
        with pytest.raises(KafkaError):
            await producers.describe_producers(admin, TOPIC, 7)
