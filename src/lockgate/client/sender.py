# client/sender.py — the producer's sender: one task that turns the records the accumulator
# queued per partition into batches, writes the Produce requests, and handles their answers
# (completion, retries, epoch bumps). The Producer (producer.py) owns one, starts and stops it,
# and talks to it through the methods in "The producer's side" below; its API (send, send_batch,
# flush, transactions) stays in producer.py.
#
# Invariants:
# - What to send is decided by one synchronous pass over the queues (_send_ready), run by the
#   sender task and, right after an answer is handled, by the answer's callback (_pump) — never
#   two at once, all on the loop: a partition's batches go on the wire in sequence order, and a
#   broker applies the requests of one connection in order, so pipelining keeps the order.
#   Answers are handled by callbacks from the connection's reader, not by a task per request.
# - A batch that cannot grow any more (its bytes, or an idempotent partition's window of
#   sequences, below) goes without waiting for its linger, and an idempotent partition never
#   sends a runt that its window has room for: it waits for the acknowledgement that frees a
#   whole batch's worth. A request that goes to a leader anyway takes along what the leader's
#   other partitions have waiting for their linger (fewer requests, partitions in step).
# - An answer's callback completes its batches' records only after it has written the next
#   batches: the broker works on those meanwhile.
# - Idempotent producers keep up to `max_in_flight` (≤ 5) batches in flight per partition,
#   spanning at most 1001 sequence numbers (the broker's duplicate window, see sequences.py).
#   When a batch has to be resent, its partition first lets everything in flight come back,
#   then resends the failed batches one at a time, in sequence order, before pipelining again.
#   Resent batches keep their sequence, so the broker recognises copies that it had already
#   appended and answers them with the original offsets (an earlier batch is looked up in its
#   log); DUPLICATE_SEQUENCE_NUMBER, for a copy whose original is no longer there, counts as
#   delivered with offset -1.
# - A non-idempotent producer has one batch in flight per partition (records keep their order
#   across retries, but a retry after a lost answer may append a batch twice: at least once).
# - Sequence numbers never wrap (KAFKA-12207): an idempotent producer bumps its epoch when a
#   partition would pass `sequence_overflow_threshold`; an epoch bump (also after
#   OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID for the batch the broker should accept
#   next, KIP-360) waits until nothing is in flight, calls InitProducerId with the current id
#   and epoch and renumbers every unacknowledged batch from 0. A batch whose earlier attempt
#   had an unknown outcome (a lost answer) and is renumbered can then be appended twice; the
#   Java client has the same limit.
# - Every Produce partition carries the leader epoch from the producer's metadata (lockgate's
#   KIP-359 tag, Produce v9+); FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH refresh the
#   metadata and resend.
# - Transactional producers never bump mid-transaction: an overflow there makes the transaction
#   abortable, and (classic protocol) the producer bumps after the abort (`sequence_gap`).
# - Every record's future completes: with its offset, with the batch's error, or with the last
#   retriable error once its delivery timeout has passed.
from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import itertools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple

from lockgate.client import fastpath
from lockgate.client.batches import NON_IDEMPOTENT, ProducerIdentity, build_framed_batch
from lockgate.client.cluster import Cluster, PartitionInfo, TopicPartition
from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import (
    ErrorCode,
    InvalidTxnStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    TransactionAbortableError,
    error_for,
    raise_for,
)
from lockgate.client.fastpath import RecordQueue, RecordRun
from lockgate.client.sequences import (
    DUPLICATE_WINDOW,
    Outcome,
    PartitionSequences,
    classify,
)
from lockgate.client.transactions import (
    TransactionAbortedError,
    TransactionManager,
    TransactionState,
)
from lockgate.protocol.api import ApiKey
from lockgate.protocol.produce import (
    FIRST_FLEXIBLE,
    ProducePartition,
    ProduceRequestData,
    ProduceTopic,
    encode_produce_request,
)
from lockgate.protocol.records import NO_SEQUENCE

log = logging.getLogger(__name__)

