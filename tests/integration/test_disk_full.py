"""A broker whose data directory fills up, end to end through real clients.

On a ~20 MiB tmpfs mounted by the test (skipped where mounting is not permitted) a filler file
leaves little room; producers (confluent-kafka idempotent with acks=all, kafka-python with
acks=all) fill the rest. Rules checked:
- a produce that hits ENOSPC is answered KAFKA_STORAGE_ERROR (or, for librdkafka's idempotent
  producer that retries it, a timeout after the broker answered it); the connection stays up;
- reads keep working while the disk is full;
- a broker restarted on the full disk starts, serves reads and refuses produce;
- once the filler is deleted, producing simply resumes (no restart);
- after a restart, a consumer reads back every acknowledged record exactly once, with no CRC
  error and no partial batch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer
from kafka import KafkaProducer
from kafka.errors import KafkaError as PythonKafkaError
from kafka.errors import KafkaStorageError

from tests.support.broker import BrokerProcess
from tests.support.clients import consume_all, create_topic
from tests.support.tmpfs import mounted_tmpfs

pytestmark = pytest.mark.compat

TOPIC = "filling"
PARTITIONS = 2
VALUE_SIZE = 1000
LEFT_FREE = 2 << 20
SETTINGS = {
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "log.segment.bytes": str(1 << 20),
}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "20m") as mount_point:
        yield mount_point


def value(n: int) -> bytes:
    return (b"record-%08d;" % n).ljust(VALUE_SIZE, b".")


def fill(disk: Path, leave: int) -> Path:
    filler = disk / "filler"
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    with open(filler, "wb") as handle:
        handle.truncate(0)
        chunk = b"\0" * (1 << 20)
        remaining = max(0, free - leave)
        while remaining > 0:
            remaining -= handle.write(chunk[: min(len(chunk), remaining)])
    return filler


class Tally:
    """Acknowledged values and errors of one producer run."""

    def __init__(self) -> None:
        self.acked: list[int] = []
        self.errors: list[int] = []

    def callback(self, n: int) -> Callable[[KafkaError | None, Message], None]:
        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is None:
                self.acked.append(n)
            else:
                self.errors.append(error.code())

        return delivered


def confluent_idempotent(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 4000,
            "retry.backoff.ms": 200,
        }
    )


def produce_confluent(producer: Producer, first: int, count: int, tally: Tally) -> None:
    for n in range(first, first + count):
        while True:
            try:
                producer.produce(
                    TOPIC, value(n), partition=n % PARTITIONS, on_delivery=tally.callback(n)
                )
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(30) == 0


def test_disk_full_is_a_storage_error_and_nothing_acknowledged_is_lost(
    small_disk: Path, tmp_path: Path
) -> None:
    broker = BrokerProcess(small_disk / "data", settings=SETTINGS)
    broker.log_path = tmp_path / "broker.log"  # not on the disk being filled
    broker.start()
    try:
        create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        filler = fill(small_disk, LEFT_FREE)

        # 1. fill the disk through an idempotent confluent-kafka producer
        tally = Tally()
        producer = confluent_idempotent(broker.bootstrap)
        next_value = 0
        for _ in range(10):
            produce_confluent(producer, next_value, 1000, tally)
            next_value += 1000
            if tally.errors:
                break
        assert tally.errors, "the disk never filled up"
        assert set(tally.errors) <= {KafkaError.KAFKA_STORAGE_ERROR, KafkaError._MSG_TIMED_OUT}
        assert "KAFKA_STORAGE_ERROR" in broker.log()
        acked = set(tally.acked)

        # 2. kafka-python sees the error itself (no retries) and its connection stays usable
        python_producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", retries=0, linger_ms=0
        )
        try:
            # the last page of a file may still hold a record or two: send until refused
            for partition in range(PARTITIONS):
                with pytest.raises(KafkaStorageError):
                    for _ in range(100):
                        future = python_producer.send(TOPIC, value(next_value), partition=partition)
                        next_value += 1
                        future.get(timeout=20)
                        acked.add(next_value - 1)

            # 3. reads keep working while the disk is full
            read = consume_all(broker.bootstrap, TOPIC, PARTITIONS, len(acked), timeout=60)
            read_values = {int(v[7:15]) for rs in read.values() for _, v in rs if v is not None}
            assert acked <= read_values

            # 3b. a broker restarted on the still-full disk opens (its new leader epochs wait
            # in memory), serves reads and refuses produce until there is room again
            broker.restart(clean=False)
            read = consume_all(broker.bootstrap, TOPIC, PARTITIONS, len(acked), timeout=60)
            assert acked <= {int(v[7:15]) for rs in read.values() for _, v in rs if v}
            with pytest.raises(KafkaStorageError):
                python_producer.send(TOPIC, value(next_value), partition=0).get(timeout=30)
            # refused because the new term's epoch, written before its first append, cannot be
            assert "leader-epoch-checkpoint: No space left on device" in broker.log()

            # 4. space returns: producing resumes without a restart
            filler.unlink()
            resumed = Tally()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                produce_confluent(producer, next_value, 100, resumed)
                next_value += 100
                if not resumed.errors:
                    break
                resumed = Tally()  # errors still in flight from before the filler went
            assert not resumed.errors and len(resumed.acked) == 100
            acked |= set(resumed.acked)
            for _ in range(2000 // 50):
                python_batch = [
                    python_producer.send(TOPIC, value(n), partition=n % PARTITIONS)
                    for n in range(next_value, next_value + 50)
                ]
                for n, future in zip(range(next_value, next_value + 50), python_batch, strict=True):
                    future.get(timeout=20)
                    acked.add(n)
                next_value += 50
        finally:
            python_producer.close(timeout=10)
        assert producer.flush(10) == 0

        # 5. a restart loses nothing acknowledged and serves no partial batch
        broker.restart()
        read = consume_all(broker.bootstrap, TOPIC, PARTITIONS, len(acked), timeout=90)
        seen = [int(v[7:15]) for rs in read.values() for _, v in rs if v is not None]
        missing = acked - set(seen)
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        duplicates = len(seen) - len(set(seen))
        assert duplicates == 0, f"{duplicates} records read twice"
        for records in read.values():
            offsets = [offset for offset, _ in records]
            assert offsets == sorted(set(offsets))
    except PythonKafkaError:
        print(broker.log()[-5000:])
        raise
    finally:
        broker.stop()
