# client/sync.py — a blocking facade over the asyncio producer, shaped like confluent-kafka's
# Producer: a config dict with Kafka's property names, produce() and produce_batch() with a
# delivery callback per record served by poll()/flush(), and the transaction calls (timeouts in
# seconds).
#
# Invariants: the asyncio producer lives on its own event loop in one daemon thread, and only
# that thread touches it; the caller's thread submits coroutines and waits for them with a
# bound. Delivery callbacks run on the caller's thread, inside poll() and flush(), never on the
# loop's. close() stops the loop and joins the thread.
from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError, KafkaTimeoutError, UnknownTopicOrPartitionError
from lockgate.client.loop_thread import GRACE_SECONDS, LoopThread
from lockgate.client.producer import Producer as AsyncProducer
from lockgate.client.producer import RecordMetadata
from lockgate.client.properties import (
    CONNECTION_PROPERTIES,
    PropertyTable,
    options_from_properties,
)
from lockgate.client.transactions import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTxnState,
)

__all__ = [
    "ConsumerGroupMetadata",
    "DeliveredMessage",
    "DeliveryCallback",
    "PreparedTxnState",
    "Producer",
]

T = TypeVar("T")
DeliveryCallback = Callable[[KafkaError | None, "DeliveredMessage"], None]

_DEFAULT_BLOCK_SECONDS = 60.0

# Kafka property → (keyword of the asyncio Producer, conversion).
_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def _acks(value: Any) -> int:
    return _ACKS[str(value).lower()]


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text not in ("true", "false"):
        raise ValueError(f"expected true or false, not {value!r}")
    return text == "true"


