"""Idempotent producers against lockgate: KAFKA-12207 producer state and KIP-360 recovery.

- 100,000 messages from confluent-kafka and, separately, from kafka-python through a fault
  proxy that drops, delays and duplicates Produce frames and cuts connections; read back with
  a plain (read_uncommitted) fetch, every message must be there exactly once, in order, and
  every delivery report must carry the offset it was read at (a resent batch, the latest or
  an earlier one, gets its original offset: never -1).
- UNKNOWN_PRODUCER_ID: the producer's state expires between two rounds (seen through
  DescribeProducers and the broker log); the clients must come back with a new id/epoch and
  nothing may be lost or written twice.
- Restarts: batches built by hand on a raw socket are retried after a clean restart (snapshot),
  after kill -9 (whole-log replay) and after kill -9 following segment rolls (snapshot plus a
  replay of the tail): the exact retry of the latest batch and the resend of an older one
  get their original offsets, an older sequence that starts no batch is
  DUPLICATE_SEQUENCE_NUMBER, a gap OUT_OF_ORDER_SEQUENCE_NUMBER, a lower epoch
  INVALID_PRODUCER_EPOCH, and nothing is appended but the next batch in order.
- Older batches resent on a raw socket, with another producer's batches between, get their
  original offset (and, on a LogAppendTime topic, their original append time).
"""

from __future__ import annotations

import asyncio
import logging
import re
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import Message, Producer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import UnknownProducerIdError
from kafka.producer.future import RecordMetadata

from lockgate.config.properties import BrokerConfig
from lockgate.protocol.records import build_batch
from lockgate.replication import group_commit as durability
from lockgate.server.broker import Broker
from lockgate.storage.disk import DiskEngine
from lockgate.storage.engine import AppendFile
from tests.support.broker import BrokerProcess
from tests.support.clients import consume_all, create_topic
from tests.support.fault_proxy import Direction, FaultProxy, RuleHandle
from tests.support.kafka_wire import (
    Cursor,
    KafkaWire,
    ProducePartitionResult,
    StoredBatch,
    decode_produce_response,
    fetch_batches,
    frame,
    int32,
    produce,
    produce_body,
    request_header,
    string,
)
from tests.support.sequences import check_partitions, sequence_of, sequence_value

pytestmark = pytest.mark.compat

API_PRODUCE = 0
API_INIT_PRODUCER_ID = 22
NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47

PARTITIONS = 3
COUNT = 100_000
REQUEST_TIMEOUT_MS = 2000  # a dropped response costs this long before the client retries

EXPIRED_LINE = re.compile(r"expired [1-9][0-9]* idle producer entries")
EXPIRY = {
    "producer.id.expiration.ms": "1500",
    "producer.id.expiration.check.interval.ms": "250",
}


# -- faults and read-back -------------------------------------------------------------------


def inject_produce_faults(proxy: FaultProxy) -> list[RuleHandle]:
    """Every few dozen Produce frames something goes wrong. Each fault either loses an answer
    to a request the broker has appended (drop, cut on the response, cut right after the
    request) so that the client must retry it, or hands the broker the same request twice."""
    request, response = Direction.REQUEST, Direction.RESPONSE
    produce_only = [API_PRODUCE]
    return [
        proxy.drop(response, produce_only, skip=10, every=40, limit=4),
        proxy.cut(response, produce_only, skip=25, every=60, limit=2),
        proxy.cut(request, produce_only, after=True, skip=55, every=60, limit=2),
        proxy.duplicate_requests(produce_only, skip=5, every=45, limit=5),
        proxy.delay(response, 0.2, produce_only, skip=3, every=30, limit=5),
    ]


def assert_every_fault_happened(proxy: FaultProxy, rules: list[RuleHandle]) -> None:
    applied = {f"{r.rule.action.value}/{r.rule.direction.value}": r.applied for r in rules}
    assert all(applied.values()), f"some faults never happened: {applied}"
    assert proxy.counters()["swallowed_duplicate_responses"] >= 1
    assert proxy.counters()["connections_accepted"] > 2, "cut connections were not replaced"


def numbered(
    received: dict[int, list[tuple[int, bytes | None]]],
) -> dict[int, list[tuple[int, int]]]:
    return {
        p: [(offset, sequence_of(value)) for offset, value in got] for p, got in received.items()
    }


