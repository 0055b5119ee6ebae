"""Restarts with real clients, and leader-epoch fencing across restarts.

- A clean restart (SIGTERM) loses nothing, and a consumer that stays connected across it
  carries on with what is produced afterwards (librdkafka sees the leader epoch change).
- kill -9 while a producer with acks=all has requests in flight: after the restart every
  acknowledged message is at the offset it was acknowledged with.
- KIP-359 in lockgate: each broker start bumps every partition's leader epoch (Metadata v7+
  reports it); a Produce v9+ carrying an older CurrentLeaderEpoch tag gets
  FENCED_LEADER_EPOCH (74), a newer one UNKNOWN_LEADER_EPOCH (75), and appends nothing. No
  standard client sends the tag, so these requests are built by hand.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from lockgate.protocol.records import build_batch
from tests.support.broker import BrokerProcess
from tests.support.clients import confluent_consumer, consume_all, create_topic, position
from tests.support.kafka_wire import KafkaWire, leader_epochs, produce
from tests.support.sequences import check_partitions, sequence_of, sequence_value

pytestmark = pytest.mark.compat

PARTITIONS = 3
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
# What librdkafka may report while the broker it is connected to restarts.
EXPECTED_AROUND_RESTART = {
    KafkaError._PARTITION_EOF,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
}


def acks_all_producer(bootstrap: str, **extra: object) -> Producer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "queue.buffering.max.messages": 200_000,
    }
    config.update(extra)
    return Producer(config)


def produce_range(producer: Producer, topic: str, first: int, count: int) -> None:
    errors: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(str(error))

    for sequence in range(first, first + count):
        producer.produce(
            topic, sequence_value(sequence), partition=sequence % PARTITIONS, on_delivery=delivered
        )
        if sequence % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []


def sequences(
    received: dict[int, list[tuple[int, bytes | None]]],
) -> dict[int, list[tuple[int, int]]]:
    return {
        p: [(offset, sequence_of(value)) for offset, value in got] for p, got in received.items()
    }


def test_clean_restart_loses_nothing_and_consumers_carry_on(
    broker_process: BrokerProcess,
) -> None:
    before, after = 30_000, 3_000
    topic = "restart-clean"
    create_topic(broker_process.bootstrap, topic, PARTITIONS)
    producer = acks_all_producer(broker_process.bootstrap)
    produce_range(producer, topic, 0, before)

    # A consumer that reads everything, then stays connected across the restart.
    consumer = confluent_consumer(broker_process.bootstrap)
    live: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}

    def read(until: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while sum(map(len, live.values())) < until and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.2):
                error = message.error()
                if error is None:
                    partition, offset = position(message)
                    live[partition].append((offset, sequence_of(message.value())))
                elif error.code() not in EXPECTED_AROUND_RESTART and not error.retriable():
                    raise AssertionError(f"consumer error: {error}")

    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        read(before, 30)
        epochs_before = _epochs(broker_process.bootstrap, topic)

        assert broker_process.stop() == 0, broker_process.log()[-2000:]
        broker_process.start()

        epochs_after = _epochs(broker_process.bootstrap, topic)
        assert all(epochs_after[p] > epochs_before[p] for p in range(PARTITIONS)), (
            epochs_before,
            epochs_after,
        )
        check_partitions(
            sequences(consume_all(broker_process.bootstrap, topic, PARTITIONS, before)),
            before,
            PARTITIONS,
        )

        # The old producer reconnects by itself; new messages follow the old ones.
        produce_range(producer, topic, before, after)
        read(before + after, 60)
        check_partitions(live, before + after, PARTITIONS)
    finally:
        consumer.close()
    received = consume_all(broker_process.bootstrap, topic, PARTITIONS, before + after)
    check_partitions(sequences(received), before + after, PARTITIONS)


def test_kill_9_keeps_every_acknowledged_message(broker_process: BrokerProcess) -> None:
    topic = "restart-kill"
    create_topic(broker_process.bootstrap, topic, PARTITIONS)
    producer = acks_all_producer(broker_process.bootstrap, **{"message.timeout.ms": 30_000})
    acknowledged: dict[tuple[int, int], int] = {}  # (partition, offset) → sequence

    def delivered(error: object, message: Message) -> None:
        if error is None:
            acknowledged[position(message)] = sequence_of(message.value())

    # Keep a backlog in flight and kill the broker once enough has been acknowledged.
    sent = 0
    deadline = time.monotonic() + 60
    while len(acknowledged) < 20_000 and time.monotonic() < deadline and sent < 500_000:
        for sequence in range(sent, sent + 1000):
            producer.produce(
                topic,
                sequence_value(sequence),
                partition=sequence % PARTITIONS,
                on_delivery=delivered,
            )
        sent += 1000
        producer.poll(0.005)
    assert len(acknowledged) >= 20_000
    broker_process.kill()
    producer.purge()  # what was not acknowledged is given up (reported as purged)
    producer.flush(10)
    broker_process.start()

    received = consume_all(broker_process.bootstrap, topic, PARTITIONS, len(acknowledged))
    stored = {
        (partition, offset): sequence_of(value)
        for partition, got in received.items()
        for offset, value in got
    }
    missing = {key: value for key, value in acknowledged.items() if stored.get(key) != value}
    assert not missing, (
        f"{len(missing)} acknowledged messages lost or moved, e.g. {sorted(missing.items())[:5]}"
    )
    for partition, got in received.items():
        offsets = [offset for offset, _ in got]
        values = [sequence_of(value) for _, value in got]
        assert offsets == list(range(len(offsets))), f"partition {partition} has offset gaps"
        assert values == sorted(values) and len(set(values)) == len(values), partition
        assert all(value % PARTITIONS == partition for value in values)


def _epochs(bootstrap: str, topic: str) -> dict[int, int]:
    with KafkaWire(bootstrap) as wire:
        return leader_epochs(wire, topic)


@pytest.mark.parametrize("restart", ["clean", "kill-9"])
def test_produce_with_old_leader_epoch_is_fenced_after_restart(
    broker_process: BrokerProcess, restart: str
) -> None:
    topic = "epochs"
    create_topic(broker_process.bootstrap, topic, PARTITIONS)
    with KafkaWire(broker_process.bootstrap, client_id="epoch-test") as wire:
        old = leader_epochs(wire, topic)
        result = produce(
            wire, 9, topic, {0: build_batch([(None, b"before")])}, current_leader_epoch={0: old[0]}
        )
        assert result.only().error_code == 0

    broker_process.restart(clean=restart == "clean")

    with KafkaWire(broker_process.bootstrap, client_id="epoch-test") as wire:
        new = leader_epochs(wire, topic)
        assert all(new[p] > old[p] for p in range(PARTITIONS)), (old, new)
        expected: list[bytes | None] = [b"before"]
        for version in (9, 10, 11, 12):
            for epoch, error in (
                (old[0], FENCED_LEADER_EPOCH),
                (new[0] + 1, UNKNOWN_LEADER_EPOCH),
                (new[0] + 1000, UNKNOWN_LEADER_EPOCH),
            ):
                value = b"v%d-epoch-%d" % (version, epoch)
                result = produce(
                    wire,
                    version,
                    topic,
                    {0: build_batch([(None, value)])},
                    current_leader_epoch={0: epoch},
                )
                assert result.only().error_code == error, (version, epoch)
                assert result.only().base_offset == -1
            for epoch_tag in (None, {0: new[0]}):
                value = b"v%d-%s" % (version, b"no-tag" if epoch_tag is None else b"current")
                result = produce(
                    wire,
                    version,
                    topic,
                    {0: build_batch([(None, value)])},
                    current_leader_epoch=epoch_tag,
                )
                assert result.only().error_code == 0
                assert result.only().base_offset == len(expected)
                expected.append(value)
        # A fenced partition does not stop the others in the same request.
        batch = build_batch([(None, b"p1")])
        result = produce(
            wire, 9, topic, {0: batch, 1: batch}, current_leader_epoch={0: old[0], 1: new[1]}
        )
        errors = {r.index: r.error_code for r in result.topics[topic]}
        assert errors == {0: FENCED_LEADER_EPOCH, 1: 0}
    received = consume_all(broker_process.bootstrap, topic, PARTITIONS, len(expected) + 1)
    assert received[0] == list(enumerate(expected))
    assert received[1] == [(0, b"p1")]
    assert received[2] == []
