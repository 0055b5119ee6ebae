"""Kafka Streams (4.4) with processing.guarantee=exactly_once_v2 against lockgate: a stateless
topology (mapValues) and a stateful one (groupByKey().count(), a RocksDB store whose
changelog topic is compacted), the Streams process SIGKILLed mid-run and started again: every
input appears exactly once in the stateless output, and the counts' last values (read
committed) are exactly the number of inputs per key."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition

from tests.support.broker import running_broker
from tests.support.clients import confluent_consumer, create_topic
from tests.support.java_programs import java_program
from tests.support.reference_kafka import ReferenceKafka

pytestmark = pytest.mark.compat

PROGRAM = Path(__file__).parent / "java" / "StreamsApp.java"
RECORDS = 3000
KEYS = 10


def start_app(
    kafka: ReferenceKafka, bootstrap: str, state: Path, log: Path
) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*java_program(PROGRAM, kafka.classpath, "-Xmx512m"), bootstrap, str(state)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def read_committed(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    consumer = confluent_consumer(bootstrap, **{"isolation.level": "read_committed"})
    partition = TopicPartition(topic, 0, 0)
    consumer.assign([partition])
    _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    found: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 30
    idle = 0
    while time.monotonic() < deadline and idle < 6:
        message = consumer.poll(0.5)
        if message is None:
            idle += 1
            continue
        if message.error() is None:
            idle = 0
            found.append((message.key(), message.value()))
    consumer.close()
    assert high >= 0
    return found


def test_exactly_once_v2_across_a_sigkill(reference_kafka: ReferenceKafka, tmp_path: Path) -> None:
    with running_broker(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"}) as broker:
        for topic in ("streams-in", "streams-upper", "streams-counts"):
            create_topic(broker.bootstrap, topic, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        for n in range(RECORDS):
            producer.produce("streams-in", b"value-%d" % n, key=b"key-%d" % (n % KEYS), partition=0)
            producer.poll(0)
        assert producer.flush(30) == 0
        state, log = tmp_path / "state", tmp_path / "streams.log"
        app = start_app(reference_kafka, broker.bootstrap, state, log)
        try:
            deadline = time.monotonic() + 120
            while len(read_committed(broker.bootstrap, "streams-upper")) < RECORDS // 3:
                assert app.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
            os.kill(app.pid, signal.SIGKILL)
            app.wait(30)
            app = start_app(reference_kafka, broker.bootstrap, state, log)
            deadline = time.monotonic() + 180
            while len(read_committed(broker.bootstrap, "streams-upper")) < RECORDS:
                assert app.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(1)
            upper = read_committed(broker.bootstrap, "streams-upper")
            counts: dict[bytes | None, int] = {}
            for key, value in read_committed(broker.bootstrap, "streams-counts"):
                assert value is not None
                counts[key] = struct.unpack(">q", value)[0]
        finally:
            app.send_signal(signal.SIGTERM)
            try:
                app.wait(30)
            except subprocess.TimeoutExpired:
                app.kill()
        assert sorted(v for _, v in upper if v) == sorted(b"VALUE-%d" % n for n in range(RECORDS))
        assert counts == {b"key-%d" % k: RECORDS // KEYS for k in range(KEYS)}
