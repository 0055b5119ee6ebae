# client/producer.py — a plain (non-idempotent) asyncio producer: partitioning, batching per
# partition, compression, acks, retries of retriable errors until the delivery timeout.
#
# Invariants:
# - At most one batch per partition is in flight, so records of one partition are appended in
#   the order they were sent even across retries (like the Java client with
#   max.in.flight.requests.per.connection=1). Different partitions proceed in parallel, and
#   requests to one broker are pipelined on its connection.
# - A retried batch is resent byte for byte. Without idempotence a retry after a lost response
#   can append the batch twice: that is Kafka's at-least-once contract for such producers.
# - Every record's future completes: with its offset, with the batch's error, or with the last
#   retriable error once its delivery timeout has passed.
#
# Idempotence and transactions come later: InitProducerId fills a ProducerIdentity
# (batches.py) and each partition queue gets the next sequence number; nothing here pretends to
# do either yet.
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockgate.client.batches import NON_IDEMPOTENT, OutgoingRecord, build_producer_batch
from lockgate.client.cluster import Cluster, TopicInfo, TopicPartition
from lockgate.client.connection import DEFAULT_CLIENT_ID
from lockgate.client.errors import (
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    MessageTooLargeError,
    UnknownTopicOrPartitionError,
    error_for,
)
from lockgate.client.partitioner import DefaultPartitioner
from lockgate.protocol.api import ApiKey
from lockgate.protocol.records import COMPRESSION_CODECS, NO_SEQUENCE

log = logging.getLogger(__name__)

FIRST_PRODUCE_VERSION = 3  # record batch v2
FIRST_TOPIC_ID_VERSION = 13
NO_OFFSET = -1


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int  # -1 with acks=0: the broker does not say
    timestamp: int  # the broker's time when the topic uses LogAppendTime, else the record's

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(slots=True)
class _Pending:
    record: OutgoingRecord
    size: int
    future: asyncio.Future[RecordMetadata]
    enqueued: float  # loop time


@dataclass(slots=True)
class _Batch:
    topic_partition: TopicPartition
    records: list[_Pending]
    deadline: float  # loop time after which a retriable failure is final
    data: bytes = b""
    attempts: int = 0


@dataclass(slots=True)
class _PartitionQueue:
    pending: deque[_Pending] = field(default_factory=deque)
    pending_bytes: int = 0
    retry: _Batch | None = None  # goes before `pending`
    in_flight: bool = False
    not_before: float = 0.0  # retry backoff

    def has_work(self) -> bool:
        return bool(self.pending) or self.retry is not None


