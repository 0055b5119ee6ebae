"""Coordinator snapshots through real clients: a group's committed offsets (confluent-kafka),
a transaction's committed offsets (KIP-447's sendOffsetsToTransaction) and a transactional id's
epoch survive a clean restart that replays nothing (the state comes from the snapshots), and a
kill -9 after further work, which replays only what came after the last snapshot."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from tests.support.broker import BrokerProcess, running_broker
from tests.support.clients import committed_offset, confluent_consumer, create_topic

pytestmark = pytest.mark.compat

SETTINGS = {
    "lockgate.coordinator.snapshot.interval.ms": "500",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data", SETTINGS) as process:
        yield process


def replayed(broker: BrokerProcess) -> list[tuple[int, int]]:
    """(snapshots, batches replayed) of each coordinator load in the broker's log so far."""
    found = re.findall(r"from (\d+) snapshots and (\d+) batches", broker.log())
    return [(int(s), int(b)) for s, b in found]


def wait_loaded(broker: BrokerProcess, loads: int) -> list[tuple[int, int]]:
    deadline = time.monotonic() + 30
    while len(replayed(broker)) < loads:
        assert time.monotonic() < deadline, "the coordinators did not load"
        time.sleep(0.1)
    return replayed(broker)[-2:]


def test_state_survives_restarts_that_replay_little(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "in", 1)
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": "plain"})
    consumer.commit(offsets=[TopicPartition("in", 0, 42)], asynchronous=False)
    consumer.close()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "snap-tx"})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("in", b"v", partition=0)
    group = confluent_consumer(broker.bootstrap, **{"group.id": "eos"})
    producer.send_offsets_to_transaction(
        [TopicPartition("in", 0, 7)], group.consumer_group_metadata(), 20
    )
    producer.commit_transaction(20)
    group.close()
    producer.flush(10)

    broker.restart()  # clean: snapshots at the stop, nothing to replay
    loads = wait_loaded(broker, 4)  # (a snapshot for each partition used, none for the others)
    assert all(snapshots >= 1 and batches == 0 for snapshots, batches in loads), loads
    assert committed_offset(broker.bootstrap, "plain", "in", 0) == 42
    assert committed_offset(broker.bootstrap, "eos", "in", 0) == 7

    # the id's epoch came back: a new producer with the same id fences the old one
    producer.begin_transaction()
    producer.produce("in", b"w", partition=0)
    again = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "snap-tx"})
    again.init_transactions(20)
    with pytest.raises(Exception, match=r"(?i)fenc"):
        producer.commit_transaction(20)

    consumer = confluent_consumer(broker.bootstrap, **{"group.id": "plain"})
    consumer.commit(offsets=[TopicPartition("in", 0, 43)], asynchronous=False)
    consumer.close()
    time.sleep(1.5)  # a periodic snapshot takes the commit
    consumer = confluent_consumer(broker.bootstrap, **{"group.id": "plain"})
    consumer.commit(offsets=[TopicPartition("in", 0, 44)], asynchronous=False)
    consumer.close()
    broker.restart(clean=False)  # kill -9: the last commit comes from the log after it
    loads = wait_loaded(broker, 6)
    assert all(batches < 10 for _snapshots, batches in loads)
    assert committed_offset(broker.bootstrap, "plain", "in", 0) == 44
    assert committed_offset(broker.bootstrap, "eos", "in", 0) == 7
