# client/producer.py — lockgate's asyncio producer: partitioning, batching per partition,
# compression, acks, retries; idempotence (on by default with acks=-1), transactions (the
# classic protocol and transaction version 2), KIP-939 two-phase commit, and KIP-359 leader
# epochs in every Produce request.
#
# Invariants:
# - One sender task decides what to send and writes every Produce request itself, in order:
#   a partition's batches go on the wire in sequence order, and a broker applies the requests
#   of one connection in order, so pipelining keeps the order.
# - Idempotent producers keep up to `max_in_flight_per_partition` (≤ 5) batches in flight per
#   partition, spanning at most 1001 sequence numbers (the broker's duplicate window, see
#   sequences.py). When a batch has to be resent, its partition first lets everything in
#   flight come back, then resends the failed batches one at a time, in sequence order, before
#   pipelining again. Resent batches keep their sequence, so the broker recognises copies that
#   it had already appended and answers them with the original offsets (an earlier batch is
#   looked up in its log); DUPLICATE_SEQUENCE_NUMBER, for a copy whose original is no longer
#   there, counts as delivered with offset -1.
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
# - Transactional producers number batches from 0 in each epoch; under transaction version 2
#   every commit/abort brings a new epoch (EndTxn v5) and sequences restart at 0. They never
#   bump mid-transaction: an overflow there makes the transaction abortable, and (classic
#   protocol) the abort is followed by an InitProducerId epoch bump.
# - Every record's future completes: with its offset, with the batch's error, or with the last
#   retriable error once its delivery timeout has passed.
# - The per-record work (send()'s and send_batch()'s queueing, cutting batches, framing,
#   completion) is fastpath.py's: compiled when built, its pure-Python twin otherwise; both
#   keep every rule above and give the same batches and RecordMetadata.
from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from lockgate.client import fastpath
from lockgate.client.batches import (
    NON_IDEMPOTENT,
    ProducerIdentity,
    build_framed_batch,
    size_bound,
)
from lockgate.client.cluster import ClientCluster, Cluster, PartitionInfo, TopicInfo, TopicPartition
from lockgate.client.connection import DEFAULT_CLIENT_ID, BrokerConnection
from lockgate.client.errors import (
    ErrorCode,
    InvalidTxnStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for,
    raise_for,
)
from lockgate.client.fastpath import RecordQueue, RecordRun
from lockgate.client.partitioner import DefaultPartitioner
from lockgate.client.security import ClientSecurity
from lockgate.client.sequences import (
    DUPLICATE_WINDOW,
    MAX_IN_FLIGHT,
    SEQUENCE_LIMIT,
    Outcome,
    PartitionSequences,
    classify,
)
from lockgate.client.transactions import (
    EPOCH_BUMPED,
    FATAL,
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTxnState,
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
from lockgate.protocol.records import COMPRESSION_CODECS, NO_SEQUENCE

log = logging.getLogger(__name__)

FIRST_PRODUCE_VERSION = 3  # record batch v2
FIRST_TOPIC_ID_VERSION = 13
LAST_CLASSIC_TXN_PRODUCE_VERSION = 11  # v12+ adds partitions implicitly (TV2 only)
FIRST_KIP360_INIT_VERSION = 3
NO_OFFSET = -1
# While work is queued the sender looks at delivery deadlines at least this often.
EXPIRY_CHECK_SECONDS = 0.5
PRUNE_UNFINISHED_AT = 1_024

__all__ = [
    "ConsumerGroupMetadata",
    "OffsetAndMetadata",
    "PreparedTxnState",
    "Producer",
    "ProducerStats",
    "RecordMetadata",
    "TransactionAbortedError",
]


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


class Producer:
    """`async with Producer("host:port") as producer: await producer.send_and_wait(...)`.

    `acks`: 0, 1 or -1 (all). `compression`: none, gzip, snappy, lz4 or zstd. `linger_ms`:
    how long a partition's first record may wait for others before its batch is sent.
    `batch_size`: bytes per batch; librdkafka's default (1,000,000), not the Java client's
    16 KiB: a broker's cost is mostly per request, so small batches cap the rate.
    `enable_idempotence`: None means on when acks=-1 (as in the Java client); a
    `transactional_id` needs it. `transaction_version`: None uses transaction version 2 when
    the broker has it finalized, 1 forces the classic protocol, 2 requires TV2.
    `sequence_overflow_threshold`: the largest sequence number a batch may carry before the
    producer bumps its epoch (2^31-1; lower only to exercise the bump).
    `max_block_ms` bounds each transaction call (init, offsets, commit, abort...).
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        cluster: Cluster | None = None,
        client_id: str | None = DEFAULT_CLIENT_ID,
        acks: int = -1,
        compression: str = "none",
        linger_ms: int = 5,
        batch_size: int = 1_000_000,
        max_request_size: int = 1_048_576,
        buffer_memory: int = 33_554_432,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        retry_backoff_ms: int = 100,
        allow_auto_topic_creation: bool = True,
        enable_idempotence: bool | None = None,
        max_in_flight_per_partition: int | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        transaction_version: int | None = None,
        max_block_ms: int = 60_000,
        sequence_overflow_threshold: int = SEQUENCE_LIMIT,
        security: ClientSecurity | None = None,
    ) -> None:
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1, not {acks}")
        if compression not in COMPRESSION_CODECS:
            raise ValueError(
                f"compression must be one of {', '.join(COMPRESSION_CODECS)}, not {compression!r}"
            )
        if enable_idempotence is None:
            enable_idempotence = acks == -1
        if transactional_id is not None and not enable_idempotence:
            raise ValueError("a transactional producer must be idempotent")
        if enable_idempotence and acks != -1:
            raise ValueError("an idempotent producer needs acks=-1")
        if max_in_flight_per_partition is None:
            max_in_flight_per_partition = MAX_IN_FLIGHT if enable_idempotence else 1
        if not 1 <= max_in_flight_per_partition <= (MAX_IN_FLIGHT if enable_idempotence else 1):
            raise ValueError(
                "max_in_flight_per_partition must be 1-5 for an idempotent producer and 1 for "
                f"others, not {max_in_flight_per_partition}"
            )
        if not 0 < sequence_overflow_threshold <= SEQUENCE_LIMIT:
            raise ValueError(f"sequence_overflow_threshold must be in 1..{SEQUENCE_LIMIT}")
        self._client_cluster = ClientCluster.of(
            bootstrap_servers, cluster, client_id, security, request_timeout_ms, retry_backoff_ms
        )
        self.cluster = cluster = self._client_cluster.cluster
        self.acks = acks
        self.codec = COMPRESSION_CODECS[compression]
        self.linger = linger_ms / 1000
        self.batch_size = batch_size
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.idempotent = enable_idempotence
        self.max_in_flight = max_in_flight_per_partition
        self.transaction_timeout_ms = transaction_timeout_ms
        self.max_block = max_block_ms / 1000
        self.sequence_overflow_threshold = sequence_overflow_threshold
        self.transactional_id = transactional_id
        self.partitioner = DefaultPartitioner()
        self.stats = ProducerStats()
        self._txn = (
            None
            if transactional_id is None
            else TransactionManager(
                cluster,
                transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                transaction_version=transaction_version,
                retry_backoff_ms=retry_backoff_ms,
                request_timeout_ms=request_timeout_ms,
            )
        )
        # None: an idempotent producer still needs InitProducerId.
        self._identity: ProducerIdentity | None = None if enable_idempotence else NON_IDEMPOTENT
        self._reset_reason: str | None = None  # an epoch bump is wanted (idempotent only)
        self._sequence_gap = False  # transactional, classic protocol: bump after the abort
        self._queues: dict[TopicPartition, _PartitionQueue] = {}
        self._serials = itertools.count()
        self._space_freed = asyncio.Event()
        self._wakeup = asyncio.Event()
        # The per-record work of send() and send_batch() (compiled when built, see fastpath.py;
        # chosen per producer, so that LOCKGATE_PURE_PYTHON=1 takes effect for new ones): the
        # queues, buffered_bytes (size bounds of every record not yet completed), and every
        # record's future until it is done (`unfinished`, for flush and close), pruned as it
        # grows rather than through a done-callback per record.
        self._fastpath = fastpath.load()
        self._accumulator: fastpath.Accumulator = self._fastpath.Accumulator(
            cluster,
            self._new_queue,
            self._wakeup.set,
            None if self._txn is None else self._txn.check_sendable,
            batch_size,
            max_request_size,
            buffer_memory,
            PRUNE_UNFINISHED_AT,
        )
        self._idle = asyncio.Event()
        self._idle.set()
        self._in_flight_total = 0
        self._topic_infos: dict[str, TopicInfo] = {}
        self._flushing = 0
        self._sender: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: set[int] = set()
        self._refreshing: set[str] = set()
        self._adding_partitions = False
        self._closing = False

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        await self._client_cluster.start()
        self._sender = asyncio.create_task(self._run(), name="lockgate-producer-sender")
        self._accumulator.start(asyncio.get_running_loop())

    @property
    def implementation(self) -> str:
        """Which implementation does the per-record work: "compiled" (lockgate's C extension)
        or "pure" (Python: the extension was not built, or LOCKGATE_PURE_PYTHON=1)."""
        return str(self._fastpath.IMPLEMENTATION)

    @property
    def identity(self) -> ProducerIdentity | None:
        """The producer id and epoch in use (None before an idempotent producer has one)."""
        return self._identity

    @property
    def transaction_state(self) -> TransactionState | None:
        return None if self._txn is None else self._txn.state

    @property
    def uses_transaction_version_2(self) -> bool:
        return self._txn is not None and self._txn.tv2

    # ------------------------------------------------------------------------------------------
    # The caller's side: records

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queues one record and returns the future of its RecordMetadata. Waits only when the
        buffer is full; raises at once for an unknown topic or partition or an oversized record,
        and (transactional producers) outside a transaction."""
        # The common record in one call (compiled when built); None: the general path decides.
        accumulator = self._accumulator
        future = accumulator.append(topic, value, key, partition, headers, timestamp_ms)
        if future is None:
            return await self._send(topic, value, key, partition, headers, timestamp_ms)
        if accumulator.filled:
            # A batch just filled: let the sender write it now rather than after the caller's
            # loop, so that the broker works on it while the caller queues more.
            accumulator.filled = False
            await asyncio.sleep(0)
        return future

    async def _send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        headers: Iterable[tuple[str, bytes | None]],
        timestamp_ms: int | None,
    ) -> asyncio.Future[RecordMetadata]:
        """send() for what its fast path leaves out: a topic not looked up yet (or whose
        metadata changed), headers, checks that raise, a full buffer."""
        self._check_sendable()
        info = await self._sendable_topic(topic)
        key, value = _as_bytes(key), _as_bytes(value)
        accumulator = self._accumulator
        if partition is None:
            chosen = accumulator.partition_of(topic, key)
        else:
            chosen = self._checked_partition(info, partition)
        record_headers = tuple((name, _as_bytes(header)) for name, header in headers)
        if not all(isinstance(name, str) for name, _header in record_headers):
            raise TypeError("a header is (str, bytes | None)")
        size = size_bound(key, value, record_headers)
        timestamp_ms = _timestamp(timestamp_ms)
        if size > self.max_request_size:
            raise MessageTooLargeError(
                f"a record of about {size} bytes exceeds max_request_size {self.max_request_size}"
            )
        await self._make_room(size)
        loop = asyncio.get_running_loop()
        # Future(), not loop.create_future(): the default loop's is a Python-level wrapper.
        future: asyncio.Future[RecordMetadata] = asyncio.Future(loop=loop)
        accumulator.track(future)
        queue = accumulator.queue_for(topic, chosen)
        before = queue.size
        queue.append(key, value, record_headers, timestamp_ms, size, future, loop.time())
        accumulator.buffered_bytes += size
        if before // self.batch_size != queue.size // self.batch_size:
            self._wakeup.set()  # a batch just filled: as above
            await asyncio.sleep(0)
        elif len(queue) == 1:
            self._wakeup.set()
        return future

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        future = await self.send(
            topic, value, key, partition=partition, headers=headers, timestamp_ms=timestamp_ms
        )
        return await future

    async def send_batch(
        self,
        topic: str,
        records: Iterable[tuple[bytes | None, bytes | None]],
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[list[RecordMetadata]]:
        """Queues (key, value) records in order, as send() would one by one, with one future
        for all of them (and one timestamp): it holds their RecordMetadata in order once every
        record is delivered, or the first failure (records of other batches may still be
        delivered, as with separate sends). Records with headers go through send(). An
        oversized record refuses the whole call before anything is queued."""
        self._check_sendable()
        info = await self._sendable_topic(topic)
        fixed = None if partition is None else self._checked_partition(info, partition)
        items = list(records)
        accumulator = self._accumulator
        total, largest = accumulator.measure(items)  # TypeError for anything but bytes / None
        if largest > self.max_request_size:
            raise MessageTooLargeError(
                f"a record of about {largest} bytes exceeds max_request_size "
                f"{self.max_request_size}"
            )
        timestamp_ms = _timestamp(timestamp_ms)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[RecordMetadata]] = asyncio.Future(loop=loop)
        if not items:
            future.set_result([])
            return future
        accumulator.track(future)
        group: fastpath.RecordGroup = self._fastpath.RecordGroup(future, len(items))
        try:
            await self._make_room(total)
            # Every record in one call (compiled when built): partition, queue, accounting.
            accumulator.append_group(topic, fixed, items, timestamp_ms, group)
            if accumulator.filled:
                accumulator.filled = False
                await asyncio.sleep(0)  # as in send(): the sender writes the full batch now
        except asyncio.CancelledError:  # the rest was never queued: the group cannot complete
            future.cancel()
            raise
        except Exception as exc:
            group.fail(exc)
            future.exception()  # raised to the caller here; nobody else needs to see it
            raise
        return future

    def _check_sendable(self) -> None:
        self._check_open()
        if self._txn is not None:
            self._txn.check_sendable()

    def _cached_topic(self, topic: str) -> TopicInfo | None:
        """The topic as last looked up, unless the metadata was refreshed since."""
        info = self._topic_infos.get(topic)
        return (
            info if info is not None and self.cluster.metadata.topics.get(topic) is info else None
        )

    async def _look_up_topic(self, topic: str) -> TopicInfo:
        info = await self.cluster.topic(
            topic, allow_auto_topic_creation=self.allow_auto_topic_creation
        )
        self._topic_infos[topic] = info
        return info

    async def _sendable_topic(self, topic: str) -> TopicInfo:
        """The topic's metadata, registered for send()'s fast path with the snapshot it came
        from (a refresh sends the next record of the topic through here again)."""
        info = self._cached_topic(topic) or await self._look_up_topic(topic)
        metadata = self.cluster.metadata
        if metadata.topics.get(topic) is info:
            partitioner = self.partitioner
            default = isinstance(partitioner, DefaultPartitioner)
            self._accumulator.register(
                topic,
                metadata,
                len(info.partitions),
                partitioner.counter(topic) if default else itertools.count(),
                None if default else partitioner,
            )
        return info

    async def flush(self) -> None:
        """Sends everything queued now, ignoring linger, and waits until each record has its
        outcome (errors stay in the records' futures)."""
        waiting = [f for f in self._accumulator.unfinished if not f.done()]
        self._accumulator.unfinished = waiting
        if not waiting:
            return
        self._flushing += 1
        self._wakeup.set()
        try:
            # One record at a time: most are done by the time we look at them, so few need a
            # callback. asyncio.wait, not await: a cancelled flush must not cancel the records.
            for future in waiting:
                if not future.done():
                    await asyncio.wait([future])
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        """Flushes, then stops. Records still unfinished after the delivery timeout fail. An
        open transaction is left to the coordinator (its timeout aborts it; a two-phase one
        waits for complete_transaction from the next instance)."""
        if self._closing:
            return
        try:
            if self._sender is not None:
                await self.flush()
        finally:
            self._closing = True
            self._accumulator.sendable = False
            self._wakeup.set()
            if self._sender is not None:
                self._sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sender
            for task in list(self._requests):
                task.cancel()
            await asyncio.gather(*self._requests, return_exceptions=True)
            self._fail_everything(KafkaConnectionError("the producer was closed"))
            await self._client_cluster.close()

    # ------------------------------------------------------------------------------------------
    # The caller's side: transactions

    async def init_transactions(
        self,
        keep_prepared_txn: bool = False,
        enable_2pc: bool = False,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """InitProducerId for the transactional id: fences any previous instance and aborts
        its open transaction, unless (KIP-939) `keep_prepared_txn` keeps a prepared one for
        complete_transaction. `enable_2pc` marks the id's transactions two-phase: the
        coordinator never aborts them by timeout (the broker must allow it)."""
        txn = self._require_transactional()
        deadline = self._deadline(timeout_ms)
        txn.transition(TransactionState.INITIALIZING)
        try:
            identity, ongoing = await txn.init_producer_id(
                deadline=deadline,
                current=None,
                enable_2pc=enable_2pc,
                keep_prepared_txn=keep_prepared_txn,
            )
            await txn.decide_version()
            if (enable_2pc or keep_prepared_txn) and not txn.tv2:
                raise UnsupportedVersionError(
                    "two-phase commit (KIP-939) needs transaction version 2"
                )
        except KafkaError as exc:
            if exc.code in FATAL:
                txn.fail_fatally(exc)
            else:
                txn.transition(TransactionState.UNINITIALIZED)
            raise
        self._use_identity(identity)
        txn.two_phase_commit = enable_2pc
        if keep_prepared_txn and ongoing.has_transaction:
            txn.prepared = ongoing
            txn.transaction.kept = True
            txn.transition(TransactionState.PREPARED)
        else:
            txn.transition(TransactionState.READY)
            txn.kept_nothing = keep_prepared_txn
        log.info(
            "transactional id %r: producer id %d epoch %d, transaction version %d%s",
            txn.transactional_id,
            identity.producer_id,
            identity.producer_epoch,
            2 if txn.tv2 else 1,
            f", kept transaction of {ongoing}" if txn.prepared else "",
        )

    def begin_transaction(self) -> None:
        txn = self._require_transactional()
        self._check_open()
        txn.begin()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commits consumer offsets (the next offset to read, as for OffsetCommit) as part of
        the open transaction. With the group's generation and member id (KIP-447) a consumer
        that has left the group cannot commit: ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID make the
        transaction abortable."""
        txn = self._require_transactional()
        txn.check_sendable()
        group = (
            ConsumerGroupMetadata(group_metadata)
            if isinstance(group_metadata, str)
            else group_metadata
        )
        normalised = {
            tp: value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            for tp, value in offsets.items()
        }
        identity = self._current_identity()
        deadline = self._deadline(timeout_ms)
        txn.transaction.offsets_sent = True  # the coordinator may have it even if we fail
        try:
            if not txn.tv2:
                await txn.add_offsets(identity, group.group_id, deadline)
            await txn.commit_offsets(identity, normalised, group, deadline)
        except KafkaTimeoutError:
            raise  # may be called again
        except KafkaError as exc:
            self._transaction_failed(exc)
            if txn.epoch_bump_unsettled:
                txn.raise_error()  # abortable until abort_transaction() tells fence or timeout
            raise

    async def commit_transaction(self, *, timeout_ms: int | None = None) -> None:
        """Flushes, then commits. Any record that failed makes the transaction abortable:
        its error is raised and abort_transaction() must follow. A timeout leaves the commit
        to be called again."""
        txn = self._require_transactional()
        deadline = self._deadline(timeout_ms)
        if txn.state is TransactionState.IN_TRANSACTION:
            await self.flush()
            if txn.state is not TransactionState.IN_TRANSACTION:
                await self._settle_epoch_bump(deadline)
                txn.raise_error()
        txn.transition(TransactionState.COMMITTING)
        await self._end_transaction(commit=True, deadline=deadline)

    async def abort_transaction(self, *, timeout_ms: int | None = None) -> None:
        """Drops the records not yet sent, lets those in flight come back, then aborts."""
        txn = self._require_transactional()
        deadline = self._deadline(timeout_ms)
        txn.transition(TransactionState.ABORTING)
        self._fail_queued(TransactionAbortedError("the transaction was aborted"))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, deadline - asyncio.get_running_loop().time())):
                await self._idle.wait()
        await self._settle_epoch_bump(deadline)
        await self._end_transaction(commit=False, deadline=deadline)

    async def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939 phase one: flushes and returns the producer id and epoch of the open
        transaction, which stays open (the coordinator never times it out) until
        complete_transaction — from this producer or, after a crash, from the next one."""
        txn = self._require_transactional()
        if not txn.two_phase_commit:
            raise InvalidTxnStateError(
                "prepare_transaction needs init_transactions(enable_2pc=True)"
            )
        if txn.state is TransactionState.IN_TRANSACTION:
            await self.flush()
            if txn.state is not TransactionState.IN_TRANSACTION:
                txn.raise_error()
        txn.transition(TransactionState.PREPARED)
        identity = self._current_identity()
        txn.prepared = PreparedTxnState(identity.producer_id, identity.producer_epoch)
        return txn.prepared

    async def complete_transaction(
        self, state: PreparedTxnState, *, timeout_ms: int | None = None
    ) -> None:
        """KIP-939 phase two: commits the prepared transaction when `state` is the one
        prepared (the external transaction manager decided to commit), aborts it otherwise.
        A no-op after init_transactions(keep_prepared_txn=True) found no open transaction;
        INVALID_TXN_STATE when nothing was prepared or kept."""
        txn = self._require_transactional()
        if txn.state is TransactionState.READY and txn.kept_nothing:
            log.info("complete_transaction: no transaction was kept, nothing to do")
            return
        if txn.state is TransactionState.FATAL_ERROR:
            txn.raise_error()
        if txn.state is not TransactionState.PREPARED or txn.prepared is None:
            raise InvalidTxnStateError(
                f"no prepared transaction to complete (state {txn.state.value})"
            )
        commit = state == txn.prepared
        if not commit:
            log.info(
                "complete_transaction: %s is not the prepared %s: aborting", state, txn.prepared
            )
        txn.transition(TransactionState.COMMITTING if commit else TransactionState.ABORTING)
        await self._end_transaction(commit=commit, deadline=self._deadline(timeout_ms))

    async def _end_transaction(self, *, commit: bool, deadline: float) -> None:
        txn = self._require_transactional()
        identity = self._current_identity()
        if txn.has_anything:
            try:
                next_identity = await txn.end_txn(identity, commit, deadline)
            except KafkaTimeoutError:
                raise  # still COMMITTING / ABORTING: the call may be repeated
            except KafkaError as exc:
                self._transaction_failed(exc)
                if (
                    commit
                    and exc.code == ErrorCode.invalid_txn_state
                    and txn.state is TransactionState.ABORTABLE_ERROR
                    and not txn.two_phase_commit
                ):
                    # Kafka's answer (TV2) when the timeout aborter ended the transaction
                    txn.epoch_bump_unsettled = True
                if not txn.epoch_bump_unsettled:
                    raise
                await self._settle_epoch_bump(deadline)  # a fence raises ProducerFencedError
                if commit:
                    txn.raise_error()  # TransactionTimedOutError: abort_transaction() next
                next_identity = self._current_identity()
            if txn.tv2:
                self._use_identity(next_identity)
        if not txn.tv2 and (self._sequence_gap or txn.end_txn_in_doubt):
            # Sequences were used that the partitions may never have seen: start a new epoch
            # (KIP-360) rather than run into OUT_OF_ORDER_SEQUENCE_NUMBER next time. An EndTxn
            # whose answer was lost may still arrive, and under the same epoch it would end
            # the next transaction: the new epoch makes the coordinator refuse it (TV2's
            # EndTxn bumps the epoch itself).
            try:
                bumped, _ = await txn.init_producer_id(deadline=deadline, current=identity)
            except KafkaError as exc:
                self._transaction_failed(exc)
                raise
            self._use_identity(bumped)
            txn.end_txn_in_doubt = False
            self.stats.epoch_bumps += 1
        if commit:
            self.stats.transactions_committed += 1
        else:
            self.stats.transactions_aborted += 1
        txn.transition(TransactionState.READY)

    def _transaction_failed(self, error: KafkaError) -> None:
        txn = self._require_transactional()
        txn.fail(error)
        self._fail_queued(TransactionAbortedError(f"the transaction must be aborted: {error}"))

    async def _settle_epoch_bump(self, deadline: float) -> None:
        """After an epoch bump in the open transaction: was it the coordinator's timeout abort
        (go on) or a newer instance (fatal)? EndTxn(abort) under the old epoch first: lockgate's
        coordinator answers it when its timeout aborter made the bump, and any coordinator
        refuses it after a newer instance's InitProducerId (Kafka refuses it in both cases).
        Sent first, it also keeps the KIP-360 InitProducerId that follows (classic protocol:
        for an epoch to go on with) from aborting a newer instance's open transaction, which
        Kafka's coordinator would do. TV2's EndTxn v5 answer carries the next epoch itself."""
        txn = self._require_transactional()
        if not txn.epoch_bump_unsettled:
            return
        identity = self._current_identity()
        try:
            next_identity = await txn.end_txn(identity, False, deadline)
            if not txn.tv2:
                next_identity, _ = await txn.init_producer_id(deadline=deadline, current=identity)
        except KafkaTimeoutError:
            raise  # still unsettled: abort_transaction() may be called again
        except KafkaError as exc:
            if exc.code in EPOCH_BUMPED:
                raise txn.epoch_bump_was_fence(exc) from exc
            # cannot tell: the abort goes on as for any abortable error
            log.warning("transactional id %r: %s", txn.transactional_id, exc)
            txn.epoch_bump_unsettled = False
            return
        log.warning(
            "transactional id %r: the coordinator aborted the transaction after %d ms; "
            "going on as %d/%d",
            txn.transactional_id,
            txn.transaction_timeout_ms,
            next_identity.producer_id,
            next_identity.producer_epoch,
        )
        txn.epoch_bump_was_timeout()
        self._use_identity(next_identity)

    def _require_transactional(self) -> TransactionManager:
        if self._txn is None:
            raise InvalidTxnStateError("this producer has no transactional_id")
        return self._txn

    def _current_identity(self) -> ProducerIdentity:
        if self._identity is None:
            raise InvalidTxnStateError("call init_transactions() first")
        return self._identity

    def _use_identity(self, identity: ProducerIdentity) -> None:
        """A new producer id or epoch: every partition's sequences restart at 0."""
        self._identity = identity
        self._sequence_gap = False
        for queue in self._queues.values():
            queue.sequences.reset()
            for batch in queue.retries:
                batch.base_sequence = queue.sequences.assign(len(batch.records))

    def _deadline(self, timeout_ms: int | None) -> float:
        seconds = self.max_block if timeout_ms is None else timeout_ms / 1000
        return asyncio.get_running_loop().time() + seconds

    def _check_open(self) -> None:
        if self._closing or self._sender is None:
            raise KafkaConnectionError("the producer is closed" if self._closing else "not started")

    def _new_queue(self, topic: str, partition: int) -> RecordQueue:
        """The accumulator asks for a partition's queue the first time it has a record for it."""
        records: RecordQueue = self._fastpath.RecordQueue(topic, partition)
        topic_partition = TopicPartition(topic, partition)
        self._queues[topic_partition] = _PartitionQueue(topic_partition, records)
        return records

    def _checked_partition(self, info: TopicInfo, partition: int) -> int:
        count = len(info.partitions)
        if not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(
                f"topic {info.name} has {count} partitions; there is no partition {partition}"
            )
        return partition

    async def _make_room(self, size: int) -> None:
        """Waits while the buffer cannot take `size` more bytes; the transaction may have
        failed meanwhile."""
        accumulator = self._accumulator
        if accumulator.buffered_bytes and accumulator.buffered_bytes + size > self.buffer_memory:
            await self._wait_for_space(size)
            if self._txn is not None:
                self._txn.check_sendable()

    async def _wait_for_space(self, size: int) -> None:
        # A record larger than the whole buffer still goes once the buffer is empty.
        accumulator = self._accumulator
        while accumulator.buffered_bytes and accumulator.buffered_bytes + size > self.buffer_memory:
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
                wait = self.retry_backoff
            if any(queue.has_work() for queue in self._queues.values()):
                wait = EXPIRY_CHECK_SECONDS if wait is None else min(wait, EXPIRY_CHECK_SECONDS)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wakeup.wait()

    def _needs_producer_id(self) -> bool:
        """An idempotent (not transactional) producer gets its id lazily, and bumps its epoch
        once nothing is in flight any more."""
        if not self.idempotent or self._txn is not None:
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
                    "transaction_timeout": self.transaction_timeout_ms,
                    "producer_id": current.producer_id if bump and current else -1,
                    "producer_epoch": current.producer_epoch if bump and current else -1,
                },
            )
            raise_for(response.error_code, None, "InitProducerId")
        except KafkaError as exc:
            log.warning("InitProducerId failed (retrying after a backoff): %s", exc)
            await asyncio.sleep(self.retry_backoff)
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
        self._use_identity(identity)

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

    def _send_ready(self, now: float) -> float | None:
        """Writes the Produce requests that are due; returns how long until the next batch
        may be (None: until something happens)."""
        if not self._may_send():
            return None
        wait: float | None = None
        # Per leader, rounds of batches: a request holds at most one batch per partition, so
        # a partition's second batch in flight goes in the next round's request.
        by_leader: dict[int, tuple[BrokerConnection, list[list[tuple[_Batch, int]]]]] = {}
        for topic_partition, queue in self._queues.items():
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
            for round_index in range(self.max_in_flight):
                batch, later = self._next_batch(topic_partition, queue, now)
                if later is not None:
                    wait = _earliest(wait, later)
                if batch is None:
                    break
                queue.in_flight.append(batch)
                self._in_flight_total += 1
                self._idle.clear()
                _, rounds = by_leader.setdefault(partition.leader_id, (connection, []))
                if len(rounds) <= round_index:
                    rounds.append([])
                rounds[round_index].append((batch, partition.leader_epoch))
        for connection, rounds in by_leader.values():
            for group in rounds:
                self._produce(connection, group)
        return wait

    def _next_batch(
        self, topic_partition: TopicPartition, queue: _PartitionQueue, now: float
    ) -> tuple[_Batch | None, float | None]:
        if queue.retries:
            if queue.in_flight:
                return None, None  # resend only once everything sent before has come back
            return queue.retries.pop(0), None
        if len(queue.in_flight) >= self.max_in_flight or not queue.pending:
            return None, None
        txn = self._txn
        if txn is not None and not txn.tv2 and topic_partition not in txn.transaction.partitions:
            self._add_to_transaction(topic_partition)
            return None, None
        oldest = queue.pending.first_enqueued
        full = queue.pending.size >= self.batch_size
        if not (full or self._flushing or now - oldest >= self.linger):
            return None, oldest + self.linger - now
        limit: int | None = None
        if self.idempotent:
            sequences = queue.sequences
            room = self.sequence_overflow_threshold - sequences.next_sequence + 1
            if room <= 0:
                self._sequence_overflow(topic_partition, queue)
                return None, None
            window = DUPLICATE_WINDOW + 1
            if sequences.unacknowledged:
                window = sequences.unacknowledged[0][0] + window - sequences.next_sequence
            if window <= 0:
                return None, None  # wait for acknowledgements
            limit = min(room, window)
        batch = self._take_batch(topic_partition, queue, limit)
        if self.idempotent:
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
            f"{self.sequence_overflow_threshold} within one transaction"
        )
        overflowing = queue.pending.take_all()
        if overflowing is not None:
            self._give_up(_Batch(topic_partition, overflowing, 0.0, -1), error)
        self._transaction_failed(error)

    def _take_batch(
        self, topic_partition: TopicPartition, queue: _PartitionQueue, limit: int | None
    ) -> _Batch:
        # The longest prefix within both bounds, at least one record (compiled when built).
        records = queue.pending.take(self.batch_size, limit)
        deadline = records.first_enqueued + self.delivery_timeout
        return _Batch(topic_partition, records, deadline, next(self._serials))

    def _batch_bytes(self, batch: _Batch) -> bytes:
        identity = self._identity if self.idempotent else NON_IDEMPOTENT
        assert identity is not None
        built_for = (identity, batch.base_sequence)
        if batch.data is None or batch.built_for != built_for:
            encoded, base_timestamp, max_timestamp = batch.records.frame()
            batch.data = build_framed_batch(
                encoded,
                len(batch.records),
                base_timestamp,
                max_timestamp,
                codec=self.codec,
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
                await asyncio.sleep(self.retry_backoff)
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
                await asyncio.sleep(self.retry_backoff)
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
                try:
                    await txn.add_partitions(
                        self._current_identity(), partitions, self._deadline(None)
                    )
                except KafkaError as exc:
                    if txn.state is TransactionState.IN_TRANSACTION:
                        self._transaction_failed(exc)
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
                self.transactional_id,
                self.acks,
                self.request_timeout_ms,
                list(topics.values()),
            )
        )
        batches = [batch for batch, _epoch in group]
        names_by_id = {t.topic_id: name for name, t in topics.items() if t.topic_id is not None}
        self.stats.produce_requests += 1
        if self.acks == 0:
            self._background(self._produce_without_answer(connection, version, body, batches))
            return
        try:
            answer = connection.send_encoded(ApiKey.PRODUCE, version, body)
        except KafkaError as exc:
            for batch in batches:
                self._attempt_failed(batch, exc)
            return
        self._background(self._await_answer(answer, batches, version, names_by_id))

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

    async def _await_answer(
        self, answer: Any, batches: list[_Batch], version: int, names_by_id: dict[Any, str]
    ) -> None:
        try:
            response = await answer
        except KafkaError as exc:
            for batch in batches:
                self._attempt_failed(batch, exc)
            return
        except Exception as exc:  # a bug must not leave futures pending forever
            log.exception("a Produce request failed")
            for batch in batches:
                self._attempt_failed(batch, KafkaConnectionError(f"unexpected failure: {exc!r}"))
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
        for batch in batches:
            partition_answer = answers.get(batch.topic_partition)
            if partition_answer is None:
                self._attempt_failed(
                    batch, error_for(ErrorCode.unknown_server_error, "Produce response left it out")
                )
                continue
            self._answered(batch, partition_answer)

    def _answered(self, batch: _Batch, answer: Any) -> None:
        self._leave_flight(batch)
        queue = self._queues[batch.topic_partition]
        code = ErrorCode(answer.error_code)
        next_expected = not self.idempotent or queue.sequences.is_next_expected(batch.base_sequence)
        outcome = classify(
            code,
            idempotent=self.idempotent,
            transactional=self._txn is not None,
            next_expected=next_expected,
        )
        if outcome is Outcome.DELIVERED:
            if self.idempotent:
                with contextlib.suppress(KeyError):  # renumbered meanwhile: still delivered
                    queue.sequences.acknowledge(batch.base_sequence)
            if code == ErrorCode.duplicate_sequence_number:
                self.stats.duplicates += 1
                self._complete(batch, NO_OFFSET, -1)
                return
            append_time = getattr(answer, "log_append_time", None)
            timestamp = -1 if append_time is None else int(append_time.timestamp() * 1000)
            self._complete(batch, int(answer.base_offset), timestamp)
            return
        error = error_for(code, getattr(answer, "error_message", None), str(batch.topic_partition))
        if code in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch):
            self.stats.leader_epoch_refreshes += 1
        self._failed(batch, outcome, error)

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
                self._transaction_failed(error)  # an epoch bump may be abortable (see fail)
            else:
                self._fail_queued(error)
        else:  # ABORTABLE, FAILED: giving up makes an open transaction abortable
            self._give_up(batch, error)

    def _retry(self, batch: _Batch, error: KafkaError) -> None:
        now = asyncio.get_running_loop().time()
        retry_at = now + self.retry_backoff
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
        if self.idempotent and batch.base_sequence != NO_SEQUENCE:
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
            self._transaction_failed(
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
        self._accumulator.buffered_bytes -= batch.records.size
        self._space_freed.set()
        self._wakeup.set()

    def _expire(self, now: float) -> None:
        """Fails records whose delivery timeout passed while they waited to be sent."""
        for topic_partition, queue in self._queues.items():
            expired = queue.pending.take_expired(now - self.delivery_timeout)
            if expired is not None:
                error = KafkaTimeoutError(
                    f"{len(expired)} records for {topic_partition} found no leader or "
                    "connection within the delivery timeout"
                )
                self._give_up(_Batch(topic_partition, expired, now, -1), error)
            for batch in [b for b in queue.retries if b.deadline <= now]:
                queue.retries.remove(batch)
                self._give_up(batch, KafkaTimeoutError(f"{topic_partition}: delivery timeout"))

    def _fail_queued(self, error: KafkaError) -> None:
        """Fails every record not in flight (queued, or waiting to be resent)."""
        for topic_partition, queue in self._queues.items():
            leftovers = queue.pending.take_all()
            if leftovers is not None:
                self._give_up(_Batch(topic_partition, leftovers, 0.0, -1), error)
            retries, queue.retries = queue.retries, []
            for batch in retries:
                self._give_up(batch, error)

    def _fail_everything(self, error: KafkaError) -> None:
        self._fail_queued(error)
        for future in list(self._accumulator.unfinished):
            if not future.done():
                future.set_exception(type(error)(error.message))


def _timestamp(timestamp_ms: int | None) -> int:
    """A record's timestamp: now when not given; a given one must fit the int64 field."""
    if timestamp_ms is None:
        return int(time.time() * 1000)
    if not -(2**63) <= timestamp_ms < 2**63:
        raise ValueError(f"timestamp_ms {timestamp_ms} is not a 64-bit integer")
    return int(timestamp_ms)


def _as_bytes(data: Any) -> bytes | None:
    """A key, value or header value as bytes (a bytearray or memoryview is copied now: the
    record must not change while it waits to be sent)."""
    return data if data is None or type(data) is bytes else bytes(data)


def _earliest(current: float | None, candidate: float) -> float:
    candidate = max(candidate, 0.0)
    return candidate if current is None else min(current, candidate)