class Producer:
    """`async with Producer("host:port") as producer: await producer.send_and_wait(...)`.

    `acks`: 0, 1 or -1 (all). `compression`: none, gzip, snappy, lz4 or zstd. `linger_ms`:
    how long a partition's first record may wait for others before its batch is sent.
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
        batch_size: int = 16_384,
        max_request_size: int = 1_048_576,
        buffer_memory: int = 33_554_432,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        retry_backoff_ms: int = 100,
        allow_auto_topic_creation: bool = True,
    ) -> None:
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1, not {acks}")
        if compression not in COMPRESSION_CODECS:
            raise ValueError(
                f"compression must be one of {', '.join(COMPRESSION_CODECS)}, not {compression!r}"
            )
        if cluster is None:
            if bootstrap_servers is None:
                raise ValueError("give bootstrap_servers or a cluster")
            cluster = Cluster(
                bootstrap_servers,
                client_id=client_id,
                request_timeout_ms=request_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
            )
            self._owns_cluster = True
        else:
            self._owns_cluster = False
        self.cluster = cluster
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
        self.partitioner = DefaultPartitioner()
        self._identity = NON_IDEMPOTENT
        self._queues: dict[TopicPartition, _PartitionQueue] = {}
        self._buffered_bytes = 0
        self._space_freed = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._unfinished: set[asyncio.Future[RecordMetadata]] = set()
        self._flushing = 0
        self._sender: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._closing = False

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._owns_cluster:
            await self.cluster.start()
        self._sender = asyncio.create_task(self._run(), name="lockgate-producer-sender")

    # ------------------------------------------------------------------------------------------
    # The caller's side

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
        buffer is full; raises at once for an unknown topic or partition or an oversized record."""
        if self._closing or self._sender is None:
            raise KafkaConnectionError("the producer is closed" if self._closing else "not started")
        info = await self.cluster.topic(
            topic, allow_auto_topic_creation=self.allow_auto_topic_creation
        )
        chosen = self._choose_partition(info, key, partition)
        record = OutgoingRecord(
            key,
            value,
            tuple(headers),
            int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
        )
        size = record.size_bound()
        if size > self.max_request_size:
            raise MessageTooLargeError(
                f"a record of about {size} bytes exceeds max_request_size {self.max_request_size}"
            )
        await self._wait_for_space(size)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        self._unfinished.add(future)
        future.add_done_callback(self._unfinished.discard)
        queue = self._queues.setdefault(TopicPartition(topic, chosen), _PartitionQueue())
        queue.pending.append(_Pending(record, size, future, loop.time()))
        queue.pending_bytes += size
        self._buffered_bytes += size
        if queue.pending_bytes >= self.batch_size or len(queue.pending) == 1:
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

    async def flush(self) -> None:
        """Sends everything queued now, ignoring linger, and waits until each record has its
        outcome (errors stay in the records' futures)."""
        waiting = list(self._unfinished)
        if not waiting:
            return
        self._flushing += 1
        self._wakeup.set()
        try:
            await asyncio.gather(*waiting, return_exceptions=True)
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        """Flushes, then stops. Records still unfinished after the delivery timeout fail."""
        if self._closing:
            return
        try:
            if self._sender is not None:
                await self.flush()
        finally:
            self._closing = True
            self._wakeup.set()
            if self._sender is not None:
                self._sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sender
            for task in list(self._requests):
                task.cancel()
            await asyncio.gather(*self._requests, return_exceptions=True)
            self._fail_everything(KafkaConnectionError("the producer was closed"))
            if self._owns_cluster:
                await self.cluster.close()

    def _choose_partition(self, info: TopicInfo, key: bytes | None, partition: int | None) -> int:
        count = len(info.partitions)
        if partition is None:
            return self.partitioner(info.name, key, count)
        if not 0 <= partition < count:
            raise UnknownTopicOrPartitionError(
                f"topic {info.name} has {count} partitions; there is no partition {partition}"
            )
        return partition

    async def _wait_for_space(self, size: int) -> None:
        # A record larger than the whole buffer still goes once the buffer is empty.
        while self._buffered_bytes and self._buffered_bytes + size > self.buffer_memory:
            self._space_freed.clear()
            await self._space_freed.wait()

    # ------------------------------------------------------------------------------------------
    # The sender

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            self._wakeup.clear()
            ready, wait = self._drain_ready(loop.time())
            if ready:
                task = asyncio.create_task(self._send_batches(ready))
                self._requests.add(task)
                task.add_done_callback(self._requests.discard)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wakeup.wait()

    def _drain_ready(self, now: float) -> tuple[list[_Batch], float | None]:
        """Batches to send now, and how long until the next one may be ready (None: until
        something happens)."""
        ready: list[_Batch] = []
        wait: float | None = None
        for topic_partition, queue in self._queues.items():
            if queue.in_flight or not queue.has_work():
                continue
            if queue.not_before > now:
                wait = _earliest(wait, queue.not_before - now)
                continue
            if queue.retry is not None:
                batch, queue.retry = queue.retry, None
            else:
                oldest = queue.pending[0].enqueued
                full = queue.pending_bytes >= self.batch_size
                if not (full or self._flushing or now - oldest >= self.linger):
                    wait = _earliest(wait, oldest + self.linger - now)
                    continue
                batch = self._take_batch(topic_partition, queue)
            queue.in_flight = True
            ready.append(batch)
        return ready, wait

    def _take_batch(self, topic_partition: TopicPartition, queue: _PartitionQueue) -> _Batch:
        records: list[_Pending] = []
        size = 0
        while queue.pending and (not records or size + queue.pending[0].size <= self.batch_size):
            pending = queue.pending.popleft()
            records.append(pending)
            size += pending.size
        queue.pending_bytes -= size
        deadline = records[0].enqueued + self.delivery_timeout
        data = build_producer_batch(
            [p.record for p in records],
            codec=self.codec,
            identity=self._identity,
            base_sequence=NO_SEQUENCE,
        )
        return _Batch(topic_partition, records, deadline, data)

    async def _send_batches(self, batches: list[_Batch]) -> None:
        """Finds each batch's leader and sends one Produce request per leader."""
        by_leader: dict[int, list[_Batch]] = {}
        for batch in batches:
            try:
                partition = await self.cluster.partition(batch.topic_partition)
            except KafkaError as exc:
                self._finish(batch, exc)
                continue
            except Exception as exc:  # a bug must not leave the partition in flight forever
                log.exception("finding the leader of %s failed", batch.topic_partition)
                self._finish(batch, KafkaConnectionError(f"unexpected failure: {exc!r}"), True)
                continue
            by_leader.setdefault(partition.leader_id, []).append(batch)
        await asyncio.gather(*(self._produce(leader, group) for leader, group in by_leader.items()))

    async def _produce(self, leader_id: int, batches: list[_Batch]) -> None:
        try:
            connection = await self.cluster.connection(leader_id)
            version = connection.version_for(ApiKey.PRODUCE, min_version=FIRST_PRODUCE_VERSION)
            by_topic: dict[str, list[_Batch]] = {}
            for batch in batches:
                batch.attempts += 1
                by_topic.setdefault(batch.topic_partition.topic, []).append(batch)
            topic_ids = {topic: self._topic_id(topic, version) for topic in by_topic}
            body = {
                "transactional_id": None,
                "acks": self.acks,
                "timeout": self.request_timeout_ms,
                "topic_data": [
                    {
                        "name": topic,
                        "topic_id": topic_ids[topic],
                        "partition_data": [
                            {"index": b.topic_partition.partition, "records": b.data} for b in group
                        ],
                    }
                    for topic, group in by_topic.items()
                ],
            }
            if self.acks == 0:
                await connection.send_without_response(ApiKey.PRODUCE, body, version=version)
                for batch in batches:
                    self._complete(batch, NO_OFFSET, -1)
                return
            response = await connection.request(ApiKey.PRODUCE, body, version=version)
        except KafkaError as exc:
            for batch in batches:
                self._finish(batch, exc)
            return
        except Exception as exc:  # a bug must not leave futures pending forever
            log.exception("producing to broker %s failed", leader_id)
            for batch in batches:
                self._finish(batch, KafkaConnectionError(f"unexpected failure: {exc!r}"), True)
            return
        self._handle_response(response, batches, version, topic_ids)

    def _topic_id(self, topic: str, version: int) -> Any:
        if version < FIRST_TOPIC_ID_VERSION:
            return None
        info = self.cluster.metadata.topics.get(topic)
        if info is None or info.topic_id is None:
            raise UnknownTopicOrPartitionError(f"no topic id known for {topic}")
        return info.topic_id

    def _handle_response(
        self, response: Any, batches: list[_Batch], version: int, topic_ids: dict[str, Any]
    ) -> None:
        names_by_id = {topic_id: name for name, topic_id in topic_ids.items()}
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
            answer = answers.get(batch.topic_partition)
            if answer is None:
                self._finish(
                    batch,
                    error_for(ErrorCode.unknown_server_error, "Produce response left it out"),
                )
                continue
            if answer.error_code != ErrorCode.none:
                self._finish(
                    batch,
                    error_for(
                        answer.error_code,
                        getattr(answer, "error_message", None),
                        str(batch.topic_partition),
                    ),
                )
                continue
            append_time = getattr(answer, "log_append_time", None)
            timestamp = -1 if append_time is None else int(append_time.timestamp() * 1000)
            self._complete(batch, int(answer.base_offset), timestamp)

    # ------------------------------------------------------------------------------------------
    # Outcomes

    def _complete(self, batch: _Batch, base_offset: int, log_append_time: int) -> None:
        topic, partition = batch.topic_partition.topic, batch.topic_partition.partition
        for index, pending in enumerate(batch.records):
            offset = NO_OFFSET if base_offset < 0 else base_offset + index
            timestamp = log_append_time if log_append_time >= 0 else pending.record.timestamp_ms
            if not pending.future.done():
                pending.future.set_result(RecordMetadata(topic, partition, offset, timestamp))
        self._release(batch)

    def _finish(self, batch: _Batch, error: KafkaError, final: bool = False) -> None:
        """A failed attempt: retried after a backoff while retriable and before the deadline,
        otherwise the records fail with `error`."""
        loop = asyncio.get_running_loop()
        queue = self._queues[batch.topic_partition]
        retry_at = loop.time() + self.retry_backoff
        if not final and error.retriable and retry_at < batch.deadline and not self._closing:
            log.debug(
                "retrying %s after %s (attempt %d)", batch.topic_partition, error, batch.attempts
            )
            self.cluster.invalidate(batch.topic_partition.topic)
            queue.retry = batch
            queue.not_before = retry_at
            queue.in_flight = False
            self._wakeup.set()
            return
        for pending in batch.records:
            if not pending.future.done():
                pending.future.set_exception(type(error)(error.message))
        self._release(batch)

    def _release(self, batch: _Batch) -> None:
        queue = self._queues[batch.topic_partition]
        queue.in_flight = False
        self._buffered_bytes -= sum(p.size for p in batch.records)
        self._space_freed.set()
        self._wakeup.set()

    def _fail_everything(self, error: KafkaError) -> None:
        for queue in self._queues.values():
            leftovers = list(queue.pending) + (queue.retry.records if queue.retry else [])
            queue.pending.clear()
            queue.retry = None
            for pending in leftovers:
                if not pending.future.done():
                    pending.future.set_exception(type(error)(error.message))
        for future in list(self._unfinished):
            if not future.done():
                future.set_exception(type(error)(error.message))


def _earliest(current: float | None, candidate: float) -> float:
    candidate = max(candidate, 0.0)
    return candidate if current is None else min(current, candidate)
