"""offsets.retention (KIP-211) through confluent-kafka: a group's committed offsets outlive its
members only for the retention, and stay expired after a broker restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition

from tests.support.broker import BrokerProcess, running_broker
from tests.support.clients import committed_offset, create_topic

pytestmark = pytest.mark.compat

SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.retention.ms": "1500",
    "offsets.retention.check.interval.ms": "200",
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "data", SETTINGS) as process:
        yield process


def test_offsets_of_an_empty_group_expire_and_stay_expired(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "retained", 1)
    member = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "fading", "session.timeout.ms": 6000}
    )
    member.subscribe(["retained"])
    deadline = time.monotonic() + 30
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.1)
    member.commit(offsets=[TopicPartition("retained", 0, 42)], asynchronous=False)

    def committed() -> int:
        return committed_offset(broker.bootstrap, "fading", "retained")

    assert committed() == 42  # kept while the group has a member
    member.close()  # leaves: the group is Empty from now on
    deadline = time.monotonic() + 20
    while committed() == 42 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert committed() == OFFSET_INVALID
    broker.stop()
    broker.start()
    assert committed() == OFFSET_INVALID
    assert "offsets expired (offsets.retention.ms); group removed" in broker.log()
