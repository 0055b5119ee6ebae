# tests/faults/workload.py — the clients of a fault run, as asyncio tasks using lockgate's client:
# transactional writers of unique values across topics and partitions, and a consume-transform-
# produce stage (read_committed group member + transactional producer committing its input
# offsets with group_metadata(), KIP-447). Every outcome goes to the history; every wait is
# bounded, and any failure is handled as a real application would: abort if possible, else
# drop the client and start a new instance (which fences the old one).
from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import Any

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer, Message
from lockgate.client.errors import KafkaError
from lockgate.client.producer import Producer, RecordMetadata
from lockgate.client.transactions import TransactionState
from tests.faults.history import History

log = logging.getLogger(__name__)

TOPICS = ("events-a", "events-b")
PARTITIONS = 3
# Lifecycle runs (run.py --lifecycle) add a compacted topic of keyed values; "events-b" then
# has a short retention, so its oldest committed values are deleted on purpose.
KEYED_TOPIC = "kv"
KEYS = 40
PIPE_INPUT, PIPE_OUTPUT, PIPE_GROUP = "events-a", "pipe-out", "pipe"
PIPE_WRITER = "pipe-writer"  # the stage's transactional id
TXN_TIMEOUT_MS = 5_000  # a crashed writer's transaction is aborted after this
STEP_TIMEOUT_S = 20.0  # one transaction, start to end, whatever the faults
REQUEST_TIMEOUT_MS = 5_000
ABORTABLE = frozenset(
    {TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR, TransactionState.ABORTING}
)


async def _discard(producer: Producer | None) -> None:
    if producer is not None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await producer.close()


def _outcome_seen(future: asyncio.Future[Any]) -> None:
    """A record's own outcome is not the history's: its transaction's commit or abort is. Looked
    at anyway, so that asyncio does not report failures nobody retrieved."""
    if not future.cancelled():
        future.exception()


def _commit_time(commit_started: float | None) -> dict[str, float]:
    """The field a transaction's records carry once its commit was invoked (checked against
    the times its values were read: nothing may be read before)."""
    return {} if commit_started is None else {"commit_started": commit_started}


def _offset_of(future: asyncio.Future[RecordMetadata]) -> int:
    if not future.done() or future.cancelled() or future.exception() is not None:
        return -1
    return future.result().offset