FIRST_PRODUCE_VERSION = 3  # record batch v2
FIRST_TOPIC_ID_VERSION = 13
LAST_CLASSIC_TXN_PRODUCE_VERSION = 11  # v12+ adds partitions implicitly (TV2 only)
FIRST_KIP360_INIT_VERSION = 3
NO_OFFSET = -1
# While work is queued the sender looks at delivery deadlines at least this often.
EXPIRY_CHECK_SECONDS = 0.5
# An idempotent partition's records in flight span at most DUPLICATE_WINDOW + 1 sequences,
# so a batch never carries more, and one that has that many goes without waiting for its
# linger. (Two batches of half as many in flight were measured slower on a busy machine: twice
# the requests, each a wake-up of the broker and of the client.)
BATCH_RECORDS = DUPLICATE_WINDOW + 1
# send() and send_batch() yield to the loop after this many records (and when a batch fills):
# the answers to what is in flight are read, and the next batches written, only then.
YIELD_EVERY = 256
PRUNE_UNFINISHED_AT = 1_024


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 with acks=0, and for a duplicate the broker had already appended
    timestamp: int  # the broker's time when the topic uses LogAppendTime, else the record's

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(slots=True)
class ProducerStats:
    """Counters for monitoring and tests."""

    produce_requests: int = 0
    retries: int = 0
    duplicates: int = 0  # DUPLICATE_SEQUENCE_NUMBER answers counted as delivered
    leader_epoch_refreshes: int = 0  # FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH answers
    epoch_bumps: int = 0  # InitProducerId with the current id/epoch (KIP-360)
    sequence_overflows: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0


@dataclass(slots=True)
class _Batch:
    topic_partition: TopicPartition
    records: RecordRun
    deadline: float  # loop time after which a retriable failure is final
    serial: int  # creation order: the order of the partition's batches
    base_sequence: int = NO_SEQUENCE
    data: bytes | None = None
    built_for: tuple[ProducerIdentity, int] | None = None
    attempts: int = 0


@dataclass(slots=True)
class _PartitionQueue:
    topic_partition: TopicPartition
    pending: RecordQueue  # records not yet in a batch (its `size`: their size bounds)
    retries: list[_Batch] = field(default_factory=list)  # sorted by serial; before `pending`
    in_flight: list[_Batch] = field(default_factory=list)
    not_before: float = 0.0  # retry backoff
    sequences: PartitionSequences = field(default_factory=PartitionSequences)

    def has_work(self) -> bool:
        return bool(self.pending) or bool(self.retries)


@dataclass(frozen=True, slots=True)
class SenderSettings:
    """The producer's options the sender works by (durations in seconds)."""

    acks: int
    codec: int
    linger: float
    batch_size: int
    max_request_size: int
    buffer_memory: int
    request_timeout_ms: int
    delivery_timeout: float
    retry_backoff: float
    idempotent: bool
    max_in_flight: int  # per partition
    transaction_timeout_ms: int
    max_block: float  # bounds the sender's own transaction calls (AddPartitionsToTxn)
    sequence_overflow_threshold: int
    transactional_id: str | None


