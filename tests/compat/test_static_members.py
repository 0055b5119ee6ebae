"""Static members (KIP-345) and session timers through confluent-kafka (librdkafka).

- A static member whose process restarts (librdkafka sends no LeaveGroup for static members)
  rejoins with an empty member id and gets its partitions back; the other member keeps
  consuming: no revoke or assign callback, no new generation.
- A static member that never comes back is expired at its session timeout: the broker logs
  how late after the deadline that happened (reported, bounded generously here).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

pytestmark = pytest.mark.compat

TIMEOUT = 30.0
SESSION_MS = 6000
SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("static") / "data", SETTINGS).start()
    try:
        yield process
    finally:
        process.kill()


class StaticConsumer:
    """A confluent-kafka group member with a group.instance.id, recording its callbacks."""

    def __init__(self, broker: BrokerProcess, group: str, instance: str, topic: str) -> None:
        self.events: list[tuple[str, list[int]]] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "group.instance.id": instance,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.events.append(("assign", sorted(p.partition for p in partitions)))

    def _revoked(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        self.events.append(("revoke", sorted(p.partition for p in partitions)))

    @property
    def assignment(self) -> list[int]:
        return sorted(p.partition for p in self.consumer.assignment())


def poll_until(condition: Any, *members: StaticConsumer) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, [m.events for m in members]
        for member in members:
            member.consumer.poll(0.1)


def test_a_restarted_static_member_gets_its_partitions_back_alone(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "static-orders", 4)
    first = StaticConsumer(broker, "static-group", "instance-1", "static-orders")
    second = StaticConsumer(broker, "static-group", "instance-2", "static-orders")
    # settled once both are members: with no initial rebalance delay the first one may be
    # given all four partitions in a generation of its own before the second one joins
    poll_until(
        lambda: (
            len(first.assignment) + len(second.assignment) == 4
            and bool(first.assignment)
            and bool(second.assignment)
        ),
        first,
        second,
    )
    before = first.assignment
    settled = list(second.events)
    first.consumer.close()  # a static member's close sends no LeaveGroup: like a crash
    restarted = StaticConsumer(broker, "static-group", "instance-1", "static-orders")
    poll_until(lambda: bool(restarted.assignment), restarted, second)
    deadline = time.monotonic() + 2  # give any rebalance of the others time to show
    while time.monotonic() < deadline:
        for member in (restarted, second):
            member.consumer.poll(0.1)
    try:
        assert restarted.assignment == before
        assert second.events == settled  # no revoke, no assign: not rebalanced
        assert restarted.events == [("assign", before)]
    finally:
        restarted.consumer.close()
        second.consumer.close()


def test_an_abandoned_static_member_expires_at_its_session_timeout(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "static-expiry", 2)
    member = StaticConsumer(broker, "expiry-group", "instance-x", "static-expiry")
    poll_until(lambda: bool(member.assignment), member)
    member.consumer.close()  # no LeaveGroup: only the session timeout removes it
    pattern = re.compile(r"group expiry-group: session of \S+ expired \((-?\d+) ms after")
    deadline = time.monotonic() + SESSION_MS / 1000 + TIMEOUT
    found = None
    while found is None and time.monotonic() < deadline:
        found = pattern.search(broker.log())
        time.sleep(0.1)
    assert found is not None, broker.log()[-2000:]
    late_ms = int(found.group(1))
    # the timer fires at the deadline; the bound leaves room for a loaded shared machine
    assert -5 <= late_ms < 250, late_ms
    print(f"session expiry {late_ms} ms after the deadline")