class Writer:
    """Transactions of 1-8 unique values over `topics`; 80% committed, the rest aborted. With
    `keys`, every value gets one of that many keys (for a compacted topic)."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        history: History,
        seed: int,
        topics: tuple[str, ...] = TOPICS,
        keys: int = 0,
    ) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.history = history
        self.rng = random.Random(f"{seed}-{name}")
        self.topics = topics
        self.keys = keys
        self.transactions = 0
        self.commit_started: float | None = None  # of the current transaction, once invoked

    async def run(self, stop: asyncio.Event) -> None:
        producer: Producer | None = None
        while not stop.is_set():
            number = self.transactions
            self.transactions += 1
            values: list[list[object]] = [
                [
                    f"{self.name}-{number}-{i}",
                    self.rng.choice(self.topics),
                    self.rng.randrange(PARTITIONS),
                ]
                for i in range(self.rng.randint(1, 8))
            ]
            if self.keys:
                for value in values:
                    value.append(f"k{self.rng.randrange(self.keys)}")
            commit = self.rng.random() < 0.8
            offsets: list[int] = []
            self.commit_started = None
            try:
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    if producer is None:
                        producer = Producer(
                            self.bootstrap,
                            transactional_id=self.name,
                            transaction_timeout_ms=TXN_TIMEOUT_MS,
                            linger_ms=1,
                            request_timeout_ms=REQUEST_TIMEOUT_MS,
                        )
                        await producer.start()
                        await producer.init_transactions()
                    outcome = await self._transaction(producer, number, values, commit, offsets)
            except (KafkaError, TimeoutError, OSError) as exc:
                log.info("%s: transaction %d failed: %s", self.name, number, exc)
                outcome = await self._abort_after_failure(producer)
                if outcome == "unknown":
                    await _discard(producer)
                    producer = None
                    await asyncio.sleep(0.2)
            self.history.record(
                "txn",
                producer=self.name,
                txn=number,
                values=values,
                outcome=outcome,
                **({"offsets": offsets} if outcome == "committed" else {}),
                **_commit_time(self.commit_started),
            )
        await _discard(producer)

    async def _transaction(
        self,
        producer: Producer,
        number: int,
        values: list[list[object]],
        commit: bool,
        offsets: list[int],
    ) -> str:
        """Runs one transaction; on commit, fills `offsets` with each value's offset (-1 where
        the broker answered a retry as a duplicate without one)."""
        producer.begin_transaction()
        self.history.record("txn", producer=self.name, txn=number, values=values, outcome="pending")
        sent_all = []
        for value, topic, partition, *key in values:
            sent = await producer.send(
                str(topic),
                str(value).encode(),
                str(key[0]).encode() if key else None,
                partition=int(str(partition)),
            )
            sent.add_done_callback(_outcome_seen)
            sent_all.append(sent)
        if commit:
            self.commit_started = time.time()
            self.history.record(
                "txn",
                producer=self.name,
                txn=number,
                values=values,
                outcome="pending",
                commit_started=self.commit_started,
            )
            await producer.commit_transaction(timeout_ms=10_000)
            offsets.extend(_offset_of(sent) for sent in sent_all)
            return "committed"
        await producer.abort_transaction(timeout_ms=10_000)
        return "aborted"

    async def _abort_after_failure(self, producer: Producer | None) -> str:
        if producer is None or producer.transaction_state not in ABORTABLE:
            return "unknown"  # e.g. the commit may have gone through
        try:
            async with asyncio.timeout(10):
                await producer.abort_transaction(timeout_ms=8_000)
        except (KafkaError, TimeoutError, OSError):
            return "unknown"
        return "aborted"


class Pipeline:
    """Reads PIPE_INPUT as a member of PIPE_GROUP, writes "out:<value>" to PIPE_OUTPUT on the
    same partition and commits its input offsets in the same transaction."""

    def __init__(self, bootstrap: str, history: History) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.session = 0  # one per consumer instance: a read's reader names it
        self.transactions = 0  # numbers the stage's transactions across its producers
        self.committed: dict[TopicPartition, int] = {}  # this session's last committed positions

    def _consumer(self) -> Consumer:
        return Consumer(
            self.bootstrap,
            group_id=PIPE_GROUP,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6_000,
            heartbeat_interval_ms=500,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )

    async def run(self, stop: asyncio.Event) -> None:
        consumer: Consumer | None = None
        producer: Producer | None = None
        while not stop.is_set():
            try:
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    if consumer is None or producer is None:
                        self.session += 1
                        self.committed = {}
                        consumer = self._consumer()
                        await consumer.start()
                        consumer.subscribe([PIPE_INPUT])
                        producer = Producer(
                            self.bootstrap,
                            transactional_id=PIPE_WRITER,
                            transaction_timeout_ms=TXN_TIMEOUT_MS,
                            linger_ms=1,
                            request_timeout_ms=REQUEST_TIMEOUT_MS,
                        )
                        await producer.start()
                        await producer.init_transactions()
                    await self._step(consumer, producer)
            except (KafkaError, TimeoutError, OSError) as exc:
                log.info("pipeline step failed: %s; starting over", exc)
                await _discard(producer)
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(5):
                            await consumer.close()
                consumer, producer = None, None
                await asyncio.sleep(0.2)
        await _discard(producer)
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.close()

    async def _step(self, consumer: Consumer, producer: Producer) -> None:
        batch: list[Message] = await consumer.poll(200)
        polled_at = time.time()
        positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
        # Positions also move past aborted records and markers, which poll() never returns:
        # those moves are committed alone (an offsets-only transaction) so the group's lag ends.
        if not batch and positions == self.committed:
            return
        reader = f"pipe-{self.session}"
        for message in batch:
            self.history.record(
                "read",
                reader=reader,
                topic=message.topic,
                partition=message.partition,
                offset=message.offset,
                value=(message.value or b"").decode(),
                at=polled_at,
            )
        producer.begin_transaction()
        sent_all = []
        for message in batch:
            sent = await producer.send(
                PIPE_OUTPUT, b"out:" + (message.value or b""), partition=message.partition
            )
            sent.add_done_callback(_outcome_seen)
            sent_all.append(sent)
        await producer.send_offsets_to_transaction(positions, consumer.group_metadata())
        await self._commit(producer, batch, sent_all)
        self.committed = positions

    async def _commit(
        self,
        producer: Producer,
        batch: list[Message],
        sent_all: list[asyncio.Future[RecordMetadata]],
    ) -> None:
        """Commits the step's transaction and records one with outputs as a writer's is, plus
        the inputs it consumed as "reads" (the dependency graph's read edges). An offsets-only
        one holds nothing to read; a failure before the commit leaves no record either: that
        transaction can only end aborted (the next producer instance fences it)."""
        if not batch:
            await producer.commit_transaction(timeout_ms=10_000)
            return
        number = self.transactions
        self.transactions += 1
        transaction: dict[str, Any] = {
            "producer": PIPE_WRITER,
            "txn": number,
            "values": [
                ["out:" + (message.value or b"").decode(), PIPE_OUTPUT, message.partition]
                for message in batch
            ],
            "reads": [(message.value or b"").decode() for message in batch],
            "commit_started": time.time(),
        }
        outcome = "unknown"
        try:
            await producer.commit_transaction(timeout_ms=10_000)
            outcome = "committed"
        finally:
            offsets = (
                {"offsets": [_offset_of(s) for s in sent_all]} if outcome == "committed" else {}
            )
            self.history.record("txn", **transaction, outcome=outcome, **offsets)


def all_partitions(lifecycle: bool = False) -> list[TopicPartition]:
    topics = (*TOPICS, PIPE_OUTPUT, *((KEYED_TOPIC,) if lifecycle else ()))
    return [TopicPartition(topic, p) for topic in topics for p in range(PARTITIONS)]
