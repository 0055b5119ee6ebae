"""lockgate's own producer against a real broker: idempotence (duplicates of resent batches
suppressed, epoch bump on sequence overflow), KIP-359 leader epochs (stale metadata after a
restart refreshed transparently), transactions through both protocols (classic and TV2) as
confluent-kafka read_committed consumers see them, fencing by a second instance, KIP-447 group
metadata, KIP-939 prepare / crash / complete, the sync facade, and murmur2 partitioning shared
with librdkafka.

Most tests use an in-process broker on the test's event loop, so every blocking client
(confluent-kafka, the sync facade) runs in a thread via asyncio.to_thread."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from lockgate.client.cluster import PartitionInfo, TopicPartition
from lockgate.client.errors import (
    ErrorCode,
    InvalidTxnStateError,
    KafkaError,
    MessageTooLargeError,
    ProducerFencedError,
    TransactionAbortableError,
)
from lockgate.client.partitioner import partition_for_key
from lockgate.client.producer import Producer
from lockgate.client.sync import DeliveredMessage
from lockgate.client.sync import Producer as SyncProducer
from lockgate.client.transactions import (
    ConsumerGroupMetadata,
    PreparedTxnState,
    TransactionAbortedError,
    TransactionState,
)
from lockgate.config.properties import BrokerConfig
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.support.broker import BrokerProcess
from tests.support.fault_proxy import Direction, FaultProxy

TIMEOUT = 20.0
SETTINGS = {
    "lockgate.durability": "page-cache",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.two.phase.commit.enable": "true",
}
# partitions forget a producer idle for 300 ms (checked every 100 ms)
FORGETFUL = {"producer.id.expiration.ms": "300", "producer.id.expiration.check.interval.ms": "100"}
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"


async def start_broker(extra: dict[str, str] | None = None) -> Broker:
    broker = Broker(
        BrokerConfig({"listeners": "127.0.0.1:0", **SETTINGS, **(extra or {})}), MemoryEngine()
    )
    await broker.start()
    for _ in range(500):
        if broker.transactions.loaded:
            break
        await asyncio.sleep(0.01)
    return broker


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    instance = await start_broker()
    try:
        yield instance
    finally:
        await instance.stop()


def bootstrap(broker: Broker) -> str:
    return f"127.0.0.1:{broker.port}"


def read(
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    expected: int,
    *,
    read_committed: bool = True,
    settle: float = 0.5,
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(partition, key, value) of every record a confluent-kafka consumer reads from the
    beginning: until `expected` records came, then `settle` seconds more to catch extras."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )
    try:
        consumer.assign(
            [ConfluentTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        records: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + TIMEOUT
        quiet_until: float | None = None
        while time.monotonic() < deadline:
            if len(records) >= expected:
                quiet_until = quiet_until or time.monotonic() + settle
                if time.monotonic() >= quiet_until:
                    break
            message = consumer.poll(0.1)
            if message is None or message.error() is not None:
                continue
            partition = message.partition()
            assert partition is not None
            records.append((partition, message.key(), message.value()))
        return records
    finally:
        consumer.close()


def values(records: list[tuple[int, bytes | None, bytes | None]]) -> list[bytes | None]:
    return [value for _partition, _key, value in records]


# -- idempotence -------------------------------------------------------------------------------


async def test_resent_batches_are_not_appended_twice(
    proxied_memory_broker: Broker, fault_proxy: FaultProxy
) -> None:
    """Five batches in flight; the answer to the first is lost, so the connection gets out of
    step and every batch is resent with its sequence: the broker answers each copy it already
    has with the original's offset (the latest batch from producer state, the older ones
    found in the log), so every record reports the offset it is read at."""
    proxied_memory_broker.topics.create("dedup", 1, 1, {})
    lost = fault_proxy.drop(Direction.RESPONSE, api_keys=[0], limit=1)
    async with Producer(
        fault_proxy.address, batch_size=256, linger_ms=0, retry_backoff_ms=50
    ) as producer:
        futures = [
            await producer.send("dedup", f"record-{i:03d}".encode() + b"." * 60) for i in range(30)
        ]
        await asyncio.wait_for(producer.flush(), TIMEOUT)
        delivered = [f.result() for f in futures]
        stats = producer.stats
    assert lost.applied == 1
    assert stats.retries >= 2, stats
    assert stats.duplicates == 0, stats  # no DUPLICATE_SEQUENCE_NUMBER: no offset -1
    records = await asyncio.to_thread(read, fault_proxy.address, "dedup", 1, 30)
    assert values(records) == [f"record-{i:03d}".encode() + b"." * 60 for i in range(30)]
    assert [m.offset for m in delivered] == list(range(30))  # record i is read at offset i


async def test_sequence_overflow_bumps_the_epoch_instead_of_wrapping(broker: Broker) -> None:
    broker.topics.create("overflow", 1, 1, {})
    async with Producer(bootstrap(broker), linger_ms=0, sequence_overflow_threshold=9) as producer:
        identities = []
        for i in range(25):
            await producer.send_and_wait("overflow", f"{i}".encode())
            identities.append(producer.identity)
        assert producer.stats.sequence_overflows == 2
        assert producer.stats.epoch_bumps == 2
    # sequences 0-9 under each of three identities (the broker gives an idempotent producer a
    # fresh producer id for a bump)
    assert [len(list(group)) for _identity, group in itertools.groupby(identities)] == [10, 10, 5]
    log = broker.topics.get("overflow", 0)
    assert log is not None and log.high_watermark == 25
    records = await asyncio.to_thread(read, bootstrap(broker), "overflow", 1, 25)
    assert values(records) == [f"{i}".encode() for i in range(25)]


async def until_producers_forgotten(broker: Broker, topic: str) -> None:
    """Waits (10 s at most) until partition 0 of `topic` has forgotten every producer."""
    log = broker.topics.get(topic, 0)
    assert log is not None
    deadline = time.monotonic() + 10
    while len(log.producers):
        assert time.monotonic() < deadline, "the producer state did not expire"
        await asyncio.sleep(0.05)


async def test_unknown_producer_id_after_expiry_bumps_the_epoch(forgetful_broker: Broker) -> None:
    """KIP-360: the broker forgot the producer (its state expired), so a batch at a sequence
    above 0 gets UNKNOWN_PRODUCER_ID; the producer bumps its epoch, renumbers and resends."""
    forgetful_broker.topics.create("expiring", 1, 1, {})
    async with Producer(bootstrap(forgetful_broker), linger_ms=0) as producer:
        for i in range(3):
            await producer.send_and_wait("expiring", f"{i}".encode())
        before = producer.identity
        await until_producers_forgotten(forgetful_broker, "expiring")
        for i in range(3, 6):
            await asyncio.wait_for(producer.send_and_wait("expiring", f"{i}".encode()), 10)
        assert producer.identity != before
        assert producer.stats.epoch_bumps == 1, producer.stats
    records = await asyncio.to_thread(read, bootstrap(forgetful_broker), "expiring", 1, 6)
    assert values(records) == [f"{i}".encode() for i in range(6)]


# -- KIP-359 -----------------------------------------------------------------------------------


async def test_newer_leader_epoch_than_the_broker_is_refreshed(broker: Broker) -> None:
    """UNKNOWN_LEADER_EPOCH (the client believes in an epoch the leader has not reached):
    refresh the metadata, resend."""
    broker.topics.create("epochs", 2, 1, {})
    async with Producer(bootstrap(broker), linger_ms=0) as producer:
        await producer.send_and_wait("epochs", b"before", partition=1)
        info = producer.cluster.metadata.topics["epochs"]
        real = info.partitions[1].leader_epoch
        assert real >= 0
        _replace_partition(producer, "epochs", replace(info.partitions[1], leader_epoch=real + 3))
        metadata = await producer.send_and_wait("epochs", b"after", partition=1)
        assert metadata.offset == 1
        assert producer.stats.leader_epoch_refreshes == 1
        assert producer.cluster.metadata.topics["epochs"].partitions[1].leader_epoch == real


def _replace_partition(producer: Producer, topic: str, partition: PartitionInfo) -> None:
    metadata = producer.cluster.metadata
    info = metadata.topics[topic]
    partitions = tuple(
        partition if p.partition == partition.partition else p for p in info.partitions
    )
    topics = {**metadata.topics, topic: replace(info, partitions=partitions)}
    producer.cluster.metadata = replace(metadata, topics=topics)


def state_of(producer: Producer) -> TransactionState | None:
    return producer.transaction_state


async def test_leader_epoch_fencing_after_a_restart_is_transparent(tmp_path: Path) -> None:
    """A restart re-establishes leadership with a new epoch; the producer's metadata still has
    the old one, so its next Produce gets FENCED_LEADER_EPOCH, refreshes and resends, and the
    idempotent sequence carries on across the restart."""
    process = BrokerProcess(tmp_path / "data", settings={"num.partitions": "1"}).start()
    try:
        async with Producer(process.bootstrap, linger_ms=0, retry_backoff_ms=50) as producer:
            for i in range(5):
                await producer.send_and_wait("restarted", f"{i}".encode())
            before = producer.cluster.metadata.topics["restarted"].partitions[0].leader_epoch
            await asyncio.to_thread(process.restart)
            for i in range(5, 10):
                await asyncio.wait_for(
                    producer.send_and_wait("restarted", f"{i}".encode()), TIMEOUT
                )
            after = producer.cluster.metadata.topics["restarted"].partitions[0].leader_epoch
            assert after > before
            assert producer.stats.leader_epoch_refreshes >= 1, producer.stats
        records = await asyncio.to_thread(read, process.bootstrap, "restarted", 1, 10)
        assert values(records) == [f"{i}".encode() for i in range(10)]
    finally:
        process.kill()


# -- transactions ------------------------------------------------------------------------------


@pytest.mark.parametrize("transaction_version", [None, 1], ids=["tv2", "classic"])
async def test_commit_and_abort_as_read_committed_consumers_see_them(
    broker: Broker, transaction_version: int | None
) -> None:
    topic, source = unique("txn"), unique("source")
    broker.topics.create(topic, 3, 1, {})
    broker.topics.create(source, 1, 1, {})
    transactional_id = unique("producer")
    group = unique("group")
    async with Producer(
        bootstrap(broker),
        transactional_id=transactional_id,
        transaction_version=transaction_version,
        linger_ms=2,
        max_block_ms=15_000,
    ) as producer:
        await producer.init_transactions()
        assert producer.uses_transaction_version_2 is (transaction_version is None)
        epochs = []
        for round_number, commit in enumerate([True, False, True]):
            producer.begin_transaction()
            for i in range(6):
                await producer.send(topic, f"{round_number}-{i}".encode(), f"k{i}".encode())
            if commit:
                await producer.send_offsets_to_transaction(
                    {TopicPartition(source, 0): 10 * (round_number + 1)},
                    ConsumerGroupMetadata(group),
                )
                await producer.commit_transaction()
            else:
                await producer.flush()  # the aborted records must really be in the log
                await producer.abort_transaction()
            meta = broker.transactions.txns[transactional_id]
            epochs.append(meta.producer_epoch)
            identity = producer.identity
            assert identity is not None
            assert (identity.producer_id, identity.producer_epoch) == (
                meta.producer_id,
                meta.producer_epoch,
            )
        assert producer.stats.transactions_committed == 2
        assert producer.stats.transactions_aborted == 1
    meta = broker.transactions.txns[transactional_id]
    if transaction_version is None:
        # EndTxn v5: every commit and abort bumped the epoch and handed it back
        assert epochs == [epochs[0], epochs[0] + 1, epochs[0] + 2]
        assert meta.client_transaction_version == 2
    else:
        assert epochs == [epochs[0]] * 3
        assert meta.client_transaction_version == 0

    records = await asyncio.to_thread(read, bootstrap(broker), topic, 3, 12)
    seen = sorted(values(records), key=lambda v: v or b"")
    assert seen == sorted(f"{r}-{i}".encode() for r in (0, 2) for i in range(6))
    everything = await asyncio.to_thread(
        read, bootstrap(broker), topic, 3, 18, read_committed=False
    )
    assert len(everything) == 18  # the aborted ones were written, and are hidden

    def committed() -> int:
        consumer = Consumer({"bootstrap.servers": bootstrap(broker), "group.id": group})
        try:
            (answer,) = consumer.committed([ConfluentTopicPartition(source, 0)], TIMEOUT)
            return int(answer.offset)
        finally:
            consumer.close()

    assert await asyncio.to_thread(committed) == 30  # the aborted transaction's 20 is gone


async def test_a_second_instance_fences_the_first(broker: Broker) -> None:
    topic = unique("fenced")
    broker.topics.create(topic, 1, 1, {})
    transactional_id = unique("shared")
    first = Producer(bootstrap(broker), transactional_id=transactional_id, linger_ms=0)
    second = Producer(bootstrap(broker), transactional_id=transactional_id, linger_ms=0)
    await first.start()
    await second.start()
    try:
        await first.init_transactions()
        first.begin_transaction()
        await first.send_and_wait(topic, b"zombie")
        await second.init_transactions()  # aborts the first one's transaction
        second.begin_transaction()
        await second.send_and_wait(topic, b"live")

        with pytest.raises(ProducerFencedError):
            await first.commit_transaction()
        assert state_of(first) is TransactionState.FATAL_ERROR
        with pytest.raises(ProducerFencedError):
            first.begin_transaction()
        with pytest.raises(ProducerFencedError):
            await first.send(topic, b"more")
        with pytest.raises(ProducerFencedError):
            await first.abort_transaction()

        await second.commit_transaction()
    finally:
        await first.close()
        await second.close()
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 1, 1)
    assert values(records) == [b"live"]


async def test_group_metadata_fences_a_consumer_that_left_its_group(broker: Broker) -> None:
    """KIP-447: TxnOffsetCommit v3+ carries generation and member id; a member the group does
    not know cannot commit, and only an abort gets the producer going again."""
    topic, source = unique("zombie-output"), unique("input")
    broker.topics.create(topic, 1, 1, {})
    broker.topics.create(source, 1, 1, {})
    async with Producer(bootstrap(broker), transactional_id=unique("eos"), linger_ms=0) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send_and_wait(topic, b"from a zombie")
        with pytest.raises(KafkaError) as refused:
            await producer.send_offsets_to_transaction(
                {TopicPartition(source, 0): 5},
                ConsumerGroupMetadata(unique("group"), 7, "left-long-ago", None),
            )
        assert refused.value.code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation)
        assert state_of(producer) is TransactionState.ABORTABLE_ERROR
        with pytest.raises(type(refused.value)):
            await producer.commit_transaction()
        await producer.abort_transaction()
        producer.begin_transaction()
        await producer.send_and_wait(topic, b"after the abort")
        await producer.commit_transaction()
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 1, 1)
    assert values(records) == [b"after the abort"]


async def test_overflow_inside_a_classic_transaction_aborts_then_bumps(broker: Broker) -> None:
    """KAFKA-12207 for a transactional producer on the classic protocol (sequences go on
    across transactions): no bump is possible mid-transaction, so the transaction must abort;
    the abort is followed by an InitProducerId epoch bump and sequences restart at 0."""
    topic = unique("txn-overflow")
    broker.topics.create(topic, 1, 1, {})
    transactional_id = unique("overflowing")
    async with Producer(
        bootstrap(broker),
        transactional_id=transactional_id,
        transaction_version=1,
        linger_ms=0,
        sequence_overflow_threshold=9,
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for i in range(8):
            await producer.send_and_wait(topic, f"a{i}".encode())
        await producer.commit_transaction()
        epoch = broker.transactions.txns[transactional_id].producer_epoch

        producer.begin_transaction()
        await producer.send_and_wait(topic, b"b0")
        await producer.send_and_wait(topic, b"b1")  # sequence 9, the last one allowed
        doomed = await producer.send(topic, b"b2")
        with pytest.raises(TransactionAbortableError):
            await doomed
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        await producer.abort_transaction()
        assert broker.transactions.txns[transactional_id].producer_epoch == epoch + 1
        assert producer.stats.epoch_bumps == 1

        producer.begin_transaction()
        await producer.send_and_wait(topic, b"c0")  # sequence 0 of the new epoch
        await producer.commit_transaction()
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 1, 9)
    assert values(records) == [f"a{i}".encode() for i in range(8)] + [b"c0"]


# -- KIP-939 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("decision", ["commit", "abort"])
async def test_prepared_transaction_survives_a_crash_and_completes(
    broker: Broker, decision: str
) -> None:
    topic = unique("two-phase")
    broker.topics.create(topic, 2, 1, {})
    transactional_id = unique("participant")
    crashed = Producer(bootstrap(broker), transactional_id=transactional_id, linger_ms=0)
    await crashed.start()
    await crashed.init_transactions(enable_2pc=True)
    crashed.begin_transaction()
    for i in range(4):
        await crashed.send(topic, f"prepared-{i}".encode(), partition=i % 2)
    prepared = await crashed.prepare_transaction()
    assert state_of(crashed) is TransactionState.PREPARED
    identity = crashed.identity
    assert identity is not None
    assert (prepared.producer_id, prepared.epoch) == (
        identity.producer_id,
        identity.producer_epoch,
    )
    saved = prepared.to_json()  # what the external transaction manager keeps
    await crashed.close()  # gone without EndTxn: the transaction stays open

    # 2PC transactions are exempt from the timeout: still open after the abort sweep
    assert await broker.transactions.abort_timed_out() == 0
    assert broker.transactions.txns[transactional_id].state.name == "ONGOING"

    async with Producer(bootstrap(broker), transactional_id=transactional_id) as recovered:
        await recovered.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        assert state_of(recovered) is TransactionState.PREPARED
        with pytest.raises(InvalidTxnStateError):
            recovered.begin_transaction()
        decided = (
            PreparedTxnState.from_json(saved)
            if decision == "commit"
            else PreparedTxnState(prepared.producer_id, prepared.epoch - 1)
        )
        await recovered.complete_transaction(decided)
        assert state_of(recovered) is TransactionState.READY
        # and the producer goes on with ordinary transactions
        recovered.begin_transaction()
        await recovered.send(topic, b"next", partition=0)
        await recovered.commit_transaction()

    expected = [f"prepared-{i}".encode() for i in range(4)] if decision == "commit" else []
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 2, len(expected) + 1)
    assert sorted(v or b"" for v in values(records)) == sorted([*expected, b"next"])


async def test_prepare_and_complete_in_the_same_instance(broker: Broker) -> None:
    topic = unique("two-phase-live")
    broker.topics.create(topic, 1, 1, {})
    async with Producer(
        bootstrap(broker), transactional_id=unique("live"), linger_ms=0
    ) as producer:
        await producer.init_transactions(enable_2pc=True)
        for value, decide in ((b"first", "commit"), (b"second", "abort")):
            producer.begin_transaction()
            await producer.send(topic, value)
            prepared = await producer.prepare_transaction()
            with pytest.raises(InvalidTxnStateError):
                await producer.send(topic, b"too late")
            other = PreparedTxnState(prepared.producer_id, prepared.epoch + 1)
            await producer.complete_transaction(prepared if decide == "commit" else other)
            assert state_of(producer) is TransactionState.READY
        assert producer.stats.transactions_committed == 1
        assert producer.stats.transactions_aborted == 1
    everything = await asyncio.to_thread(read, bootstrap(broker), topic, 1, 2, read_committed=False)
    assert values(everything) == [b"first", b"second"]
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 1, 1)
    assert values(records) == [b"first"]


async def test_completing_with_nothing_kept_is_a_no_op(broker: Broker) -> None:
    transactional_id = unique("nothing-open")
    async with Producer(bootstrap(broker), transactional_id=transactional_id) as producer:
        await producer.init_transactions()
        with pytest.raises(InvalidTxnStateError):  # neither prepared nor kept
            await producer.complete_transaction(PreparedTxnState(1, 0))
        with pytest.raises(InvalidTxnStateError):  # prepare needs two-phase commit
            producer.begin_transaction()
            await producer.prepare_transaction()
        await producer.abort_transaction()
    async with Producer(bootstrap(broker), transactional_id=transactional_id) as producer:
        await producer.init_transactions(keep_prepared_txn=True, enable_2pc=True)
        assert state_of(producer) is TransactionState.READY
        meta_before = broker.transactions.txns[transactional_id]
        await producer.complete_transaction(PreparedTxnState(1, 0))  # -1/-1 answered: no-op
        assert broker.transactions.txns[transactional_id] == meta_before
        producer.begin_transaction()  # an ordinary producer from here on
        await producer.abort_transaction()


# -- sync facade and interoperability ----------------------------------------------------------


async def test_sync_facade_transactions(broker: Broker) -> None:
    topic = unique("sync")
    broker.topics.create(topic, 2, 1, {})

    def run() -> list[tuple[str, int, int, KafkaError | None]]:
        delivered: list[tuple[str, int, int, KafkaError | None]] = []

        def report(error: KafkaError | None, message: DeliveredMessage) -> None:
            delivered.append((message.topic(), message.partition(), message.offset(), error))

        with SyncProducer(
            {"bootstrap.servers": bootstrap(broker), "transactional.id": unique("sync")}
        ) as producer:
            producer.init_transactions(TIMEOUT)
            producer.begin_transaction()
            for i in range(5):
                producer.produce(topic, f"kept-{i}", key=f"k{i}", on_delivery=report)
            assert len(producer) == 5
            assert producer.flush(TIMEOUT) == 0
            producer.commit_transaction(TIMEOUT)
            producer.begin_transaction()
            producer.produce(topic, b"dropped", partition=0, on_delivery=report)
            producer.abort_transaction(TIMEOUT)
            assert producer.flush(TIMEOUT) == 0
        return delivered

    delivered = await asyncio.to_thread(run)
    assert [error for *_, error in delivered[:5]] == [None] * 5
    assert sorted(offset for _t, _p, offset, _e in delivered[:5]) == sorted(
        offset for _t, _p, offset, _e in delivered[:5] if offset >= 0
    )
    assert len(delivered) == 6
    assert isinstance(delivered[5][3], TransactionAbortedError)
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 2, 5)
    assert sorted(v or b"" for v in values(records)) == [f"kept-{i}".encode() for i in range(5)]


async def test_aborting_fails_the_records_not_yet_sent(broker: Broker) -> None:
    topic = unique("unsent")
    broker.topics.create(topic, 1, 1, {})
    async with Producer(
        bootstrap(broker), transactional_id=unique("unsent"), linger_ms=60_000
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        queued = await producer.send(topic, b"never sent")  # lingers
        await producer.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            await queued
        assert state_of(producer) is TransactionState.READY


async def test_keys_land_where_librdkafka_puts_them(broker: Broker) -> None:
    topic = unique("murmur2")
    broker.topics.create(topic, 7, 1, {})
    keys = [f"customer-{i}".encode() for i in range(40)] + [b"", b"\xff\x00\x80"]
    async with Producer(bootstrap(broker), linger_ms=2) as producer:
        futures = [await producer.send(topic, b"lockgate", key) for key in keys]
        await producer.flush()
        ours = {key: f.result().partition for key, f in zip(keys, futures, strict=True)}

    def confluent_partitions() -> dict[bytes, int]:
        placed: dict[bytes, int] = {}
        producer = ConfluentProducer(
            {"bootstrap.servers": bootstrap(broker), "partitioner": "murmur2_random"}
        )
        for key in keys:

            def delivered(error: object, message: object, key: bytes = key) -> None:
                assert error is None, error
                placed[key] = message.partition()  # type: ignore[attr-defined]

            producer.produce(topic, b"librdkafka", key, on_delivery=delivered)
        assert producer.flush(TIMEOUT) == 0
        return placed

    theirs = await asyncio.to_thread(confluent_partitions)
    assert ours == theirs
    assert ours == {key: partition_for_key(key, 7) for key in keys}
    # and librdkafka reads what lockgate wrote, on those partitions
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 7, 2 * len(keys))
    ours_read = {key: partition for partition, key, value in records if value == b"lockgate"}
    assert ours_read == ours


# -- send_batch --------------------------------------------------------------------------------


async def test_send_batch_delivers_every_record_in_order_behind_one_future(broker: Broker) -> None:
    """More records than one batch and than the 1001-sequence window of a partition, keyed and
    unkeyed: results in call order, keys on librdkafka's partitions, offsets rising per
    partition, and everything readable once in order."""
    topic = unique("batch")
    broker.topics.create(topic, 3, 1, {})
    keyed = [(f"key-{i % 50}".encode(), f"keyed-{i}".encode()) for i in range(2_500)]
    unkeyed: list[tuple[bytes | None, bytes | None]] = [
        (None, f"unkeyed-{i}".encode()) for i in range(30)
    ]
    async with Producer(bootstrap(broker), linger_ms=2, batch_size=4_096) as producer:
        first = await producer.send_batch(topic, keyed)
        second = await producer.send_batch(topic, unkeyed)
        pinned = await producer.send_batch(topic, [(b"k", b"pinned")], partition=2)
        empty = await producer.send_batch(topic, [])
        results = await asyncio.wait_for(first, TIMEOUT)
        spread = await asyncio.wait_for(second, TIMEOUT)
        assert [m.partition for m in await pinned] == [2]
        assert await empty == []
    assert [m.partition for m in results] == [partition_for_key(k, 3) for k, _v in keyed]
    assert {m.partition for m in spread} == {0, 1, 2}
    for partition in range(3):
        offsets = [m.offset for m in results + spread if m.partition == partition]
        assert offsets == sorted(set(offsets)) and offsets[0] == 0
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 3, 2_531)
    assert len(records) == 2_531
    for partition in range(3):
        sent = [v for k, v in keyed if k is not None and partition_for_key(k, 3) == partition]
        read_back = [v for p, _k, v in records if p == partition and v and v.startswith(b"k")]
        assert read_back == sent


async def test_send_batch_refuses_an_oversized_record_before_queuing_any(broker: Broker) -> None:
    topic = unique("batch-too-large")
    broker.topics.create(topic, 1, 1, {})
    async with Producer(bootstrap(broker), max_request_size=1_000) as producer:
        with pytest.raises(MessageTooLargeError):
            await producer.send_batch(topic, [(None, b"small"), (None, b"x" * 2_000)])
        assert (await producer.send_and_wait(topic, b"after")).offset == 0


async def test_send_batch_in_transactions(broker: Broker) -> None:
    """An abort fails the whole group that was still lingering; a commit makes it visible."""
    topic = unique("batch-txn")
    broker.topics.create(topic, 2, 1, {})
    batch = [(str(i).encode(), f"value-{i}".encode()) for i in range(200)]
    async with Producer(
        bootstrap(broker), transactional_id=unique("batch-txn"), linger_ms=60_000
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        aborted = await producer.send_batch(topic, [(k, b"aborted") for k, _v in batch])
        await producer.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            await aborted
        producer.begin_transaction()
        committed = await producer.send_batch(topic, batch)
        await producer.commit_transaction()
        assert len(await committed) == 200
    records = await asyncio.to_thread(read, bootstrap(broker), topic, 2, 200)
    assert sorted(v or b"" for v in values(records)) == sorted(v for _k, v in batch)
