# client/producer.py — lockgate's asyncio producer: partitioning, batching per partition,
# compression, acks, retries; idempotence (on by default with acks=-1), transactions (the
# classic protocol and transaction version 2), KIP-939 two-phase commit, and KIP-359 leader
# epochs in every Produce request.
#
# This module is the producer's API: send(), send_batch(), flush(), close() and the
# transaction calls. What goes on the wire, and when, is the Sender's (sender.py), which the
# Producer builds, starts and stops; the two share the accumulator (records queued by the API,
# taken off by the sender) and the TransactionManager.
#
# Invariants (those of the wire, in-flight limits, retries, sequences and epoch bumps are
# listed in sender.py):
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
import itertools
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lockgate.client import fastpath
from lockgate.client.batches import ProducerIdentity, size_bound
from lockgate.client.cluster import Cluster, ClusterClient, TopicInfo, TopicPartition
from lockgate.client.connection import DEFAULT_CLIENT_ID
from lockgate.client.errors import (
    ErrorCode,
    InvalidTxnStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from lockgate.client.partitioner import DefaultPartitioner
from lockgate.client.security import ClientSecurity
from lockgate.client.sender import ProducerStats, RecordMetadata, Sender, SenderSettings
from lockgate.client.sequences import MAX_IN_FLIGHT, SEQUENCE_LIMIT
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
from lockgate.protocol.records import COMPRESSION_CODECS

log = logging.getLogger(__name__)

__all__ = [
    "ConsumerGroupMetadata",
    "OffsetAndMetadata",
    "PreparedTxnState",
    "Producer",
    "ProducerStats",
    "RecordMetadata",
    "TransactionAbortedError",
]


class Producer(ClusterClient):
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
        super().__init__(
            bootstrap_servers, cluster, client_id, security, request_timeout_ms, retry_backoff_ms
        )
        cluster = self.cluster
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
        # The per-record work of send() and send_batch() is compiled when built (fastpath.py);
        # chosen per producer, so that LOCKGATE_PURE_PYTHON=1 takes effect for new ones.
        self._fastpath = fastpath.load()
        settings = SenderSettings(
            acks=self.acks,
            codec=self.codec,
            linger=self.linger,
            batch_size=self.batch_size,
            max_request_size=self.max_request_size,
            buffer_memory=self.buffer_memory,
            request_timeout_ms=self.request_timeout_ms,
            delivery_timeout=self.delivery_timeout,
            retry_backoff=self.retry_backoff,
            idempotent=self.idempotent,
            max_in_flight=self.max_in_flight,
            transaction_timeout_ms=self.transaction_timeout_ms,
            max_block=self.max_block,
            sequence_overflow_threshold=self.sequence_overflow_threshold,
            transactional_id=self.transactional_id,
        )
        self._sender = Sender(cluster, settings, self._txn, self.stats, self._fastpath)
        # send() and send_batch() queue records through it; the sender takes them from there.
        self._accumulator = self._sender.accumulator
        self._topic_infos: dict[str, TopicInfo] = {}
        self._closing = False

    async def start(self) -> None:
        await super().start()
        self._sender.start()
        self._accumulator.start(asyncio.get_running_loop())

    @property
    def implementation(self) -> str:
        """Which implementation does the per-record work: "compiled" (lockgate's C extension)
        or "pure" (Python: the extension was not built, or LOCKGATE_PURE_PYTHON=1)."""
        return str(self._fastpath.IMPLEMENTATION)

    @property
    def identity(self) -> ProducerIdentity | None:
        """The producer id and epoch in use (None before an idempotent producer has one)."""
        return self._sender.identity

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
            self._sender.wake()  # a batch just filled: as above
            await asyncio.sleep(0)
        elif len(queue) == 1:
            self._sender.wake()
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
        accumulator = self._accumulator
        accumulator.prune()
        waiting = list(accumulator.unfinished)
        if not waiting:
            return
        with self._sender.flushing():
            # One record at a time: most are done by the time we look at them, so few need a
            # callback. asyncio.wait, not await: a cancelled flush must not cancel the records.
            for future in waiting:
                if not future.done():
                    await asyncio.wait([future])

    async def close(self) -> None:
        """Flushes, then stops. Records still unfinished after the delivery timeout fail. An
        open transaction is left to the coordinator (its timeout aborts it; a two-phase one
        waits for complete_transaction from the next instance)."""
        if self._closing:
            return
        try:
            if self._sender.started:
                await self.flush()
        finally:
            self._closing = True
            self._accumulator.sendable = False
            await self._sender.stop()
            await super().close()

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
        self._sender.use_identity(identity)
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
        identity = self._sender.current_identity()
        deadline = self._deadline(timeout_ms)
        txn.transaction.offsets_sent = True  # the coordinator may have it even if we fail
        try:
            if not txn.tv2:
                await txn.add_offsets(identity, group.group_id, deadline)
            await txn.commit_offsets(identity, normalised, group, deadline)
        except KafkaTimeoutError:
            raise  # may be called again
        except KafkaError as exc:
            self._sender.transaction_failed(exc)
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
        self._sender.fail_queued(TransactionAbortedError("the transaction was aborted"))
        await self._sender.wait_idle(deadline)
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
        identity = self._sender.current_identity()
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
        identity = self._sender.current_identity()
        if txn.has_anything:
            try:
                next_identity = await txn.end_txn(identity, commit, deadline)
            except KafkaTimeoutError:
                raise  # still COMMITTING / ABORTING: the call may be repeated
            except KafkaError as exc:
                self._sender.transaction_failed(exc)
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
                next_identity = self._sender.current_identity()
            if txn.tv2:
                self._sender.use_identity(next_identity)
        if not txn.tv2 and (self._sender.sequence_gap or txn.end_txn_in_doubt):
            # Sequences were used that the partitions may never have seen: start a new epoch
            # (KIP-360) rather than run into OUT_OF_ORDER_SEQUENCE_NUMBER next time. An EndTxn
            # whose answer was lost may still arrive, and under the same epoch it would end
            # the next transaction: the new epoch makes the coordinator refuse it (TV2's
            # EndTxn bumps the epoch itself).
            try:
                bumped, _ = await txn.init_producer_id(deadline=deadline, current=identity)
            except KafkaError as exc:
                self._sender.transaction_failed(exc)
                raise
            self._sender.use_identity(bumped)
            txn.end_txn_in_doubt = False
            self.stats.epoch_bumps += 1
        if commit:
            self.stats.transactions_committed += 1
        else:
            self.stats.transactions_aborted += 1
        txn.transition(TransactionState.READY)

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
        identity = self._sender.current_identity()
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
        self._sender.use_identity(next_identity)

    def _require_transactional(self) -> TransactionManager:
        if self._txn is None:
            raise InvalidTxnStateError("this producer has no transactional_id")
        return self._txn

    def _deadline(self, timeout_ms: int | None) -> float:
        seconds = self.max_block if timeout_ms is None else timeout_ms / 1000
        return asyncio.get_running_loop().time() + seconds

    def _check_open(self) -> None:
        if self._closing or not self._sender.started:
            raise KafkaConnectionError("the producer is closed" if self._closing else "not started")

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
            await self._sender.wait_for_space(size)
            if self._txn is not None:
                self._txn.check_sendable()


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
