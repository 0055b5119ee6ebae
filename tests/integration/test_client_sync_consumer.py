"""The blocking consumer facade, shaped like confluent-kafka's: a group member that polls,
commits and closes, with rebalance callbacks."""

from __future__ import annotations

from lockgate.client.cluster import TopicPartition
from lockgate.client.sync import Producer
from lockgate.client.sync_consumer import Consumer
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic


def test_subscribe_poll_commit_close(broker_process: BrokerProcess) -> None:
    create_topic(broker_process.bootstrap, "sync-in", 2)
    with Producer({"bootstrap.servers": broker_process.bootstrap}) as producer:
        for i in range(10):
            producer.produce("sync-in", f"v{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
    config = {
        "bootstrap.servers": broker_process.bootstrap,
        "group.id": "sync-group",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "false",
    }
    assigned: list[TopicPartition] = []
    with Consumer(config) as consumer:
        consumer.subscribe(["sync-in"], on_assign=lambda c, tps: assigned.extend(tps))
        seen = []
        for _ in range(100):
            message = consumer.poll(0.5)
            if message is not None:
                seen.append(message.value or b"")
            if len(seen) == 10:
                break
        assert sorted(seen) == sorted(f"v{i}".encode() for i in range(10))
        assert sorted(assigned) == [TopicPartition("sync-in", 0), TopicPartition("sync-in", 1)]
        consumer.commit()
        assert consumer.consumer_group_metadata().group_id == "sync-group"
    with Consumer(config) as again:
        committed = again.committed([TopicPartition("sync-in", p) for p in range(2)])
        assert {tp.partition: o.offset for tp, o in committed.items() if o} == {0: 5, 1: 5}
