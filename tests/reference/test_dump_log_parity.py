"""`lockgate dump-log` against Apache Kafka's own DumpLogSegments (kafka-dump-log.sh, from the
Kafka 4 jars) on the same files: a lockgate broker's segments written by confluent-kafka
(transactions committed and aborted, gzip, headers, a null key, a consumer group), its
__transaction_state and __consumer_offsets decoded, and its time index. Batch and record lines
must be Kafka's (lockgate's line may only add fields at the end); the decoders must agree on
every field Kafka knows."""

from __future__ import annotations

import contextlib
import glob
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

TOPIC = "dump-parity"
GROUP = "dump-parity-group"
KAFKA_DUMP = "org.apache.kafka.tools.DumpLogSegments"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    data = tmp_path_factory.mktemp("dump-parity") / "data"
    broker = BrokerProcess(data, {"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        create_topic(broker.bootstrap, TOPIC, 1)
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "transactional.id": "dump-parity-tx",
                "compression.type": "gzip",
                "linger.ms": 50,
            }
        )
        producer.init_transactions(10)
        for commit in (True, False):
            producer.begin_transaction()
            for i in range(3):
                producer.produce(
                    TOPIC, key=None if i == 1 else b"k%d" % i, value=b"v%d" % i,
                    headers=[("trace", b"t"), ("span", None)],
                )  # fmt: skip
            assert producer.flush(10) == 0
            (producer.commit_transaction if commit else producer.abort_transaction)(10)
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": GROUP,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 30
            while not consumer.assignment() and time.monotonic() < deadline:
                consumer.poll(0.2)
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, 4)], asynchronous=False)
        finally:
            consumer.close()
        yield data
    finally:
        broker.kill()


def kafka_dump(classpath: str, *args: str) -> list[str]:
    done = subprocess.run(
        ["java", *JAVA_OPTIONS, "-cp", classpath, KAFKA_DUMP, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if not line.startswith("SLF4J")]


def lockgate_dump(*args: str) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["dump-log", *args]) == 0
    return out.getvalue().splitlines()


def non_empty(pattern: str) -> list[str]:
    return sorted(path for path in glob.glob(pattern) if Path(path).stat().st_size)


def without_additions(line: str) -> str:
    return line.split(" baseTimestamp: ", 1)[0]


def test_segment_lines_are_kafkas(classpath: str, data_dir: Path) -> None:
    segment = str(data_dir / f"{TOPIC}-0" / "00000000000000000000.log")
    options = ("--files", segment, "--deep-iteration", "--print-data-log")
    theirs, ours = kafka_dump(classpath, *options), lockgate_dump(*options)
    assert [without_additions(line) for line in ours] == theirs
    assert any("compresscodec: gzip" in line for line in theirs)
    assert [line.split("endTxnMarker: ")[1] for line in theirs if "endTxnMarker" in line] == [
        "COMMIT coordinatorEpoch: 0",
        "ABORT coordinatorEpoch: 0",
    ]
    index = segment.replace(".log", ".timeindex")
    assert lockgate_dump("--files", index) == kafka_dump(classpath, "--files", index)


def decoded(lines: list[str]) -> list[tuple[object, object]]:
    """(key, payload) of each record line of a decoder's text output."""
    pairs = []
    for line in lines:
        if line.startswith("| ") and " key: " in line:
            key, _sep, payload = line.split(" key: ", 1)[1].partition(" payload: ")
            pairs.append(
                (json.loads(key), payload if payload == "<DELETE>" else json.loads(payload))
            )
    return pairs


def agrees(ours: object, theirs: object) -> bool:
    """Ours carries every field of theirs with the same value (ours may have more: tags)."""
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and all(agrees(ours.get(k), v) for k, v in theirs.items())
    if isinstance(theirs, list):
        return (
            isinstance(ours, list)
            and len(ours) == len(theirs)
            and all(agrees(a, b) for a, b in zip(ours, theirs, strict=True))
        )
    return ours == theirs


def test_transaction_log_decoder_agrees(classpath: str, data_dir: Path) -> None:
    files = ",".join(non_empty(str(data_dir / "__transaction_state-*" / "*.log")))
    theirs = decoded(kafka_dump(classpath, "--files", files, "--transaction-log-decoder"))
    ours = decoded(lockgate_dump("--files", files, "--transaction-log-decoder"))
    assert len(ours) == len(theirs) >= 6  # Empty, Ongoing, PrepareCommit, CompleteCommit, ...
    for (our_key, our_value), (their_key, their_value) in zip(ours, theirs, strict=True):
        assert our_key == their_key
        assert agrees(our_value, their_value), (our_value, their_value)
    states = [value["data"]["transactionStatus"] for _key, value in theirs]  # type: ignore[index]
    assert {"CompleteCommit", "CompleteAbort"} <= set(states)


def test_offsets_decoder_agrees(classpath: str, data_dir: Path) -> None:
    files = ",".join(non_empty(str(data_dir / "__consumer_offsets-*" / "*.log")))
    theirs = decoded(kafka_dump(classpath, "--files", files, "--offsets-decoder"))
    ours = decoded(lockgate_dump("--files", files, "--offsets-decoder"))
    assert len(ours) == len(theirs) >= 2  # the group's metadata and its commit
    for (our_key, our_value), (their_key, their_value) in zip(ours, theirs, strict=True):
        assert our_key == their_key
        assert agrees(our_value, their_value), (our_value, their_value)
    members = [
        member
        for _key, value in theirs
        if isinstance(value, dict)
        for member in value["data"].get("members", [])
    ]
    assert any(member["assignment"] for member in members)  # the members were compared too