def read_with_kafka_python(
    bootstrap: str, topic: str, count: int, timeout: float = 60.0
) -> dict[int, list[tuple[int, bytes | None]]]:
    """Plain read_uncommitted fetch: assign every partition, seek to the beginning, read
    `count` records (then a little longer, so that duplicates would show)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_uncommitted",
        request_timeout_ms=10_000,
    )
    received: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in range(PARTITIONS)}
    try:
        partitions = [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        total = 0
        deadline = time.monotonic() + timeout
        extra_until: float | None = None
        while time.monotonic() < deadline:
            if total >= count:
                extra_until = extra_until or time.monotonic() + 0.3
                if time.monotonic() >= extra_until:
                    break
            for partition, records in consumer.poll(timeout_ms=200, max_records=20_000).items():
                received[partition.partition].extend((r.offset, r.value) for r in records)
                total += len(records)
    finally:
        consumer.close()
    return received


def reported_position(message: Message) -> tuple[int, int]:
    """(partition, offset) of a delivery report; -1 for the offset it does not have (a
    DUPLICATE_SEQUENCE_NUMBER answer), which confluent-kafka gives as None."""
    offset = message.offset()
    return int(message.partition() or 0), -1 if offset is None or offset < 0 else offset


def assert_reported_offsets(
    reported: dict[int, tuple[int, int]], received: dict[int, list[tuple[int, bytes | None]]]
) -> None:
    """Every message's delivery report names the partition and offset it was read at: none
    is -1, which is what clients report for DUPLICATE_SEQUENCE_NUMBER."""
    read = {
        sequence_of(value): (partition, offset)
        for partition, got in received.items()
        for offset, value in got
    }
    unknown = sorted(s for s, (_partition, offset) in reported.items() if offset < 0)
    assert not unknown, f"{len(unknown)} delivery reports without an offset, from {unknown[0]}"
    wrong = sorted(s for s in read if reported.get(s) != read[s])
    assert not wrong, f"{len(wrong)} reports differ, from {wrong[0]}: {reported.get(wrong[0])}"


# -- 100,000 messages through the fault proxy -------------------------------------------------


def test_confluent_kafka_exactly_once_through_faults(
    proxied_broker: BrokerProcess, fault_proxy: FaultProxy
) -> None:
    topic = "idempotent-confluent"
    create_topic(fault_proxy.address, topic, PARTITIONS)
    rules = inject_produce_faults(fault_proxy)
    producer = Producer(
        {
            "bootstrap.servers": fault_proxy.address,
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 2,
            "batch.num.messages": 100,  # many small requests, so that faults hit some
            "request.timeout.ms": REQUEST_TIMEOUT_MS,
            # librdkafka gives up on a request in flight after socket.timeout.ms (60 s by
            # default), not request.timeout.ms: this bounds the wait for a dropped response
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "queue.buffering.max.messages": COUNT,
        }
    )
    errors: list[str] = []
    reported: dict[int, tuple[int, int]] = {}  # message sequence → (partition, offset)

    def delivered(error: object, message: Message) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            reported[sequence_of(message.value())] = reported_position(message)

    for sequence in range(COUNT):
        producer.produce(
            topic,
            value=sequence_value(sequence),
            partition=sequence % PARTITIONS,
            on_delivery=delivered,
        )
        if sequence % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "messages still queued after 120 s"
    assert errors == []
    assert_every_fault_happened(fault_proxy, rules)

    fault_proxy.clear_rules()
    received = consume_all(fault_proxy.address, topic, PARTITIONS, COUNT)
    check_partitions(numbered(received), COUNT, PARTITIONS)
    assert_reported_offsets(reported, received)


def test_kafka_python_exactly_once_through_faults(
    proxied_broker: BrokerProcess, fault_proxy: FaultProxy
) -> None:
    topic = "idempotent-kafka-python"
    create_topic(fault_proxy.address, topic, PARTITIONS)
    rules = inject_produce_faults(fault_proxy)
    producer = KafkaProducer(
        bootstrap_servers=fault_proxy.address,
        acks="all",
        linger_ms=2,
        max_in_flight_requests_per_connection=5,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        retry_backoff_ms=50,
    )
    assert producer.config["enable_idempotence"], "kafka-python makes producers idempotent"
    errors: list[str] = []
    reported: dict[int, tuple[int, int]] = {}  # message sequence → (partition, offset)

    def delivered(sequence: int, metadata: RecordMetadata) -> None:
        reported[sequence] = (metadata.partition, metadata.offset)

    try:
        for sequence in range(COUNT):
            future = producer.send(
                topic, value=sequence_value(sequence), partition=sequence % PARTITIONS
            )
            future.add_callback(delivered, sequence)
            future.add_errback(lambda error: errors.append(repr(error)))
        producer.flush(120)
    finally:
        producer.close(10)
    assert errors == []
    assert_every_fault_happened(fault_proxy, rules)

    fault_proxy.clear_rules()
    received = read_with_kafka_python(fault_proxy.address, topic, COUNT)
    check_partitions(numbered(received), COUNT, PARTITIONS)
    assert_reported_offsets(reported, received)


def test_confluent_kafka_reports_the_original_offset_of_older_resent_batches(
    proxied_broker: BrokerProcess, fault_proxy: FaultProxy
) -> None:
    """The answer to one Produce request is held back (and the answers behind it) while the
    client sends more, up to five in flight; then the connection is cut before it. The broker
    has appended them all, and the client resends them all, the first ones older than the
    producer's latest batch: every delivery report must still carry the offset the message
    is read at (librdkafka reports -1 for DUPLICATE_SEQUENCE_NUMBER)."""
    topic = "resent-offsets"
    create_topic(fault_proxy.address, topic, 1)
    count = 3_000
    held = [
        fault_proxy.delay(Direction.RESPONSE, 0.5, [API_PRODUCE], skip=20, every=60, limit=4),
        fault_proxy.cut(Direction.RESPONSE, [API_PRODUCE], skip=20, every=60, limit=4),
    ]
    producer = Producer(
        {
            "bootstrap.servers": fault_proxy.address,
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 1,
            # librdkafka counts messages, not requests, against its five in flight per
            # partition: one-message batches let five requests be in flight
            "batch.num.messages": 1,
            "request.timeout.ms": 10_000,
            "queue.buffering.max.messages": count,
        }
    )
    errors: list[str] = []
    reported: dict[int, tuple[int, int]] = {}

    def delivered(error: object, message: Message) -> None:
        if error is not None:
            errors.append(str(error))
        else:
            reported[sequence_of(message.value())] = reported_position(message)

    for sequence in range(count):
        producer.produce(topic, value=sequence_value(sequence), partition=0, on_delivery=delivered)
        if sequence % 100 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "messages still queued after 120 s"
    assert errors == []
    assert [rule.applied for rule in held] == [4, 4]
    fault_proxy.clear_rules()
    received = consume_all(fault_proxy.address, topic, 1, count)
    check_partitions(numbered(received), count, 1)
    assert len(reported) == count
    assert_reported_offsets(reported, received)


# -- UNKNOWN_PRODUCER_ID after the producer state expired (KIP-360) ---------------------------


def producer_states(bootstrap: str, topic: str) -> dict[int, set[tuple[int, int]]]:
    """Partition → {(producer id, epoch)} as DescribeProducers (key 61) reports them."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        answer = admin.describe_producers(
            [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
        )
    finally:
        admin.close()
    return {
        partition.partition: {(p.producer_id, p.producer_epoch) for p in state.active_producers}
        for partition, state in answer.items()
    }


