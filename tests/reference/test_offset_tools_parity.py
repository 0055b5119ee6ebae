"""lockgate's offset tools against Apache Kafka's scripts (from the Kafka 4 jars) on one
lockgate broker: `get-offsets` against kafka-get-offsets.sh for every --time, and the plans of
`groups reset-offsets --export` against kafka-consumer-groups.sh --reset-offsets --export for
every spec (datetime, duration, shift, clamping, current, from-file), several groups; then
`delete-offsets` against --delete-offsets on a group with a member, and `delete-records`
against kafka-delete-records.sh."""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from lockgate.cli import main
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.reference_kafka import JAVA_OPTIONS

pytestmark = pytest.mark.compat

TOPIC = "offset-parity"  # 2 partitions × 6 records: 3 two days old, 3 an hour old
NOW_MS = int(time.time() * 1000)
OLD_MS = NOW_MS - 2 * 86_400_000
RECENT_MS = NOW_MS - 3_600_000
GROUPS = ("parity-a", "parity-b")
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
DOOMED = "delete-parity"  # 2 partitions of 3 records


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("offset-parity") / "data", {"group.initial.rebalance.delay.ms": "0"}
    ).start()
    try:
        create_topic(process.bootstrap, TOPIC, 2)
        producer = Producer({"bootstrap.servers": process.bootstrap})
        for partition in (0, 1):
            for i in range(6):
                when = OLD_MS + i if i < 3 else RECENT_MS + i
                producer.produce(TOPIC, value=b"v", partition=partition, timestamp=when)
        create_topic(process.bootstrap, DOOMED, 2)
        for partition in (0, 1):
            for _ in range(3):
                producer.produce(DOOMED, value=b"x", partition=partition)
        assert producer.flush(10) == 0
        for group, offset in zip(GROUPS, (4, 2), strict=True):
            consumer = Consumer({"bootstrap.servers": process.bootstrap, "group.id": group})
            consumer.commit(
                offsets=[TopicPartition(TOPIC, p, offset) for p in (0, 1)], asynchronous=False
            )
            consumer.close()
        yield process
    finally:
        process.kill()


def kafka(classpath: str, broker: BrokerProcess, tool: str, *args: str) -> str:
    done = subprocess.run(
        ["java", *JAVA_OPTIONS, "-cp", classpath, tool, "--bootstrap-server", broker.bootstrap,
         *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (args, done.stderr[:600])
    return done.stdout


def lockgate(broker: BrokerProcess, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*args, "--bootstrap-server", broker.bootstrap]) == 0
    return out.getvalue()


def csv(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.count(",") >= 2)


def test_get_offsets_as_kafka(classpath: str, broker: BrokerProcess) -> None:
    # latest and earliest: test_kafka_tools.py; here the ones with fine print, and the
    # tiered storage ones by Kafka 4.4's names (on a topic that is not tiered)
    times = ["-3", "-5", str(RECENT_MS), "earliest-local", "latest-tiered",
             "earliest-pending-upload", "-6"]  # fmt: skip
    for when in times:
        theirs = kafka(classpath, broker, GET_OFFSETS, "--topic", TOPIC, "--time", when)
        ours = lockgate(broker, "get-offsets", "--topic", TOPIC, "--time", when)
        assert ours.splitlines() == theirs.splitlines(), when


def test_reset_offsets_plans_as_kafka(
    classpath: str, broker: BrokerProcess, tmp_path: Path
) -> None:
    recent = datetime.datetime.fromtimestamp((RECENT_MS - 1_000) / 1000, datetime.UTC)
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{GROUPS[0]},{TOPIC},0,1\n{GROUPS[0]},{TOPIC},1,99\n{GROUPS[1]},{TOPIC},1,0\n")
    # every spec once, the scopes in turn (Kafka's tool takes ~2 s a run)
    specs = [
        (["--to-datetime", recent.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"], ["--all-topics"]),
        (["--by-duration", "P1D"], ["--topic", f"{TOPIC}:1"]),
        (["--shift-by", "-3"], ["--topic", TOPIC]),  # parity-b at 2: clamped to 0
        (["--to-offset", "100"], ["--all-topics"]),  # clamped to the end
        (["--to-current"], ["--topic", f"{TOPIC}:0"]),
    ]
    groups = ["--group", GROUPS[0], "--group", GROUPS[1]]
    for spec, scope in specs:
        args = ["--reset-offsets", *groups, *scope, *spec, "--dry-run", "--export"]
        theirs = csv(kafka(classpath, broker, CONSUMER_GROUPS, *args))
        ours = csv(lockgate(broker, "groups", "reset-offsets", *args[1:]))
        assert ours == theirs, (spec, scope)
        assert len(ours) == (2 if ":" in scope[-1] else 4)
    from_file = ["--from-file", str(plan), "--dry-run", "--export"]
    theirs = csv(kafka(classpath, broker, CONSUMER_GROUPS, "--reset-offsets", *groups, *from_file))
    assert csv(lockgate(broker, "groups", "reset-offsets", *groups, *from_file)) == theirs
    one = ["--group", GROUPS[0], "--topic", TOPIC, "--shift-by", "1", "--export", "--dry-run"]
    theirs = csv(kafka(classpath, broker, CONSUMER_GROUPS, "--reset-offsets", *one))
    assert csv(lockgate(broker, "groups", "reset-offsets", *one)) == theirs
    assert theirs == [f"{TOPIC},0,5", f"{TOPIC},1,5"]  # one group: no group column


def test_delete_offsets_as_kafka(classpath: str, broker: BrokerProcess) -> None:
    group = "parity-active"
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
        args = ["--group", group, "--topic", TOPIC]
        done = subprocess.run(
            ["java", *JAVA_OPTIONS, "-cp", classpath, CONSUMER_GROUPS, "--bootstrap-server",
             broker.bootstrap, "--delete-offsets", *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        theirs = [
            [word for word in line.split() if not word.startswith("org.apache.kafka.")]
            for line in done.stdout.splitlines()
            if line.startswith(TOPIC)
        ]  # Kafka's status names the Java exception's class before its message
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["groups", "delete-offsets", *args, "--bootstrap-server", broker.bootstrap])
        ours = [line.split() for line in out.getvalue().splitlines() if line.startswith(TOPIC)]
        assert code == 1 and ours == theirs and len(theirs) == 2
        assert "Encountered some partition-level error, see the follow-up details." in done.stdout
        assert (
            "Encountered some partition-level error, see the follow-up details." in err.getvalue()
        )
    finally:
        consumer.close()


def test_delete_records_as_kafka(classpath: str, broker: BrokerProcess, tmp_path: Path) -> None:
    spec = tmp_path / "offsets.json"
    spec.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": DOOMED, "partition": 0, "offset": 2},
                    {"topic": DOOMED, "partition": 1, "offset": -1},
                ],
                "version": 1,
            }
        )
    )
    # Kafka's tool first, then lockgate's with the same file: moving a log start to where it
    # already is answers the same low watermarks again
    theirs = kafka(classpath, broker, DELETE_RECORDS, "--offset-json-file", str(spec))
    ours = lockgate(broker, "delete-records", "--offset-json-file", str(spec))
    # Kafka lists the partitions in its map's order, lockgate sorted
    assert ours.splitlines()[:2] == theirs.splitlines()[:2]
    assert (
        sorted(ours.splitlines()[2:])
        == sorted(theirs.splitlines()[2:])
        == [
            f"partition: {DOOMED}-0\tlow_watermark: 2",
            f"partition: {DOOMED}-1\tlow_watermark: 3",
        ]
    )