class Sender:
    """Owns the partition queues (the accumulator fills them), the producer id and epoch in
    use, what is in flight, and the task that sends. Built by the Producer, which starts and
    stops it."""

    def __init__(
        self,
        cluster: Cluster,
        settings: SenderSettings,
        txn: TransactionManager | None,
        stats: ProducerStats,
        implementation: ModuleType,
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.stats = stats
        self._txn = txn
        self._fastpath = implementation
        # None: an idempotent producer still needs InitProducerId.
        self._identity: ProducerIdentity | None = None if settings.idempotent else NON_IDEMPOTENT
        self._reset_reason: str | None = None  # an epoch bump is wanted (idempotent only)
        self._sequence_gap = False  # transactional, classic protocol: bump after the abort
        self._queues: dict[TopicPartition, _PartitionQueue] = {}
        self._serials = itertools.count()
        self._space_freed = asyncio.Event()
        self._wakeup = asyncio.Event()
        # The per-record work of send() and send_batch() (compiled when built, see fastpath.py):
        # the queues, buffered_bytes (size bounds of every record not yet completed), and every
        # record's future until it is done (`unfinished`, for flush and close), pruned as it
        # grows rather than through a done-callback per record. The Producer queues records
        # through it; the sender takes them off the queues and releases their bytes.
        self.accumulator: fastpath.Accumulator = implementation.Accumulator(
            cluster,
            self._new_queue,
            self._wakeup.set,
            None if txn is None else txn.check_sendable,
            settings.batch_size,
            settings.max_request_size,
            settings.buffer_memory,
            PRUNE_UNFINISHED_AT,
        )
        self.accumulator.yield_every = YIELD_EVERY
        # a batch full in records is written at once, as one full in bytes
        self.accumulator.batch_records = BATCH_RECORDS if settings.idempotent else 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._in_flight_total = 0
        self._flushing = 0
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: set[int] = set()
        self._refreshing: set[str] = set()
        self._adding_partitions = False
        self._closing = False

    # ------------------------------------------------------------------------------------------
    # The producer's side

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="lockgate-producer-sender")

    @property
    def started(self) -> bool:
        return self._task is not None

    async def stop(self) -> None:
        """Stops sending: the task and every request it has going are cancelled, and every
        record not completed yet fails (the Producer flushed before, as far as it could)."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._requests):
            task.cancel()
        await asyncio.gather(*self._requests, return_exceptions=True)
        self._fail_everything(KafkaConnectionError("the producer was closed"))

    def wake(self) -> None:
        """Something changed for the sender to look at (a record queued, a batch filled)."""
        self._wakeup.set()

    @contextlib.contextmanager
    def flushing(self) -> Iterator[None]:
        """While inside, queued records go out at once, whatever their linger."""
        self._flushing += 1
        self._wakeup.set()
        try:
            yield
        finally:
            self._flushing -= 1

    async def wait_idle(self, deadline: float) -> None:
        """Waits until nothing is in flight, or until the loop time `deadline`."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, deadline - asyncio.get_running_loop().time())):
                await self._idle.wait()

    @property
    def identity(self) -> ProducerIdentity | None:
        """The producer id and epoch in use (None before an idempotent producer has one)."""
        return self._identity

    @property
    def sequence_gap(self) -> bool:
        """Transactional, classic protocol: sequences were used that the partitions may never
        have seen, so the producer should bump its epoch once the transaction has ended."""
        return self._sequence_gap

    def transaction_failed(self, error: KafkaError) -> None:
        """The open transaction can only be aborted now: what is queued fails at once."""
        txn = self._txn
        assert txn is not None, "only a transactional producer has a transaction to fail"
        txn.fail(error)
        self.fail_queued(TransactionAbortedError(f"the transaction must be aborted: {error}"))

    def current_identity(self) -> ProducerIdentity:
        """The producer id and epoch in use; InvalidTxnStateError before there is one."""
        if self._identity is None:
            raise InvalidTxnStateError("call init_transactions() first")
        return self._identity

    def use_identity(self, identity: ProducerIdentity) -> None:
        """A new producer id or epoch: every partition's sequences restart at 0."""
        self._identity = identity
        self._sequence_gap = False
        for queue in self._queues.values():
            queue.sequences.reset()
            for batch in queue.retries:
                batch.base_sequence = queue.sequences.assign(len(batch.records))

    def _new_queue(self, topic: str, partition: int) -> RecordQueue:
        """The accumulator asks for a partition's queue the first time it has a record for it."""
        records: RecordQueue = self._fastpath.RecordQueue(topic, partition)
        topic_partition = TopicPartition(topic, partition)
        self._queues[topic_partition] = _PartitionQueue(topic_partition, records)
        return records

    async def wait_for_space(self, size: int) -> None:
        """Waits while the buffer cannot take `size` more bytes."""
        # A record larger than the whole buffer still goes once the buffer is empty.
        accumulator, limit = self.accumulator, self.settings.buffer_memory
        while accumulator.buffered_bytes and accumulator.buffered_bytes + size > limit:
            self._space_freed.clear()
            await self._space_freed.wait()

    # ------------------------------------------------------------------------------------------
    # The sender

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            self._wakeup.clear()
            now = loop.time()
            try:
                self._expire(now)
                if self._needs_producer_id():
                    await self._renew_producer_id()
                    continue
                wait = self._send_ready(now)
            except Exception:  # a bug must not stop every delivery for good
                log.exception("the producer's sender failed; going on after a backoff")
                wait = self.settings.retry_backoff
            if any(queue.has_work() for queue in self._queues.values()):
                wait = EXPIRY_CHECK_SECONDS if wait is None else min(wait, EXPIRY_CHECK_SECONDS)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wakeup.wait()

    def _needs_producer_id(self) -> bool:
        """An idempotent (not transactional) producer gets its id lazily, and bumps its epoch
        once nothing is in flight any more."""
        if not self.settings.idempotent or self._txn is not None:
            return False
        if self._identity is not None and self._reset_reason is None:
            return False
        return self._in_flight_total == 0 and any(q.has_work() for q in self._queues.values())

    async def _renew_producer_id(self) -> None:
        current = self._identity
        try:
            connection = await self.cluster.any_connection()
            versions = connection.version_range(ApiKey.INIT_PRODUCER_ID)
            # KIP-360 names the current id/epoch; before v3 (or the first time) ask afresh,
            # which an idempotent producer may always do.
            bump = current is not None and (
                versions is not None and versions.max >= FIRST_KIP360_INIT_VERSION
            )
            response = await connection.request(
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": None,
                    "transaction_timeout": self.settings.transaction_timeout_ms,
                    "producer_id": current.producer_id if bump and current else -1,
                    "producer_epoch": current.producer_epoch if bump and current else -1,
                },
            )
            raise_for(response.error_code, None, "InitProducerId")
        except KafkaError as exc:
            log.warning("InitProducerId failed (retrying after a backoff): %s", exc)
            await asyncio.sleep(self.settings.retry_backoff)
            return
        identity = ProducerIdentity(int(response.producer_id), int(response.producer_epoch))
        if current is not None:
            self.stats.epoch_bumps += 1
            log.info(
                "idempotent producer %d/%d → %d/%d: %s",
                current.producer_id,
                current.producer_epoch,
                identity.producer_id,
                identity.producer_epoch,
                self._reset_reason,
            )
        self._reset_reason = None
        self.use_identity(identity)

    def _request_reset(self, reason: str) -> None:
        if self._txn is not None:
            return  # transactional producers bump between transactions (see _end_transaction)
        if self._reset_reason is None:
            self._reset_reason = reason
        self._wakeup.set()

    def _may_send(self) -> bool:
        if self._identity is None or self._reset_reason is not None:
            return False
        return self._txn is None or self._txn.sending_allowed

    def _send_ready(
        self, now: float, partitions: Iterable[TopicPartition] | None = None
    ) -> float | None:
        """Writes the Produce requests that are due (of `partitions` only, when given);
        returns how long until the next batch may be (None: until something happens)."""
        if not self._may_send():
            return None
        wait: float | None = None
        # Per leader, rounds of batches: a request holds at most one batch per partition, so
        # a partition's second batch in flight goes in the next round's request.
        by_leader: dict[int, tuple[BrokerConnection, list[list[tuple[_Batch, int]]]]] = {}
        queues = self._queues
        chosen = queues.items() if partitions is None else [(p, queues[p]) for p in partitions]
        waiting: list[tuple[TopicPartition, _PartitionQueue, PartitionInfo]] = []
        for topic_partition, queue in chosen:
            if not queue.has_work():
                continue
            if queue.not_before > now:
                wait = _earliest(wait, queue.not_before - now)
                continue
            partition = self._leader_of(topic_partition)
            if partition is None:
                continue
            connection = self._connection_to(partition.leader_id)
            if connection is None:
                continue
            for round_index in range(self.settings.max_in_flight):
                batch, later = self._next_batch(topic_partition, queue, now)
                if later is not None:
                    wait = _earliest(wait, later)
                if batch is None:
                    if round_index == 0 and later is not None:
                        waiting.append((topic_partition, queue, partition))
                    break
                self._add_to_request(by_leader, connection, round_index, batch, partition)
        # A request goes to these leaders anyway: it also takes what their other partitions
        # have waiting for their linger, rather than each becoming a request of its own.
        if partitions is not None and by_leader:  # an answer's callback: the others too
            looked_at = {tp for tp, _queue in chosen}
            waiting += [
                (tp, queue, info)
                for tp, queue in queues.items()
                if tp not in looked_at
                and queue.pending
                and (info := self._leader_of(tp)) is not None
            ]
        for topic_partition, queue, partition in waiting:
            entry = by_leader.get(partition.leader_id)
            if entry is None or queue.not_before > now:
                continue
            batch, _later = self._next_batch(topic_partition, queue, now, eager=True)
            if batch is not None:
                self._add_to_request(by_leader, entry[0], 0, batch, partition)
        for connection, rounds in by_leader.values():
            for group in rounds:
                self._produce(connection, group)
        return wait

    def _add_to_request(
        self,
        by_leader: dict[int, tuple[BrokerConnection, list[list[tuple[_Batch, int]]]]],
        connection: BrokerConnection,
        round_index: int,
        batch: _Batch,
        partition: PartitionInfo,
    ) -> None:
        self._queues[batch.topic_partition].in_flight.append(batch)
        self._in_flight_total += 1
        self._idle.clear()
        _, rounds = by_leader.setdefault(partition.leader_id, (connection, []))
        if len(rounds) <= round_index:
            rounds.append([])
        rounds[round_index].append((batch, partition.leader_epoch))

    def _next_batch(
        self,
        topic_partition: TopicPartition,
        queue: _PartitionQueue,
        now: float,
        *,
        eager: bool = False,
    ) -> tuple[_Batch | None, float | None]:
        """The partition's next batch, if one is due (`eager`: whatever its linger, as when
        flushing), and else when to look again (None: when something happens)."""
        if queue.retries:
            if queue.in_flight:
                return None, None  # resend only once everything sent before has come back
            return queue.retries.pop(0), None
        if len(queue.in_flight) >= self.settings.max_in_flight or not queue.pending:
            return None, None
        txn = self._txn
        if txn is not None and not txn.tv2 and topic_partition not in txn.transaction.partitions:
            self._add_to_transaction(topic_partition)
            return None, None
        pending = queue.pending
        idempotent = self.settings.idempotent
        oldest = pending.first_enqueued
        # Full: as large as a batch may be, in bytes or (idempotent) in records: waiting for
        # more would not make it any larger.
        full = pending.size >= self.settings.batch_size or (
            idempotent and len(pending) >= BATCH_RECORDS
        )
        if not (full or eager or self._flushing or now - oldest >= self.settings.linger):
            return None, oldest + self.settings.linger - now
        limit: int | None = None
        if idempotent:
            sequences = queue.sequences
            room = self.settings.sequence_overflow_threshold - sequences.next_sequence + 1
            if room <= 0:
                self._sequence_overflow(topic_partition, queue)
                return None, None
            window = DUPLICATE_WINDOW + 1
            if sequences.unacknowledged:
                window = sequences.unacknowledged[0][0] + window - sequences.next_sequence
            # Not a runt that the window leaves room for: the next acknowledgement frees a
            # whole batch's worth (with nothing unacknowledged the window is all free).
            if window < min(BATCH_RECORDS, len(pending)):
                return None, None  # wait for acknowledgements
            limit = min(room, window, BATCH_RECORDS)
        batch = self._take_batch(topic_partition, queue, limit)
        if self.settings.idempotent:
            batch.base_sequence = queue.sequences.assign(len(batch.records))
        if txn is not None:
            txn.transaction.partitions.add(topic_partition)  # TV2: Produce v12 adds it
        return batch, None

    def _sequence_overflow(self, topic_partition: TopicPartition, queue: _PartitionQueue) -> None:
        self.stats.sequence_overflows += 1
        if self._txn is None:
            self._request_reset(f"sequence of {topic_partition} would pass the threshold")
            return
        # Mid-transaction no epoch bump is possible without aborting: the transaction must go.
        self._sequence_gap = True
        error = TransactionAbortableError(
            f"the sequence of {topic_partition} would pass "
            f"{self.settings.sequence_overflow_threshold} within one transaction"
        )
        overflowing = queue.pending.take_all()
        if overflowing is not None:
            self._give_up(_Batch(topic_partition, overflowing, 0.0, -1), error)
        self.transaction_failed(error)

    def _take_batch(
        self, topic_partition: TopicPartition, queue: _PartitionQueue, limit: int | None
    ) -> _Batch:
        # The longest prefix within both bounds, at least one record (compiled when built).
        records = queue.pending.take(self.settings.batch_size, limit)
        deadline = records.first_enqueued + self.settings.delivery_timeout
        return _Batch(topic_partition, records, deadline, next(self._serials))

    def _batch_bytes(self, batch: _Batch) -> bytes:
        identity = self._identity if self.settings.idempotent else NON_IDEMPOTENT
        assert identity is not None
        built_for = (identity, batch.base_sequence)
        if batch.data is None or batch.built_for != built_for:
            encoded, base_timestamp, max_timestamp = batch.records.frame()
            batch.data = build_framed_batch(
                encoded,
                len(batch.records),
                base_timestamp,
                max_timestamp,
                codec=self.settings.codec,
                identity=identity,
                base_sequence=batch.base_sequence,
            )
            batch.built_for = built_for
        return batch.data

    def _leader_of(self, topic_partition: TopicPartition) -> PartitionInfo | None:
        """The partition's leader from the metadata we have; None (and a refresh on its way)
        when it is unknown."""
        info = self.cluster.metadata.topics.get(topic_partition.topic)
        if info is not None and info.error_code == ErrorCode.none:
            index = topic_partition.partition
            if index < len(info.partitions) and info.partitions[index].leader_id >= 0:
                return info.partitions[index]
        self._refresh(topic_partition.topic)
        return None

    def _refresh(self, topic: str) -> None:
        if topic in self._refreshing or self._closing:
            return
        self._refreshing.add(topic)

        async def refresh() -> None:
            try:
                await self.cluster.topic(topic, refresh=True)
            except KafkaError as exc:
                log.info("metadata for %s: %s (retrying after a backoff)", topic, exc)
                await asyncio.sleep(self.settings.retry_backoff)
            finally:
                self._refreshing.discard(topic)
                self._wakeup.set()

        self._background(refresh())

    def _connection_to(self, node_id: int) -> BrokerConnection | None:
        connection = self._connections.get(node_id)
        if connection is not None and connection.connected:
            return connection
        if node_id in self._connecting or self._closing:
            return None
        self._connecting.add(node_id)

        async def connect() -> None:
            try:
                self._connections[node_id] = await self.cluster.connection(node_id)
            except KafkaError as exc:
                log.info("connecting to broker %d: %s (retrying after a backoff)", node_id, exc)
                # the broker may be gone for good: ask who leads its partitions now
                for topic in {tp.topic for tp in self._queues}:
                    self._refresh(topic)
                await asyncio.sleep(self.settings.retry_backoff)
            finally:
                self._connecting.discard(node_id)
                self._wakeup.set()

        self._background(connect())
        return None

    def _add_to_transaction(self, topic_partition: TopicPartition) -> None:
        """Classic protocol: AddPartitionsToTxn before the first batch to a partition. One
        request at a time, carrying every partition waiting by then."""
        txn = self._txn
        assert txn is not None
        txn.transaction.adding.add(topic_partition)
        if not self._adding_partitions:
            self._adding_partitions = True
            self._background(self._add_partitions(txn))

    async def _add_partitions(self, txn: TransactionManager) -> None:
        transaction = txn.transaction
        try:
            for _round in range(10_000):  # bounded: each round adds at least one partition
                await asyncio.sleep(0)  # let this pass of the sender name every partition
                partitions = transaction.adding - transaction.partitions
                if not partitions or transaction is not txn.transaction:
                    return
                if not txn.sending_allowed:
                    return
                deadline = asyncio.get_running_loop().time() + self.settings.max_block
                try:
                    await txn.add_partitions(self.current_identity(), partitions, deadline)
                except KafkaError as exc:
                    if txn.state is TransactionState.IN_TRANSACTION:
                        self.transaction_failed(exc)
                    return
                transaction.partitions.update(partitions)
                self._wakeup.set()
        finally:
            self._adding_partitions = False
            self._wakeup.set()

    def _background(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    # ------------------------------------------------------------------------------------------
    # Produce requests

    def _produce(self, connection: BrokerConnection, group: list[tuple[_Batch, int]]) -> None:
        """Encodes and writes one Produce request now; its answer is handled by a task."""
        max_version = (
            LAST_CLASSIC_TXN_PRODUCE_VERSION
            if self._txn is not None and not self._txn.tv2
            else None
        )
        try:
            version = connection.version_for(
                ApiKey.PRODUCE, min_version=FIRST_PRODUCE_VERSION, max_version=max_version
            )
        except KafkaError as exc:
            for batch, _epoch in group:
                self._attempt_failed(batch, exc)
            return
        topics: dict[str, ProduceTopic] = {}
        for batch, _epoch in group:
            name = batch.topic_partition.topic
            info = self.cluster.metadata.topics.get(name)
            if info is None or info.topic_id is None:
                version = min(version, FIRST_TOPIC_ID_VERSION - 1)
        for batch, leader_epoch in group:
            batch.attempts += 1
            name = batch.topic_partition.topic
            topic = topics.get(name)
            if topic is None:
                info = self.cluster.metadata.topics.get(name)
                topic_id = info.topic_id if info is not None else None
                if version >= FIRST_TOPIC_ID_VERSION:
                    topic = topics[name] = ProduceTopic(None, topic_id)
                else:
                    topic = topics[name] = ProduceTopic(name, None)
            topic.partitions.append(
                ProducePartition(
                    batch.topic_partition.partition,
                    self._batch_bytes(batch),
                    leader_epoch if version >= FIRST_FLEXIBLE else -1,
                )
            )
        body = encode_produce_request(
            ProduceRequestData(
                version,
                self.settings.transactional_id,
                self.settings.acks,
                self.settings.request_timeout_ms,
                list(topics.values()),
            )
        )
        batches = [batch for batch, _epoch in group]
        names_by_id = {t.topic_id: name for name, t in topics.items() if t.topic_id is not None}
        self.stats.produce_requests += 1
        if self.settings.acks == 0:
            self._background(self._produce_without_answer(connection, version, body, batches))
            return
        try:
            # The answer is handled by a callback as soon as it is read, not by a task.
            connection.send_encoded_then(
                ApiKey.PRODUCE,
                version,
                body,
                functools.partial(self._on_answer, batches, version, names_by_id),
            )
        except KafkaError as exc:
            for batch in batches:
                self._attempt_failed(batch, exc)

    async def _produce_without_answer(
        self, connection: BrokerConnection, version: int, body: bytes, batches: list[_Batch]
    ) -> None:
        try:
            await connection.send_without_response(ApiKey.PRODUCE, body, version=version)
        except KafkaError as exc:
            for batch in batches:
                self._attempt_failed(batch, exc)
            return
        for batch in batches:
            self._leave_flight(batch)
            self._complete(batch, NO_OFFSET, -1)

    def _on_answer(
        self,
        batches: list[_Batch],
        version: int,
        names_by_id: dict[Any, str],
        response: Any,
        error: KafkaError | None,
    ) -> None:
        """A Produce request's outcome, from the connection's reader: the batches complete or
        fail, then what their answers made sendable goes out at once (_pump)."""
        if self._closing:
            return  # stopped: every record still waiting has failed already
        if error is not None:
            for batch in batches:
                self._attempt_failed(batch, error)
            return
        answers: dict[TopicPartition, Any] = {}
        for topic_response in response.responses:
            name = (
                names_by_id.get(topic_response.topic_id)
                if version >= FIRST_TOPIC_ID_VERSION
                else topic_response.name
            )
            for partition_response in topic_response.partition_responses:
                answers[TopicPartition(str(name), int(partition_response.index))] = (
                    partition_response
                )
        delivered: list[tuple[_Batch, int, int]] = []
        for batch in batches:
            partition_answer = answers.get(batch.topic_partition)
            if partition_answer is None:
                self._attempt_failed(
                    batch, error_for(ErrorCode.unknown_server_error, "Produce response left it out")
                )
                continue
            completion = self._answered(batch, partition_answer)
            if completion is not None:
                delivered.append((batch, *completion))
        # The next batches first: the broker works on them while the records complete here.
        self._pump(dict.fromkeys(batch.topic_partition for batch in batches))
        for batch, base_offset, log_append_time in delivered:
            self._complete(batch, base_offset, log_append_time)

    def _pump(self, partitions: Iterable[TopicPartition]) -> None:
        """Writes what the answers just made sendable in their partitions (room in the window,
        a retry due) right away, from the answer's callback, rather than a loop iteration later
        from the sender's task: while the application keeps the loop busy queueing records,
        every iteration counts. The task is woken as well (_leave_flight) and keeps the timers
        and every other partition."""
        if self._closing:
            return
        try:
            self._send_ready(asyncio.get_running_loop().time(), partitions)
        except Exception:  # as in _run: the task goes on after its own backoff
            log.exception("the producer's sender failed while answering")

    def _answered(self, batch: _Batch, answer: Any) -> tuple[int, int] | None:
        """A batch's answer: out of flight, acknowledged or failed. A delivered batch is left
        for the caller to complete with the (base offset, log append time) returned."""
        self._leave_flight(batch)
        queue = self._queues[batch.topic_partition]
        code = ErrorCode(answer.error_code)
        idempotent = self.settings.idempotent
        next_expected = not idempotent or queue.sequences.is_next_expected(batch.base_sequence)
        outcome = classify(
            code,
            idempotent=idempotent,
            transactional=self._txn is not None,
            next_expected=next_expected,
        )
        if outcome is Outcome.DELIVERED:
            if idempotent:
                with contextlib.suppress(KeyError):  # renumbered meanwhile: still delivered
                    queue.sequences.acknowledge(batch.base_sequence)
            if code == ErrorCode.duplicate_sequence_number:
                self.stats.duplicates += 1
                return NO_OFFSET, -1
            append_time = getattr(answer, "log_append_time", None)
            timestamp = -1 if append_time is None else int(append_time.timestamp() * 1000)
            return int(answer.base_offset), timestamp
        error = error_for(code, getattr(answer, "error_message", None), str(batch.topic_partition))
        if code in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch):
            self.stats.leader_epoch_refreshes += 1
        self._failed(batch, outcome, error)
        return None

    def _attempt_failed(self, batch: _Batch, error: KafkaError) -> None:
        """The request failed as a whole (connection lost, timeout): the batch may or may not
        have been appended."""
        self._leave_flight(batch)
        if isinstance(error, KafkaConnectionError | KafkaTimeoutError):
            self.cluster.invalidate(batch.topic_partition.topic)
        if error.retriable:
            outcome = Outcome.RETRY
        else:
            outcome = Outcome.ABORTABLE if self._txn is not None else Outcome.FAILED
        self._failed(batch, outcome, error)

    def _failed(self, batch: _Batch, outcome: Outcome, error: KafkaError) -> None:
        if outcome is Outcome.REFRESH_AND_RETRY:
            self.cluster.invalidate(batch.topic_partition.topic)
            self._retry(batch, error)
        elif outcome is Outcome.RETRY:
            self._retry(batch, error)
        elif outcome is Outcome.RESET_SEQUENCES:
            self._request_reset(f"{batch.topic_partition}: {error}")
            self._retry(batch, error)
        elif outcome is Outcome.FATAL:
            self._give_up(batch, error)
            if self._txn is not None:
                self.transaction_failed(error)  # an epoch bump may be abortable (see fail)
            else:
                self.fail_queued(error)
        else:  # ABORTABLE, FAILED: giving up makes an open transaction abortable
            self._give_up(batch, error)

    def _retry(self, batch: _Batch, error: KafkaError) -> None:
        now = asyncio.get_running_loop().time()
        retry_at = now + self.settings.retry_backoff
        allowed = self._txn is None or self._txn.sending_allowed
        if self._closing or not allowed or retry_at >= batch.deadline:
            self._give_up(batch, error)
            return
        log.debug("retrying %s after %s (attempt %d)", batch.topic_partition, error, batch.attempts)
        self.stats.retries += 1
        queue = self._queues[batch.topic_partition]
        bisect.insort(queue.retries, batch, key=lambda b: b.serial)
        queue.not_before = retry_at
        self._wakeup.set()

    def _give_up(self, batch: _Batch, error: KafkaError) -> None:
        """The batch's records fail with `error`."""
        for future in batch.records.futures():
            if future.done():
                continue
            future.set_exception(type(error)(error.message))
            if isinstance(error, TransactionAbortedError):
                future.exception()  # asked for: nobody needs to look at it
        if self.settings.idempotent and batch.base_sequence != NO_SEQUENCE:
            queue = self._queues[batch.topic_partition]
            queue.sequences.forget(batch.base_sequence)
            # Its sequences may be missing on the broker: the partition needs a new epoch.
            if self._txn is None:
                self._request_reset(f"a batch of {batch.topic_partition} failed: {error}")
            else:
                self._sequence_gap = True
        self._release(batch)
        txn = self._txn
        if (
            txn is not None
            and txn.state is TransactionState.IN_TRANSACTION
            and not isinstance(error, TransactionAbortedError)
        ):
            # e.g. its delivery timeout passed (the request may still land): committing the
            # rest would lose these records, so the transaction can only be aborted now. A
            # retriable error is wrapped: from commit_transaction it would read "call again".
            self.transaction_failed(
                TransactionAbortableError(f"records of {batch.topic_partition} failed: {error}")
                if error.retriable
                else error
            )

    # ------------------------------------------------------------------------------------------
    # Outcomes

    def _leave_flight(self, batch: _Batch) -> None:
        queue = self._queues[batch.topic_partition]
        with contextlib.suppress(ValueError):
            queue.in_flight.remove(batch)
            self._in_flight_total -= 1
        if self._in_flight_total == 0:
            self._idle.set()
        self._wakeup.set()

    def _complete(self, batch: _Batch, base_offset: int, log_append_time: int) -> None:
        # RecordMetadata built and futures completed in one call (compiled when built).
        topic_partition = batch.topic_partition
        batch.records.complete(
            RecordMetadata,
            topic_partition.topic,
            topic_partition.partition,
            base_offset,
            log_append_time,
        )
        self._release(batch)

    def _release(self, batch: _Batch) -> None:
        self.accumulator.buffered_bytes -= batch.records.size
        self._space_freed.set()
        self._wakeup.set()

    def _expire(self, now: float) -> None:
        """Fails records whose delivery timeout passed while they waited to be sent."""
        for topic_partition, queue in self._queues.items():
            expired = queue.pending.take_expired(now - self.settings.delivery_timeout)
            if expired is not None:
                error = KafkaTimeoutError(
                    f"{len(expired)} records for {topic_partition} found no leader or "
                    "connection within the delivery timeout"
                )
                self._give_up(_Batch(topic_partition, expired, now, -1), error)
            for batch in [b for b in queue.retries if b.deadline <= now]:
                queue.retries.remove(batch)
                self._give_up(batch, KafkaTimeoutError(f"{topic_partition}: delivery timeout"))

    def fail_queued(self, error: KafkaError) -> None:
        """Fails every record not in flight (queued, or waiting to be resent)."""
        for topic_partition, queue in self._queues.items():
            leftovers = queue.pending.take_all()
            if leftovers is not None:
                self._give_up(_Batch(topic_partition, leftovers, 0.0, -1), error)
            retries, queue.retries = queue.retries, []
            for batch in retries:
                self._give_up(batch, error)

    def _fail_everything(self, error: KafkaError) -> None:
        self.fail_queued(error)
        for future in list(self.accumulator.unfinished):
            if not future.done():
                future.set_exception(type(error)(error.message))


def _earliest(current: float | None, candidate: float) -> float:
    candidate = max(candidate, 0.0)
    return candidate if current is None else min(current, candidate)
