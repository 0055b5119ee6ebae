"""Transactions through real clients: confluent-kafka (librdkafka), kafka-python and aiokafka
transactional producers commit, abort and get fenced by a second instance of their
transactional id; read_committed consumers (confluent-kafka, kafka-python, kcat) never see
aborted records and see every committed one exactly once, in offset order; an open transaction
holds read_committed consumers and ListOffsets(latest, read_committed) at its first offset (the
last stable offset) while read_uncommitted consumers read past it.

All records carry unique values, so "exactly once" is a comparison of per-partition lists.
Producers flush before aborting: librdkafka purges unsent messages on abort, and the aborted
records must really be in the log for the read_committed checks to mean anything."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerFenced
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaError as KafkaPythonError
from kafka.errors import ProducerFencedError

from tests.support.broker import BrokerProcess
from tests.support.txn_clients import (
    PARTITIONS,
    PRODUCERS,
    TIMEOUT,
    Log,
    Plan,
    Record,
    as_log,
    confluent_transactions,
    kafka_python_transactions,
    records,
)

pytestmark = pytest.mark.compat

KCAT = shutil.which("kcat") or "kcat"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module (default settings: fsync durability); every test uses its
    own topics and transactional ids."""
    process = BrokerProcess(tmp_path_factory.mktemp("transactions") / "data").start()
    try:
        yield process
    finally:
        process.kill()


# -- topics and records ------------------------------------------------------------------------


def create_topics(bootstrap: str, *names: str) -> tuple[str, ...]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in names])
    for future in futures.values():
        future.result(TIMEOUT)
    return names


def partitions_of(topics: tuple[str, ...]) -> list[tuple[str, int]]:
    return [(topic, partition) for topic in topics for partition in range(PARTITIONS)]