def wait_until_forgotten(broker: BrokerProcess, topic: str, timeout: float = 20.0) -> None:
    """Until DescribeProducers shows no producer on any partition and the broker has logged
    the expiry."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = producer_states(broker.bootstrap, topic)
        if not any(states.values()) and EXPIRED_LINE.search(broker.log()):
            return
        time.sleep(0.25)
    raise AssertionError(f"producer state did not expire in {timeout}s: {states}")


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("proxied_broker", [EXPIRY], indirect=True, ids=["short-expiry"])
def test_confluent_kafka_recovers_from_unknown_producer_id(proxied_broker: BrokerProcess) -> None:
    topic, rounds, per_round = "expiring-confluent", 2, 3000
    create_topic(proxied_broker.bootstrap, topic, PARTITIONS)
    librdkafka_log = Collected()
    logger = logging.getLogger("test_idempotence.librdkafka")
    logger.addHandler(librdkafka_log)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    producer = Producer(
        {
            "bootstrap.servers": proxied_broker.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 2,
            "debug": "eos",
        },
        logger=logger,
    )
    errors: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(str(error))

    states: list[dict[int, set[tuple[int, int]]]] = []
    try:
        for round_number in range(rounds):
            if round_number:
                wait_until_forgotten(proxied_broker, topic)
            for sequence in range(round_number * per_round, (round_number + 1) * per_round):
                producer.produce(
                    topic,
                    value=sequence_value(sequence),
                    partition=sequence % PARTITIONS,
                    on_delivery=delivered,
                )
            assert producer.flush(30) == 0
            states.append(producer_states(proxied_broker.bootstrap, topic))
    finally:
        logger.removeHandler(librdkafka_log)
    assert errors == []
    assert any("unknown producer id" in line for line in librdkafka_log.lines), (
        "librdkafka never saw UNKNOWN_PRODUCER_ID"
    )
    for partition in range(PARTITIONS):
        (before,) = states[0][partition]
        (after,) = states[1][partition]
        assert after != before, f"partition {partition}: still {before} after the expiry"
    count = rounds * per_round
    received = consume_all(proxied_broker.bootstrap, topic, PARTITIONS, count)
    check_partitions(numbered(received), count, PARTITIONS)


def kafka_python_round(
    producer: KafkaProducer, topic: str, sequences: list[int]
) -> dict[int, BaseException]:
    """Sends the numbered messages and returns those whose send failed."""
    futures = [
        (s, producer.send(topic, value=sequence_value(s), partition=s % PARTITIONS))
        for s in sequences
    ]
    producer.flush(30)
    failed: dict[int, BaseException] = {}
    for sequence, future in futures:
        assert future.is_done, f"message {sequence} neither sent nor failed"
        if future.exception is not None:
            failed[sequence] = future.exception
    return failed


@pytest.mark.parametrize("proxied_broker", [EXPIRY], indirect=True, ids=["short-expiry"])
def test_kafka_python_recovers_from_unknown_producer_id(proxied_broker: BrokerProcess) -> None:
    """kafka-python 3.0.12 fails the batches that meet UNKNOWN_PRODUCER_ID (it does not tell
    this case from data loss) and then bumps its epoch: what it reports failed must not be in
    the log, the next sends must work, and a resend of the failed ones must not duplicate."""
    topic, per_round = "expiring-kafka-python", 3000
    create_topic(proxied_broker.bootstrap, topic, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=proxied_broker.bootstrap, acks="all", linger_ms=2)
    try:
        assert kafka_python_round(producer, topic, list(range(per_round))) == {}
        before = producer_states(proxied_broker.bootstrap, topic)
        wait_until_forgotten(proxied_broker, topic)
        failed = kafka_python_round(producer, topic, list(range(per_round, 2 * per_round)))
        assert all(isinstance(e, UnknownProducerIdError) for e in failed.values()), {
            type(e).__name__ for e in failed.values()
        }
        third = list(range(2 * per_round, 3 * per_round))
        assert kafka_python_round(producer, topic, third) == {}, "no recovery after the bump"
        after = producer_states(proxied_broker.bootstrap, topic)
        written = 2 * per_round - len(failed)
        stored = numbered(consume_all(proxied_broker.bootstrap, topic, PARTITIONS, written))
        assert not {s for got in stored.values() for _, s in got} & failed.keys(), (
            "a send reported failed was written"
        )
        assert kafka_python_round(producer, topic, sorted(failed)) == {}
    finally:
        producer.close(10)
    for partition in range(PARTITIONS):
        (first_pair,) = before[partition]
        (last_pair,) = after[partition]
        assert last_pair != first_pair, f"partition {partition}: no new producer id/epoch"
    count = 3 * per_round
    received = numbered(consume_all(proxied_broker.bootstrap, topic, PARTITIONS, count))
    for partition in range(PARTITIONS):
        sequences = [s for _, s in received[partition]]
        expected = list(range(partition, count, PARTITIONS))
        assert sorted(sequences) == expected, f"partition {partition}: lost or duplicated"
        first_time = [s for s in sequences if s not in failed]
        assert first_time == sorted(first_time), f"partition {partition}: order not kept"
        assert [o for o, _ in received[partition]] == list(range(len(expected)))


@pytest.mark.xfail(
    strict=True,
    reason=(
        "lockgate answers UNKNOWN_PRODUCER_ID to a producer it has no state for at a sequence "
        "other than 0 (PROTOCOL.md); current Apache Kafka accepts any sequence there ('If "
        "there is no current producer epoch ... accept writes with any sequence number'). "
        "kafka-python 3.0.12 then fails the batches in flight with UnknownProducerIdError "
        "before bumping its epoch, so the application sees errors Kafka would not give it"
    ),
)
@pytest.mark.parametrize("proxied_broker", [EXPIRY], indirect=True, ids=["short-expiry"])
def test_kafka_python_sends_without_errors_after_its_state_expired(
    proxied_broker: BrokerProcess,
) -> None:
    topic, per_round = "expiring-kafka-python-quiet", 300
    create_topic(proxied_broker.bootstrap, topic, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=proxied_broker.bootstrap, acks="all", linger_ms=2)
    try:
        assert kafka_python_round(producer, topic, list(range(per_round))) == {}
        wait_until_forgotten(proxied_broker, topic)
        failed = kafka_python_round(producer, topic, list(range(per_round, 2 * per_round)))
    finally:
        producer.close(10)
    assert failed == {}


# -- retries after a restart, on a raw socket -------------------------------------------------


def init_producer_id(wire: KafkaWire) -> tuple[int, int]:
    """InitProducerId v0 without a transactional id: (producer id, epoch)."""
    body = string(None) + int32(60_000)  # transactional id, transaction timeout
    response = wire.request(API_INIT_PRODUCER_ID, 0, body, flexible=False, flexible_response=False)
    response.int32()  # throttle time
    error = response.int16()
    producer_id, epoch = response.int64(), response.int16()
    assert error == NONE, f"InitProducerId: error {error}"
    return producer_id, epoch


def numbered_batch(
    producer_id: int, epoch: int, sequence: int, count: int = 3, timestamp_ms: int | None = None
) -> bytes:
    """`count` records with sequences from `sequence`; values of ~300 B, so that a 1 KiB
    segment holds one batch."""
    values = [b"%d/%d/%d|" % (producer_id, epoch, sequence + i) + b"v" * 300 for i in range(count)]
    return build_batch(
        [(None, value) for value in values],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        timestamp_ms=int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
    )


def send(wire: KafkaWire, topic: str, batch: bytes, version: int = 8) -> tuple[int, int]:
    """(error code, base offset) of a Produce of one batch to partition 0, acks=all."""
    result = produce(wire, version, topic, {0: batch}).only()
    return result.error_code, result.base_offset


def stored_batches(wire: KafkaWire, topic: str) -> list[StoredBatch]:
    """Every batch of partition 0 (a Fetch stops at a segment's end: fetch on from there)."""
    batches: list[StoredBatch] = []
    for _ in range(1000):
        offset = batches[-1].base_offset + batches[-1].record_count if batches else 0
        error, more = fetch_batches(wire, topic, 0, offset)
        assert error == NONE
        if not more:
            return batches
        batches.extend(more)
    raise AssertionError("more than 1000 fetches for a handful of batches")


def snapshot_offsets(broker: BrokerProcess, topic: str) -> list[int]:
    directory = broker.data_dir / f"{topic}-0"
    return sorted(int(path.stem) for path in directory.glob("*.snapshot"))


RESTARTS = {
    "clean": {},  # SIGTERM: a snapshot at the log end
    "kill": {},  # SIGKILL, no snapshot at all: the whole log is replayed
    "kill-after-rolls": {"log.segment.bytes": "1024"},  # snapshots at each roll, tail replayed
}


@pytest.mark.parametrize("restart", list(RESTARTS))
def test_retried_batches_are_deduplicated_after_a_restart(tmp_path: Path, restart: str) -> None:
    topic = "dedup-restart"
    broker = BrokerProcess(tmp_path / "data", settings=RESTARTS[restart]).start()
    try:
        create_topic(broker.bootstrap, topic, 1)
        with KafkaWire(broker.bootstrap) as wire:
            first_id, epoch = init_producer_id(wire)
            second_id, second_epoch = init_producer_id(wire)
            assert first_id != second_id and epoch == second_epoch == 0
            a, b, c = (numbered_batch(first_id, 0, sequence) for sequence in (0, 3, 6))
            old_epoch = numbered_batch(second_id, 0, 0)
            new_epoch = numbered_batch(second_id, 1, 0)  # idempotent producers may bump alone
            offsets = [send(wire, topic, batch) for batch in (a, b, old_epoch, new_epoch, c)]
            assert offsets == [(NONE, 0), (NONE, 3), (NONE, 6), (NONE, 9), (NONE, 12)]
            before = stored_batches(wire, topic)

        if restart == "clean":
            assert broker.stop() == 0
            assert snapshot_offsets(broker, topic) == [15], "no snapshot at the log end"
        else:
            broker.kill()
            snapshots = snapshot_offsets(broker, topic)
            if restart == "kill":
                assert snapshots == [], "a snapshot would spare the replay"
            else:
                assert snapshots and max(snapshots) == 12, "the latest batch must be replayed"
        broker.start()

        with KafkaWire(broker.bootstrap) as wire:
            assert send(wire, topic, c) == (NONE, 12), "exact retry of the latest batch"
            assert send(wire, topic, b) == (NONE, 3), "an older batch, found in the log"
            assert send(wire, topic, a) == (NONE, 0)
            three_behind = numbered_batch(first_id, 0, 5, count=1)
            assert send(wire, topic, three_behind)[0] == DUPLICATE_SEQUENCE_NUMBER
            gap = numbered_batch(first_id, 0, 12)
            assert send(wire, topic, gap)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
            assert send(wire, topic, old_epoch)[0] == INVALID_PRODUCER_EPOCH
            assert send(wire, topic, new_epoch) == (NONE, 9), "exact retry, second producer"
            assert stored_batches(wire, topic) == before, "a refused or retried batch was stored"
            following = numbered_batch(first_id, 0, 9)
            assert send(wire, topic, following) == (NONE, 15)
            assert send(wire, topic, following, version=9) == (NONE, 15)  # flexible as well
            assert stored_batches(wire, topic) == [*before, StoredBatch(15, 0, 3)]
    finally:
        broker.kill()


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_older_batches_resent_get_their_original_offset_and_append_time(
    broker_process: BrokerProcess, timestamp_type: str
) -> None:
    """One producer sends sequences 0, 5, 10, ... 45 (five records a batch), another one
    writes between them; then older batches come again, as a client resends what it had in
    flight after a cut connection."""
    topic = f"resent-{timestamp_type.lower()}"
    create_topic(broker_process.bootstrap, topic, 1, {"message.timestamp.type": timestamp_type})
    with KafkaWire(broker_process.bootstrap) as wire:
        producer_id, epoch = init_producer_id(wire)
        other_id, _ = init_producer_id(wire)
        sent: list[bytes] = []
        answers: list[ProducePartitionResult] = []
        for i in range(10):
            sent.append(numbered_batch(producer_id, epoch, 5 * i, count=5))
            answers.append(produce(wire, 8, topic, {0: sent[-1]}).only())
            for j in range(3):
                assert send(wire, topic, numbered_batch(other_id, 0, 3 * (3 * i + j)))[0] == NONE
            time.sleep(0.002)  # each batch its own append time
        assert [a.error_code for a in answers] == [NONE] * 10
        if timestamp_type == "LogAppendTime":
            times = [a.log_append_time_ms for a in answers]
            assert times == sorted(set(times)) and times[0] > 0
        before = stored_batches(wire, topic)
        for i in (8, 5, 0, 9):  # 1, 4 and 9 batches behind, then the latest
            again = produce(wire, 8, topic, {0: sent[i]}).only()
            assert (again.error_code, again.base_offset) == (NONE, answers[i].base_offset)
            assert again.log_append_time_ms == answers[i].log_append_time_ms
        # a resend cut otherwise than the stored batches matches none: delivered, no offset
        assert send(wire, topic, numbered_batch(producer_id, epoch, 12, count=3)) == (
            DUPLICATE_SEQUENCE_NUMBER,
            -1,
        )
        assert stored_batches(wire, topic) == before, "a resend was stored"


@pytest.mark.parametrize(
    "restart",
    [
        "clean",
        "kill",
    ],
)
def test_replayed_producer_with_old_timestamps_is_not_expired_early(
    tmp_path: Path, restart: str
) -> None:
    topic = "dedup-old-timestamps"
    settings = {
        "producer.id.expiration.ms": "60000",
        "producer.id.expiration.check.interval.ms": "100",
    }
    broker = BrokerProcess(tmp_path / "data", settings=settings).start()
    try:
        create_topic(broker.bootstrap, topic, 1)
        two_hours_ago = int(time.time() * 1000) - 2 * 3600 * 1000
        with KafkaWire(broker.bootstrap) as wire:
            producer_id, epoch = init_producer_id(wire)
            first = numbered_batch(producer_id, epoch, 0, timestamp_ms=two_hours_ago)
            assert send(wire, topic, first) == (NONE, 0)
        broker.restart(clean=restart == "clean")
        time.sleep(1.0)  # ten expiry checks; the producer wrote well within 60 s
        with KafkaWire(broker.bootstrap) as wire:
            retry = send(wire, topic, first)
            stored = stored_batches(wire, topic)
        assert (retry, len(stored)) == ((NONE, 0), 1), f"retry answered {retry}, log {stored}"
    finally:
        broker.kill()


# -- a DUPLICATE_SEQUENCE_NUMBER answer is a success to the client ----------------------------


async def read_produce_answer(reader: asyncio.StreamReader, version: int) -> tuple[int, int]:
    """(correlation id, error code) of the next Produce response on a connection."""
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    response = Cursor(await reader.readexactly(size))
    correlation_id = response.int32()
    return correlation_id, decode_produce_response(version, response).only().error_code


@pytest.mark.parametrize(
    "retried",
    [
        "latest",  # an exact retry of the latest batch: its original offset
        "older",  # an older batch, found in the log: its original offset
        "older-cut-differently",  # no batch starts at its sequence: DUPLICATE_SEQUENCE_NUMBER
    ],
)
async def test_retry_is_confirmed_only_once_the_original_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retried: str
) -> None:
    """Two pipelined acks=all batches wait for a slow fsync; meanwhile the client retries one
    of them on another connection. The retry's answer says the records are written, so it
    must not come before the original's answer."""
    fsync_seconds = 0.6

    def slow_sync(files: list[AppendFile]) -> None:
        time.sleep(fsync_seconds)
        for file in files:
            file.sync()

    monkeypatch.setattr(durability, "_sync_all", slow_sync)
    config = BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.durability": "fsync"})
    broker = Broker(config, DiskEngine(str(tmp_path / "data")))
    await broker.start()
    writers: list[asyncio.StreamWriter] = []
    try:
        topic, version = "dup-durable", 8
        broker.topics.create(topic, 1, 1, {})
        producer_id = broker.producer_ids.allocate()
        batches = [numbered_batch(producer_id, 0, sequence) for sequence in (0, 3)]

        def request(correlation_id: int, batch: bytes) -> bytes:
            header = request_header(API_PRODUCE, version, correlation_id, "dup", False)
            return frame(header + produce_body(version, topic, {0: batch}))

        first_reader, first_writer = await asyncio.open_connection("127.0.0.1", broker.port)
        retry_reader, retry_writer = await asyncio.open_connection("127.0.0.1", broker.port)
        writers += [first_writer, retry_writer]
        first_writer.write(request(1, batches[0]) + request(2, batches[1]))  # pipelined
        await first_writer.drain()
        await asyncio.sleep(fsync_seconds / 4)  # both appended, the first fsync under way
        index = 1 if retried == "latest" else 0
        retried_batch = batches[index]
        if retried == "older-cut-differently":
            retried_batch = numbered_batch(producer_id, 0, 1, count=2)
        retry_writer.write(request(3, retried_batch))
        await retry_writer.drain()
        answers: list[tuple[int, int]] = []  # (correlation id, error) in arrival order

        async def collect(reader: asyncio.StreamReader, count: int) -> None:
            for _ in range(count):
                answers.append(await read_produce_answer(reader, version))

        await asyncio.wait_for(
            asyncio.gather(collect(first_reader, 2), collect(retry_reader, 1)),
            10 * fsync_seconds,
        )
        expected = DUPLICATE_SEQUENCE_NUMBER if retried == "older-cut-differently" else NONE
        assert (3, expected) in answers
        original = answers.index((index + 1, NONE))
        assert original < answers.index((3, expected)), (
            f"the retry was confirmed before the original was durable: {answers}"
        )
    finally:
        for writer in writers:
            writer.close()
        await broker.stop()