_PROPERTIES: PropertyTable = {
    **CONNECTION_PROPERTIES,
    "acks": ("acks", _acks),
    "request.required.acks": ("acks", _acks),
    "compression.type": ("compression", str),
    "compression.codec": ("compression", str),
    "linger.ms": ("linger_ms", int),
    "queue.buffering.max.ms": ("linger_ms", int),
    "batch.size": ("batch_size", int),
    "message.max.bytes": ("max_request_size", int),
    "max.request.size": ("max_request_size", int),
    "buffer.memory": ("buffer_memory", int),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "message.timeout.ms": ("delivery_timeout_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "allow.auto.create.topics": ("allow_auto_topic_creation", _bool),
    "enable.idempotence": ("enable_idempotence", _bool),
    "max.in.flight.requests.per.connection": ("max_in_flight_per_partition", int),
    "transactional.id": ("transactional_id", str),
    "transaction.timeout.ms": ("transaction_timeout_ms", int),
    "max.block.ms": ("max_block_ms", int),
    # lockgate's own
    "transaction.version": ("transaction_version", int),
    "sequence.overflow.threshold": ("sequence_overflow_threshold", int),
}


def producer_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of the asyncio Producer for a confluent-style config dict. Unknown
    properties are refused rather than silently ignored."""
    options = options_from_properties(
        config, _PROPERTIES, unknown="unknown producer property", name_bad_values=True
    )
    if "bootstrap_servers" not in options:
        raise ValueError("bootstrap.servers is required")
    return options


@dataclass(frozen=True, slots=True)
class DeliveredMessage:
    """What a delivery callback receives, with confluent-kafka's accessor methods."""

    _topic: str
    _partition: int
    _offset: int
    _timestamp: int
    _key: bytes | None
    _value: bytes | None
    _error: KafkaError | None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> int:
        return self._timestamp

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def error(self) -> KafkaError | None:
        return self._error


# (value, key, partition, headers, timestamp_ms, delivery callback) of one produce_batch() message
_BatchMessage = tuple[
    bytes | None,
    bytes | None,
    int | None,
    list[tuple[str, bytes | None]],
    int | None,
    DeliveryCallback | None,
]


def _bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _batch_message(
    message: dict[str, Any],
    partition: int,
    timestamp: int,
    report: DeliveryCallback | None,
) -> _BatchMessage:
    if not isinstance(message, dict):
        raise TypeError(f"each message must be a dict, not {type(message).__name__}")
    for name in ("value", "key"):
        if not isinstance(message.get(name), bytes | str | None):
            raise TypeError(f"a message's {name} must be bytes, str or None")
    chosen = message.get("partition", partition)
    headers = message.get("headers") or ()
    return (
        _bytes(message.get("value")),
        _bytes(message.get("key")),
        None if chosen is None or chosen < 0 else chosen,
        list(headers.items()) if isinstance(headers, Mapping) else list(headers),
        message.get("timestamp", timestamp) or None,
        message.get("callback") or message.get("on_delivery") or report,
    )


class Producer:
    """`Producer({"bootstrap.servers": "127.0.0.1:9092", "transactional.id": "t"})`.

    Keyword arguments go straight to lockgate.client.producer.Producer (they win over the
    config dict)."""

    def __init__(self, config: Mapping[str, Any] | None = None, **options: Any) -> None:
        merged = {**producer_options(dict(config or {})), **options}
        self._block = merged.get("max_block_ms", _DEFAULT_BLOCK_SECONDS * 1000) / 1000
        self._callbacks: queue.SimpleQueue[tuple[DeliveryCallback | None, DeliveredMessage]] = (
            queue.SimpleQueue()
        )
        self._outstanding = 0
        # _outstanding moves on the caller's and the loop's threads
        self._settled = threading.Lock()
        self._worker = LoopThread("lockgate-producer-loop")
        self._closed = False
        self._producer = self._worker.start_client(lambda: AsyncProducer(**merged), self._block)

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None) -> T:
        if self._closed:
            coroutine.close()
            raise KafkaError("the producer is closed")
        return self._worker.run(coroutine, timeout)

    @staticmethod
    def _ms(timeout: float | None) -> int | None:
        return None if timeout is None or timeout < 0 else int(timeout * 1000)

    # ------------------------------------------------------------------------------------------
    # Records

    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Mapping[str, bytes | None] | Iterable[tuple[str, bytes | None]] | None = None,
        *,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Queues a record; its delivery callback runs from a later poll() or flush()."""
        raw_value = _bytes(value)
        raw_key = _bytes(key)
        header_list = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
        report = on_delivery or callback
        with self._settled:
            self._outstanding += 1
        try:
            self._run(
                self._send(
                    topic,
                    raw_value,
                    raw_key,
                    None if partition < 0 else partition,
                    header_list,
                    timestamp or None,
                    report,
                ),
                self._block,
            )
        except BaseException:
            self._settle()
            raise

    async def _send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes | None]],
        timestamp_ms: int | None,
        report: DeliveryCallback | None,
    ) -> None:
        future = await self._producer.send(
            topic, value, key, partition=partition, headers=headers, timestamp_ms=timestamp_ms
        )
        future.add_done_callback(self._reporter(topic, key, value, partition, report))

    def _reporter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        report: DeliveryCallback | None,
    ) -> Callable[[asyncio.Future[RecordMetadata]], None]:
        """The done-callback (run on the loop's thread) that queues a record's delivery report
        (with its callback, if any) for the caller's next poll() or flush()."""

        def delivered(done: asyncio.Future[RecordMetadata]) -> None:
            error: KafkaError | None = None
            metadata: RecordMetadata | None = None
            if done.cancelled():
                error = KafkaError("cancelled")
            else:
                failure = done.exception()
                if failure is None:
                    metadata = done.result()
                else:
                    error = failure if isinstance(failure, KafkaError) else KafkaError(str(failure))
            message = DeliveredMessage(
                topic,
                metadata.partition if metadata else (partition if partition is not None else -1),
                metadata.offset if metadata else -1,
                metadata.timestamp if metadata else -1,
                key,
                value,
                error,
            )
            # still counted by len() until a poll() or flush() serves it, as librdkafka's
            # queue length counts the delivery reports the application has not served
            self._callbacks.put((report, message))

        return delivered

    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        partition: int = -1,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        *,
        callback: DeliveryCallback | None = None,
    ) -> int:
        """Queues `messages` in order, as produce() would one by one, in one call to the
        producer's thread; each record gets its own delivery report (the message's
        'callback', else `on_delivery`) from a later poll() or flush(). A message is a dict
        with any of 'value', 'key', 'partition', 'timestamp', 'headers', 'callback'. One that
        cannot be queued (unknown partition, too large, outside a transaction, ...) gets its
        error in '_error' and no report; the others are still queued. Returns how many were
        queued (confluent-kafka's shape)."""
        if not isinstance(messages, list):
            raise TypeError("messages must be a list of dicts")
        default_report = on_delivery or callback
        prepared = [
            _batch_message(message, partition, timestamp, default_report) for message in messages
        ]
        errors: list[KafkaError | None] = []  # one per message handled, filled as it goes
        self._run(self._send_batch(topic, prepared, errors), self._block)
        for message, error in zip(messages, errors, strict=False):
            if error is not None:
                message["_error"] = error
        return errors.count(None)

    async def _send_batch(
        self, topic: str, prepared: list[_BatchMessage], errors: list[KafkaError | None]
    ) -> None:
        """Sends each message, noting per message the error that kept it from being queued."""
        send = self._producer.send
        missing_topic: KafkaError | None = None  # found for one message: no need to ask again
        for value, key, partition, headers, timestamp_ms, report in prepared:
            if missing_topic is not None:
                errors.append(missing_topic)
                continue
            try:
                future = await send(
                    topic, value, key, partition=partition, headers=headers,
                    timestamp_ms=timestamp_ms,
                )  # fmt: skip
            except UnknownTopicOrPartitionError as exc:
                errors.append(exc)
                if partition is None:
                    missing_topic = exc
                continue
            except Exception as exc:
                errors.append(exc if isinstance(exc, KafkaError) else KafkaError(str(exc)))
                continue
            with self._settled:  # counted before its report can settle it
                self._outstanding += 1
            future.add_done_callback(self._reporter(topic, key, value, partition, report))
            errors.append(None)

    def _settle(self) -> None:
        with self._settled:
            self._outstanding -= 1

    def poll(self, timeout: float | None = 0) -> int:
        """Serves delivery callbacks; waits up to `timeout` seconds for the first one (None:
        until one comes). Returns how many were served."""
        served = 0
        try:
            first = self._callbacks.get(block=timeout != 0, timeout=timeout or None)
        except queue.Empty:
            return 0
        pending: list[tuple[DeliveryCallback | None, DeliveredMessage]] = [first]
        while True:
            try:
                pending.append(self._callbacks.get_nowait())
            except queue.Empty:
                break
        for report, message in pending:
            try:
                if report is not None:
                    report(message.error(), message)
                    served += 1
            finally:
                self._settle()
        return served

    def flush(self, timeout: float | None = None) -> int:
        """Sends everything now and waits (up to `timeout` seconds) for every outcome, serving
        callbacks. Returns the number of records still without an outcome."""
        wait = None if timeout is None or timeout < 0 else timeout
        with contextlib.suppress(KafkaTimeoutError):
            self._run(self._flush(wait), wait)
        # the last outcomes reach the report queue from the loop's thread just after
        deadline = time.monotonic() + GRACE_SECONDS
        while len(self) and (remaining := deadline - time.monotonic()) > 0:
            self.poll(remaining)
        return len(self)

    async def _flush(self, timeout: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._producer.flush()

    def __len__(self) -> int:
        with self._settled:
            return self._outstanding

    # ------------------------------------------------------------------------------------------
    # Transactions

    def init_transactions(
        self,
        timeout: float | None = None,
        *,
        keep_prepared_txn: bool = False,
        enable_2pc: bool = False,
    ) -> None:
        self._run(
            self._producer.init_transactions(
                keep_prepared_txn, enable_2pc, timeout_ms=self._ms(timeout)
            ),
            timeout if timeout is not None else self._block,
        )

    def begin_transaction(self) -> None:
        async def begin() -> None:
            self._producer.begin_transaction()

        self._run(begin(), self._block)

    def send_offsets_to_transaction(
        self,
        positions: Mapping[TopicPartition, int | OffsetAndMetadata] | Iterable[Any],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """`positions`: {TopicPartition: next offset}, or objects with topic, partition and
        offset attributes (confluent-kafka's TopicPartition)."""
        if isinstance(positions, Mapping):
            offsets = dict(positions)
        else:
            offsets = {
                TopicPartition(item.topic, item.partition): OffsetAndMetadata(
                    item.offset, getattr(item, "metadata", None)
                )
                for item in cast(Iterable[Any], positions)
            }
        self._run(
            self._producer.send_offsets_to_transaction(
                offsets, group_metadata, timeout_ms=self._ms(timeout)
            ),
            timeout if timeout is not None else self._block,
        )

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._run(
            self._producer.commit_transaction(timeout_ms=self._ms(timeout)),
            timeout if timeout is not None else self._block,
        )
        self.poll(0)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._run(
            self._producer.abort_transaction(timeout_ms=self._ms(timeout)),
            timeout if timeout is not None else self._block,
        )
        self.poll(0)

    def prepare_transaction(self) -> PreparedTxnState:
        state = self._run(self._producer.prepare_transaction(), self._block)
        self.poll(0)
        return state

    def complete_transaction(self, state: PreparedTxnState, timeout: float | None = None) -> None:
        self._run(
            self._producer.complete_transaction(state, timeout_ms=self._ms(timeout)),
            timeout if timeout is not None else self._block,
        )

    @property
    def asyncio_producer(self) -> AsyncProducer:
        """The producer inside (use it only from coroutines run on its loop)."""
        return self._producer

    # ------------------------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Flushes, closes the asyncio producer and stops the loop thread."""
        if self._closed:
            return
        try:
            self._run(self._producer.close(), timeout if timeout is not None else self._block)
        finally:
            self.poll(0)
            self._closed = True
            self._worker.stop()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