def plain_produce(bootstrap: str, batch: list[Record]) -> None:
    """Non-transactional records (an idempotent producer without a transactional id)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for topic, partition, value in batch:
        producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(TIMEOUT) == 0


# -- consumers ---------------------------------------------------------------------------------


def confluent_read(bootstrap: str, topics: tuple[str, ...], isolation: str) -> Log:
    """Reads every partition from the beginning to its end (the LSO under read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"unused-{isolation}",  # required by the client; assign() uses no group
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    wanted = partitions_of(topics)
    out: Log = {key: [] for key in wanted}
    try:
        consumer.assign([TopicPartition(t, p, -2) for t, p in wanted])  # -2: beginning
        at_end: set[tuple[str, int]] = set()
        deadline = time.monotonic() + TIMEOUT
        while len(at_end) < len(wanted):
            assert time.monotonic() < deadline, f"read only {at_end} to the end"
            message = consumer.poll(0.5)
            if message is None:
                continue
            topic, partition, value = message.topic(), message.partition(), message.value()
            assert topic is not None and partition is not None
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add((topic, partition))
                continue
            assert value is not None
            out[(topic, partition)].append(value.decode())
    finally:
        consumer.close()
    return out


def kafka_python_consumer(bootstrap: str, isolation: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        request_timeout_ms=int(TIMEOUT * 1000),
    )


def kafka_python_read(bootstrap: str, topics: tuple[str, ...], isolation: str) -> Log:
    consumer = kafka_python_consumer(bootstrap, isolation)
    wanted = [KafkaTopicPartition(t, p) for t, p in partitions_of(topics)]
    out: Log = {(tp.topic, tp.partition): [] for tp in wanted}
    try:
        consumer.assign(wanted)
        consumer.seek_to_beginning(*wanted)
        ends = consumer.end_offsets(wanted)  # ListOffsets(latest) under `isolation`
        deadline = time.monotonic() + TIMEOUT
        while any(consumer.position(tp) < ends[tp] for tp in wanted):
            assert time.monotonic() < deadline, "kafka-python did not reach the end offsets"
            for tp, batch in consumer.poll(timeout_ms=200).items():
                out[(tp.topic, tp.partition)].extend(r.value.decode() for r in batch)
    finally:
        consumer.close()
    return out


def kcat_read(bootstrap: str, topics: tuple[str, ...], isolation: str) -> Log:
    out: Log = {key: [] for key in partitions_of(topics)}
    for topic in topics:
        command = [KCAT, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q"]
        command += ["-X", f"isolation.level={isolation}", "-f", "%p %s\\n"]
        done = subprocess.run(
            command,
            capture_output=True,
            timeout=TIMEOUT,
            check=True,
        )
        for line in done.stdout.decode().splitlines():
            partition, value = line.split(" ", 1)
            out[(topic, int(partition))].append(value)
    return out


CONSUMERS: dict[str, Callable[[str, tuple[str, ...], str], Log]] = {
    "confluent-kafka": confluent_read,
    "kafka-python": kafka_python_read,
    "kcat": kcat_read,
}


def end_offsets(
    bootstrap: str, topics: tuple[str, ...], isolation: str
) -> dict[tuple[str, int], int]:
    """ListOffsets(latest) through kafka-python, which sends the isolation level it is given
    (confluent-kafka's get_watermark_offsets always reports the high watermark)."""
    consumer = kafka_python_consumer(bootstrap, isolation)
    try:
        wanted = [KafkaTopicPartition(t, p) for t, p in partitions_of(topics)]
        ends = consumer.end_offsets(wanted)
        return {(tp.topic, tp.partition): int(offset) for tp, offset in ends.items()}
    finally:
        consumer.close()


# -- commit and abort from every producer ------------------------------------------------------


@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_commit_and_abort_across_two_topics_and_three_partitions(
    broker: BrokerProcess, producer: str
) -> None:
    slug = producer.replace("-", "")
    topics = create_topics(broker.bootstrap, f"commit-{slug}-a", f"commit-{slug}-b")
    first, aborted, last = (records(tag, topics) for tag in ("first", "aborted", "last"))

    PRODUCERS[producer](
        broker.bootstrap, f"commit-{slug}", [(first, True), (aborted, False), (last, True)]
    )

    assert confluent_read(broker.bootstrap, topics, "read_committed") == as_log(first + last)
    assert confluent_read(broker.bootstrap, topics, "read_uncommitted") == as_log(
        first + aborted + last
    )


# -- read_committed consumers over a log written by every producer -----------------------------


@dataclass
class MixedLog:
    topics: tuple[str, ...]
    committed: list[Record] = field(default_factory=list)
    aborted: list[Record] = field(default_factory=list)
    everything: list[Record] = field(default_factory=list)


@pytest.fixture(scope="module")
def mixed_log(broker: BrokerProcess) -> MixedLog:
    """Two topics × three partitions holding, in this order: plain records, then a committed
    and an aborted transaction from each of the three producers (alternating), then plain
    records again. Aborted transactions sit between committed data on every partition."""
    mixed = MixedLog(create_topics(broker.bootstrap, "mixed-a", "mixed-b"))

    def plain(tag: str) -> None:
        batch = records(tag, mixed.topics, per_partition=2)
        plain_produce(broker.bootstrap, batch)
        mixed.committed += batch
        mixed.everything += batch

    plain("plain-before")
    for round_number, commit_first in enumerate((True, False)):
        for name, run in PRODUCERS.items():
            slug = name.replace("-", "")
            plan: Plan = []
            for commit in (commit_first, not commit_first):
                batch = records(f"{slug}-{round_number}-{'c' if commit else 'a'}", mixed.topics)
                plan.append((batch, commit))
                (mixed.committed if commit else mixed.aborted).extend(batch)
                mixed.everything += batch
            run(broker.bootstrap, f"mixed-{slug}", plan)
    plain("plain-after")
    return mixed


@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_read_committed_consumer_sees_each_committed_record_once(
    broker: BrokerProcess, mixed_log: MixedLog, consumer: str
) -> None:
    seen = CONSUMERS[consumer](broker.bootstrap, mixed_log.topics, "read_committed")

    values = [value for partition_values in seen.values() for value in partition_values]
    assert not set(values) & {value for _, _, value in mixed_log.aborted}
    assert len(values) == len(mixed_log.committed)
    assert seen == as_log(mixed_log.committed)  # each once, in offset order


@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_read_uncommitted_consumer_sees_aborted_records_too(
    broker: BrokerProcess, mixed_log: MixedLog, consumer: str
) -> None:
    seen = CONSUMERS[consumer](broker.bootstrap, mixed_log.topics, "read_uncommitted")

    assert seen == as_log(mixed_log.everything)


# -- fencing -----------------------------------------------------------------------------------


def confluent_fencing(bootstrap: str, transactional_id: str, topics: tuple[str, ...]) -> None:
    first = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    first.init_transactions(TIMEOUT)
    first.begin_transaction()
    for topic, partition, value in records("zombie", topics, per_partition=1):
        first.produce(topic, value=value.encode(), partition=partition)
    assert first.flush(TIMEOUT) == 0

    confluent_transactions(
        bootstrap, transactional_id, [(records("successor", topics, per_partition=1), True)]
    )

    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(TIMEOUT)
    error: KafkaError = raised.value.args[0]
    assert error.fatal(), error
    assert error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), error


def kafka_python_fencing(bootstrap: str, transactional_id: str, topics: tuple[str, ...]) -> None:
    first = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    try:
        first.init_transactions()
        first.begin_transaction()
        for topic, partition, value in records("zombie", topics, per_partition=1):
            first.send(topic, value=value.encode(), partition=partition).get(TIMEOUT)

        kafka_python_transactions(
            bootstrap, transactional_id, [(records("successor", topics, per_partition=1), True)]
        )

        with pytest.raises(ProducerFencedError):
            first.commit_transaction()
        with pytest.raises(KafkaPythonError):  # and it cannot produce any more
            first.send(topics[0], value=b"after-fencing", partition=0).get(TIMEOUT)
    finally:
        first.close(timeout=5)


def aiokafka_fencing(bootstrap: str, transactional_id: str, topics: tuple[str, ...]) -> None:
    async def run() -> None:
        first = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
        await asyncio.wait_for(first.start(), TIMEOUT)
        try:
            await first.begin_transaction()
            for topic, partition, value in records("zombie", topics, per_partition=1):
                await asyncio.wait_for(
                    first.send_and_wait(topic, value=value.encode(), partition=partition), TIMEOUT
                )
            successor = AIOKafkaProducer(
                bootstrap_servers=bootstrap, transactional_id=transactional_id
            )
            await asyncio.wait_for(successor.start(), TIMEOUT)
            try:
                await successor.begin_transaction()
                for topic, partition, value in records("successor", topics, per_partition=1):
                    await asyncio.wait_for(
                        successor.send_and_wait(topic, value=value.encode(), partition=partition),
                        TIMEOUT,
                    )
                await asyncio.wait_for(successor.commit_transaction(), TIMEOUT)
            finally:
                await asyncio.wait_for(successor.stop(), TIMEOUT)
            with pytest.raises(ProducerFenced):
                await asyncio.wait_for(first.commit_transaction(), TIMEOUT)
        finally:
            await asyncio.wait_for(first.stop(), TIMEOUT)

    asyncio.run(run())


FENCING: dict[str, Callable[[str, str, tuple[str, ...]], None]] = {
    "confluent-kafka": confluent_fencing,
    "kafka-python": kafka_python_fencing,
    "aiokafka": aiokafka_fencing,
}


@pytest.mark.parametrize("producer", list(FENCING))
def test_second_instance_fences_the_first_and_aborts_its_transaction(
    broker: BrokerProcess, producer: str
) -> None:
    """The first instance has records in an open transaction when a second instance with the
    same transactional id initialises: the coordinator bumps the epoch and aborts the open
    transaction, the second commits its own, and the first's commit fails as fenced."""
    slug = producer.replace("-", "")
    topics = create_topics(broker.bootstrap, f"fence-{slug}-a", f"fence-{slug}-b")

    FENCING[producer](broker.bootstrap, f"fence-{slug}", topics)

    successor = records("successor", topics, per_partition=1)
    zombie = records("zombie", topics, per_partition=1)
    assert confluent_read(broker.bootstrap, topics, "read_committed") == as_log(successor)
    assert confluent_read(broker.bootstrap, topics, "read_uncommitted") == as_log(
        zombie + successor
    )


# -- an open transaction and the last stable offset --------------------------------------------


def test_open_transaction_holds_read_committed_at_the_last_stable_offset(
    broker: BrokerProcess,
) -> None:
    topics = create_topics(broker.bootstrap, "open-a", "open-b")
    before = records("before", topics, per_partition=2)
    plain_produce(broker.bootstrap, before)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "open"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    pending = records("pending", topics, per_partition=2)
    for topic, partition, value in pending:
        producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(TIMEOUT) == 0
    # Committed (non-transactional) records behind the open transaction are held back too.
    after = records("after", topics, per_partition=2)
    plain_produce(broker.bootstrap, after)

    lso = {key: len(values) for key, values in as_log(before).items()}
    high_watermark = {key: len(values) for key, values in as_log(before + pending + after).items()}
    assert end_offsets(broker.bootstrap, topics, "read_committed") == lso
    assert end_offsets(broker.bootstrap, topics, "read_uncommitted") == high_watermark
    for name, read in CONSUMERS.items():
        assert read(broker.bootstrap, topics, "read_committed") == as_log(before), name
        assert read(broker.bootstrap, topics, "read_uncommitted") == as_log(
            before + pending + after
        ), name

    producer.commit_transaction(TIMEOUT)

    committed = as_log(before + pending + after)
    for name, read in CONSUMERS.items():
        assert read(broker.bootstrap, topics, "read_committed") == committed, name
    ends = end_offsets(broker.bootstrap, topics, "read_committed")
    assert ends == end_offsets(broker.bootstrap, topics, "read_uncommitted")
    # One commit marker per partition after the data.
    assert ends == {key: offset + 1 for key, offset in high_watermark.items()}
