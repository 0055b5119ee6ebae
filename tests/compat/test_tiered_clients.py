"""Every real client reads a tiered topic (KIP-405) whose history is mostly in the object store
(S3Proxy), from the beginning, byte-identical to what was produced: kafka-python, aiokafka,
lockgate's own consumer, Apache Kafka's Java consumer and confluent-kafka (kcat and
confluent-kafka's plain read are in tests/integration/test_tiered_storage.py; Spark's readers
in tests/spark/test_tiered.py).

The history (tests/support/tiered.py): 2 partitions of plain records with keys, headers, null
and empty values, and between them transactions of confluent-kafka's transactional producer,
committed and aborted in turn, one aborted transaction larger than a segment (its records
start segments before its abort marker, which indexes it); every rolled segment is remote and
deleted from the disk before a client reads. read_uncommitted readers must return every record
at its produced offset (the offsets between are the transaction markers), read_committed
readers every record but the aborted ones. ListOffsets through confluent-kafka's AdminClient
and the Java Admin is compared with Kafka 4.4's answers for a tiered partition. Last, after a
task interval and a kill -9, a reader gets the same bytes again. franz-go is not here: its
check program (tests/go/franzcheck) only reads topics it created itself, and those are not
tiered.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # (not re-exported for mypy)
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonTopicPartition

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from tests.support.broker import BrokerProcess
from tests.support.clients import confluent_consumer, create_topic
from tests.support.java_programs import java_program
from tests.support.object_store import S3ProxyServer
from tests.support.reference_kafka import reference_classpath
from tests.support.tiered import (
    INTERVAL_MS,
    TOPIC_CONFIG,
    History,
    Written,
    local_segments,
    local_start,
    tiered_broker,
    wait_until_remote,
    write_history,
)

pytestmark = pytest.mark.compat

TOPIC = "history"
PARTITIONS = 2
ROUNDS = 10
READ_TIMEOUT = 60.0
JAVA_PROGRAM = Path(__file__).parents[1] / "reference" / "java" / "TieredReader.java"

# What a reader returns of one record: (partition, offset, key, value, headers)
Read = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]
# A ListOffsets answer: (spec, partition) -> (offset, leader epoch or "-")
Offsets = dict[tuple[str, int], tuple[int, str]]


@pytest.fixture(scope="module")
def tiered(
    s3proxy: S3ProxyServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, History]]:
    data = tmp_path_factory.mktemp("tiered-clients") / "data"
    with tiered_broker(s3proxy, data, f"clients-{uuid.uuid4().hex[:8]}") as broker:
        create_topic(broker.bootstrap, TOPIC, PARTITIONS, TOPIC_CONFIG)
        history = write_history(broker.bootstrap, TOPIC, PARTITIONS, rounds=ROUNDS)
        # one marker per transaction in every partition: the offsets are the records' and the
        # markers', nothing else
        assert [history.markers(p) for p in range(PARTITIONS)] == [ROUNDS] * PARTITIONS
        wait_until_remote(broker.data_dir, history)
        yield broker, history


def expected(history: History, committed: bool) -> list[Read]:
    records: list[Written] = []
    for partition in range(history.partitions):
        if committed:
            records += history.read_committed(partition)
        else:
            records += history.read_uncommitted(partition)
    return [(r.partition, r.offset, r.key, r.value, r.headers) for r in records]


def in_order(reads: list[Read]) -> list[Read]:
    """By partition, then in the order read (offsets must already rise within a partition)."""
    return sorted(reads, key=lambda r: r[0])


def as_headers(
    headers: Sequence[tuple[str, str | bytes | None]] | None,
) -> tuple[tuple[str, bytes], ...]:
    out: list[tuple[str, bytes]] = []
    for name, value in headers or ():
        assert not isinstance(value, str)  # (confluent-kafka's type allows it; it never reads one)
        out.append((name, value if value is not None else b"<null>"))
    return tuple(out)


def isolation_ids(committed: bool) -> str:
    return "read_committed" if committed else "read_uncommitted"


# -- the clients ---------------------------------------------------------------------------------


def read_kafka_python(bootstrap: str, committed: bool) -> list[Read]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        isolation_level=isolation_ids(committed),
    )  # fmt: skip
    partitions = [KafkaPythonTopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    got: list[Read] = []
    try:
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        deadline = time.monotonic() + READ_TIMEOUT
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, "kafka-python did not reach the end"
            for records in consumer.poll(timeout_ms=500).values():
                got += [(m.partition, m.offset, m.key, m.value, as_headers(m.headers))
                        for m in records]  # fmt: skip
    finally:
        consumer.close()
    return got


async def read_aiokafka(bootstrap: str, committed: bool) -> list[Read]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        isolation_level=isolation_ids(committed),
    )  # fmt: skip
    await consumer.start()
    partitions = [AioTopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    got: list[Read] = []
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning()
        ends = await consumer.end_offsets(partitions)
        deadline = time.monotonic() + READ_TIMEOUT
        while any([await consumer.position(tp) < ends[tp] for tp in partitions]):
            assert time.monotonic() < deadline, "aiokafka did not reach the end"
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                got += [(m.partition, m.offset, m.key, m.value, as_headers(m.headers))
                        for m in records]  # fmt: skip
    finally:
        await consumer.stop()
    return got


async def read_lockgate(bootstrap: str, committed: bool) -> list[Read]:
    got: list[Read] = []
    async with Consumer(
        bootstrap, isolation_level=isolation_ids(committed), auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as consumer:  # fmt: skip
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        deadline = time.monotonic() + READ_TIMEOUT
        while any([await consumer.position(tp) < ends[tp] for tp in partitions]):
            assert time.monotonic() < deadline, "lockgate's consumer did not reach the end"
            got += [(m.partition, m.offset, m.key, m.value, as_headers(m.headers))
                    for m in await consumer.poll(500)]  # fmt: skip
    return got


def read_confluent(bootstrap: str) -> list[Read]:
    """Every partition from offset 0 with confluent-kafka (librdkafka reads read_committed by
    default)."""
    consumer = confluent_consumer(bootstrap, **{"group.id": f"g-{uuid.uuid4().hex}"})
    partitions = [ConfluentTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)]
    ends = {}
    for tp in partitions:
        _low, high = consumer.get_watermark_offsets(tp, timeout=10)
        ends[tp.partition] = high
    got: list[Read] = []
    try:
        consumer.assign(partitions)
        deadline = time.monotonic() + READ_TIMEOUT
        done: set[int] = set()
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline, "confluent-kafka did not reach the end"
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(error)
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                headers = message.headers()
                assert not isinstance(headers, dict)
                got.append((partition, offset, message.key(), message.value(),
                            as_headers(headers)))  # fmt: skip
            positions = consumer.position([ConfluentTopicPartition(TOPIC, p) for p in ends])
            done = {tp.partition for tp in positions if tp.offset >= ends[tp.partition]}
    finally:
        consumer.close()
    return got


def run_java(bootstrap: str) -> tuple[dict[str, list[Read]], Offsets]:
    """The Java program's records per isolation level, and its ListOffsets answers."""
    classpath = reference_classpath()
    if classpath is None:
        reason = "Apache Kafka's jars are not resolved: run `make reference-deps`"
        if os.environ.get("CI"):  # (the test command resolves them: their absence is a failure)
            pytest.fail(reason)
        pytest.skip(reason)
    done = subprocess.run(
        [*java_program(JAVA_PROGRAM, classpath, "-Xmx256m"), bootstrap, TOPIC, str(PARTITIONS)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    tail = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0 and done.stdout.endswith("DONE\n"), tail
    records: dict[str, list[Read]] = {"read_uncommitted": [], "read_committed": []}
    offsets: Offsets = {}
    for line in done.stdout.splitlines():
        words = line.split(" ")
        if words[0] == "RECORD":
            _, isolation, partition, offset, key, value, headers = words
            records[isolation].append(
                (int(partition), int(offset), _hex(key), _hex(value), _java_headers(headers))
            )
        elif words[0] == "OFFSET":
            _, spec, partition, offset, epoch = words
            offsets[(spec, int(partition))] = (int(offset), epoch)
    return records, offsets


def _hex(text: str) -> bytes | None:
    return None if text == "null" else bytes.fromhex(text.removeprefix("0x"))


def _java_headers(text: str) -> tuple[tuple[str, bytes], ...]:
    if text == "-":
        return ()
    pairs = (item.split("=", 1) for item in text.split(","))
    return tuple((name, b"<null>" if value == "null" else bytes.fromhex(value))
                 for name, value in pairs)  # fmt: skip


# -- the tests -----------------------------------------------------------------------------------


def test_confluent_kafkas_admin_lists_the_offsets_of_a_tiered_partition(
    tiered: tuple[BrokerProcess, History],
) -> None:
    broker, history = tiered
    offsets = list_offsets_confluent(broker.bootstrap)
    for partition in range(PARTITIONS):
        # only the active segment is on disk, a small part of the partition
        assert local_segments(broker.data_dir, TOPIC, partition) == 1
        # as Kafka 4.4: earliest is the log start in the object store, latest the end, and
        # timestamp 0 finds the first record, in the object store
        assert offsets[("earliest", partition)] == 0
        assert offsets[("latest", partition)] == history.ends[partition]
        assert offsets[("timestamp0", partition)] == 0


@pytest.mark.parametrize("committed", [False, True], ids=isolation_ids)
def test_kafka_python_reads_from_the_beginning(
    tiered: tuple[BrokerProcess, History], committed: bool
) -> None:
    broker, history = tiered
    assert in_order(read_kafka_python(broker.bootstrap, committed)) == expected(history, committed)


@pytest.mark.parametrize("committed", [False, True], ids=isolation_ids)
def test_aiokafka_reads_from_the_beginning(
    tiered: tuple[BrokerProcess, History], committed: bool
) -> None:
    broker, history = tiered
    got = asyncio.run(read_aiokafka(broker.bootstrap, committed))
    assert in_order(got) == expected(history, committed)


@pytest.mark.parametrize("committed", [False, True], ids=isolation_ids)
def test_lockgates_consumer_reads_from_the_beginning(
    tiered: tuple[BrokerProcess, History], committed: bool
) -> None:
    broker, history = tiered
    got = in_order(asyncio.run(read_lockgate(broker.bootstrap, committed)))
    assert got == expected(history, committed)
    aborted = {(r.partition, r.offset) for r in history.records if r.aborted}
    assert aborted
    if committed:
        assert not aborted & {(r[0], r[1]) for r in got}
    else:
        assert aborted <= {(r[0], r[1]) for r in got}


def list_offsets_confluent(bootstrap: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    specs = {
        "earliest": OffsetSpec.earliest(),  # type: ignore[no-untyped-call]
        "latest": OffsetSpec.latest(),  # type: ignore[no-untyped-call]
        "timestamp0": OffsetSpec.for_timestamp(0),
    }
    found: dict[tuple[str, int], int] = {}
    for name, spec in specs.items():
        query = {ConfluentTopicPartition(TOPIC, p): spec for p in range(PARTITIONS)}
        for tp, future in admin.list_offsets(query, request_timeout=20).items():
            found[(name, tp.partition)] = future.result(timeout=30).offset
    return found


def test_the_java_client_reads_from_the_beginning_and_lists_tiered_offsets(
    tiered: tuple[BrokerProcess, History],
) -> None:
    broker, history = tiered
    records, offsets = run_java(broker.bootstrap)
    assert in_order(records["read_uncommitted"]) == expected(history, committed=False)
    assert in_order(records["read_committed"]) == expected(history, committed=True)
    for partition in range(PARTITIONS):
        start = local_start(broker.data_dir, TOPIC, partition)
        # as Kafka 4.4 answers on a tiered partition whose rolled segments are all uploaded
        # and deleted locally: earliest is the log start (0, in the object store), latest the
        # end, earliest-local the active segment's base, latest-tiered the offset before it,
        # earliest-pending-upload the first offset not copied (the active segment's base
        # again), timestamp 0 the first record (in the object store); all with the leader
        # epoch that wrote them (the only one, 0)
        assert 0 < start < history.ends[partition]
        assert offsets[("earliest", partition)] == (0, "0")
        assert offsets[("latest", partition)] == (history.ends[partition], "0")
        assert offsets[("earliestLocal", partition)] == (start, "0")
        assert offsets[("latestTiered", partition)] == (start - 1, "0")
        assert offsets[("earliestPendingUpload", partition)] == (start, "0")
        assert offsets[("timestamp0", partition)] == (0, "0")


def test_a_restart_reads_the_same_bytes(tiered: tuple[BrokerProcess, History]) -> None:
    """After a task interval (another pass ran over the remote history) and a kill -9, the
    remote log is rebuilt from the manifests and reads give the same bytes."""
    broker, history = tiered
    before = in_order(read_confluent(broker.bootstrap))
    assert before == expected(history, committed=True)
    time.sleep(2 * INTERVAL_MS / 1000)  # (not a synchronisation: a pass has time to run)
    broker.kill()
    broker.start()
    assert in_order(read_confluent(broker.bootstrap)) == before
    assert in_order(asyncio.run(read_aiokafka(broker.bootstrap, committed=False))) == expected(
        history, committed=False
    )
