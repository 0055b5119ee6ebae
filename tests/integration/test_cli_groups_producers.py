"""`lockgate producers describe` and `lockgate groups ...` as subprocesses against a broker,
with confluent-kafka as the producer and the group member."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from lockgate.client.admin_groups import decode_assignment
from lockgate.client.cluster import TopicPartition
from lockgate.tools.table import render
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic

TOPIC = "cli-groups"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("cli-groups") / "data"
    process = BrokerProcess(data, {"group.initial.rebalance.delay.ms": "0"}).start()
    create_topic(process.bootstrap, TOPIC, 2)
    producer = Producer({"bootstrap.servers": process.bootstrap, "enable.idempotence": True})
    for i in range(40):
        producer.produce(TOPIC, key=str(i).encode(), value=b"v", partition=i % 2)
    assert producer.flush(30) == 0
    try:
        yield process
    finally:
        process.kill()


def lockgate(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lockgate.cli", *args, "--bootstrap-server", broker.bootstrap]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def consume_and_commit(broker: BrokerProcess, group: str, count: int) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            seen += 1
    assert seen == count
    consumer.commit(asynchronous=False)
    return consumer


def test_producers_describe_shows_the_idempotent_producer(broker: BrokerProcess) -> None:
    result = lockgate(broker, "producers", "describe", "--topic", TOPIC)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["Partition", "ProducerId", "ProducerEpoch"]
    rows = [line.split() for line in lines[1:]]
    assert sorted(row[0] for row in rows) == ["0", "1"]
    assert {row[4] for row in rows} == {"19"}  # 20 records per partition: last sequence 19
    one = lockgate(broker, "producers", "describe", "--topic", TOPIC, "--partition", "1")
    assert [line.split()[0] for line in one.stdout.splitlines()[1:]] == ["1"]
    missing = lockgate(broker, "producers", "describe", "--topic", "no-such-topic")
    assert missing.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_groups_list_describe_reset_and_delete(broker: BrokerProcess) -> None:
    group = "cli-group"
    consumer = consume_and_commit(broker, group, 30)
    try:
        listed = lockgate(broker, "groups", "list")
        assert any(line.split()[:2] == [group, "Stable"] for line in listed.stdout.splitlines())
        described = lockgate(broker, "groups", "describe", "--group", group)
        assert described.returncode == 0, described.stderr
        assert f"{TOPIC}-0, {TOPIC}-1" in described.stdout
        offsets = {
            line.split()[1]: line.split()[2:5]
            for line in described.stdout.splitlines()
            if line.startswith(TOPIC)
        }
        committed = sum(int(current) for current, _end, _lag in offsets.values())
        lag = sum(int(lag) for _current, _end, lag in offsets.values())
        assert committed == 30 and lag == 10
        refused = lockgate(
            broker,
            "groups",
            "reset-offsets",
            "--group",
            group,
            "--topic",
            TOPIC,
            "--to-earliest",
            "--execute",
        )
        assert refused.returncode == 1 and "stop its consumers" in refused.stderr
        busy = lockgate(broker, "groups", "delete", "--group", group)
        assert busy.returncode == 1 and "NON_EMPTY_GROUP" in busy.stderr
    finally:
        consumer.close()
    plan = lockgate(
        broker, "groups", "reset-offsets", "--group", group, "--topic", TOPIC, "--to-offset", "3"
    )
    assert "dry run" in plan.stdout
    assert "CURRENT-OFFSET" in lockgate(broker, "groups", "describe", "--group", group).stdout
    applied = lockgate(
        broker,
        "groups",
        "reset-offsets",
        "--group",
        group,
        "--topic",
        TOPIC,
        "--to-offset",
        "3",
        "--execute",
    )
    assert applied.returncode == 0, applied.stderr
    after = lockgate(broker, "groups", "describe", "--group", group).stdout
    assert [line.split()[2] for line in after.splitlines() if line.startswith(TOPIC)] == ["3", "3"]
    deleted = lockgate(broker, "groups", "delete", "--group", group)
    assert deleted.returncode == 0, deleted.stderr
    assert group not in lockgate(broker, "groups", "list").stdout
    gone = lockgate(broker, "groups", "describe", "--group", group)
    assert gone.returncode == 1 and "GROUP_ID_NOT_FOUND" in gone.stderr


def test_decode_assignment_and_render(tmp_path: Path) -> None:
    topic = b"orders"
    data = (
        b"\x00\x00" + b"\x00\x00\x00\x01" + len(topic).to_bytes(2, "big") + topic
        + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x03" + b"\x00\x00\x00\x00"
    )  # fmt: skip
    assert decode_assignment(data) == (TopicPartition("orders", 0), TopicPartition("orders", 3))
    assert decode_assignment(b"") == ()
    assert render(["A", "BB"], [["xyz", "1"]]) == "A    BB\nxyz  1"
