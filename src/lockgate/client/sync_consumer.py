# client/sync_consumer.py — a blocking facade over the asyncio consumer, shaped like
# confluent-kafka's Consumer: a config dict with Kafka's property names, poll() returning one
# message or None, consume(), commit(), and the group calls (timeouts in seconds).
#
# Invariants: the asyncio consumer lives on its own loop thread (loop_thread.py), and only that
# thread touches it. Rebalance callbacks run on that thread too, inside poll().
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer as AsyncConsumer
from lockgate.client.consumer import Message
from lockgate.client.loop_thread import LoopThread
from lockgate.client.properties import (
    CONNECTION_PROPERTIES,
    PropertyTable,
    options_from_properties,
)
from lockgate.client.transactions import ConsumerGroupMetadata, OffsetAndMetadata

__all__ = ["Consumer", "consumer_options"]

RebalanceCallback = Callable[["Consumer", list[TopicPartition]], None]
_DEFAULT_TIMEOUT_S = 60.0
_RESET_ALIASES = {
    "smallest": "earliest",
    "beginning": "earliest",
    "largest": "latest",
    "end": "latest",
}

# Kafka property → (keyword of the asyncio Consumer, conversion).
_PROPERTIES: PropertyTable = {
    **CONNECTION_PROPERTIES,
    "group.id": ("group_id", str),
    "group.instance.id": ("group_instance_id", str),
    "auto.offset.reset": (
        "auto_offset_reset",
        lambda v: {"smallest": "earliest", "largest": "latest"}.get(v, v),
    ),
    "enable.auto.commit": ("enable_auto_commit", lambda v: str(v).lower() in ("true", "1")),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", int),
    "isolation.level": ("isolation_level", str),
    "session.timeout.ms": ("session_timeout_ms", int),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", int),
    "max.poll.interval.ms": ("max_poll_interval_ms", int),
    "partition.assignment.strategy": (
        "partition_assignment_strategy",
        lambda v: [s.strip() for s in str(v).split(",") if s.strip()],
    ),
    "group.protocol": ("group_protocol", lambda v: str(v).lower()),
    "group.remote.assignor": ("group_remote_assignor", str),
    "fetch.wait.max.ms": ("fetch_max_wait_ms", int),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "client.rack": ("client_rack", str),
}


def consumer_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka property names → the asyncio Consumer's keywords; unknown properties raise."""
    return options_from_properties(
        config, _PROPERTIES, unknown="unsupported consumer property", name_bad_values=False
    )


class _Listener:
    def __init__(
        self,
        owner: Consumer,
        on_assign: RebalanceCallback | None,
        on_revoke: RebalanceCallback | None,
    ) -> None:
        self.owner, self.on_assign, self.on_revoke = owner, on_assign, on_revoke

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if self.on_revoke is not None:
            self.on_revoke(self.owner, revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        if self.on_assign is not None:
            self.on_assign(self.owner, assigned)


class Consumer:
    """`Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "g"})`. Keyword
    arguments go straight to lockgate.client.consumer.Consumer (they win over the dict)."""

    def __init__(self, config: Mapping[str, Any] | None = None, **options: Any) -> None:
        merged = {**consumer_options(dict(config or {})), **options}
        self._worker = LoopThread("lockgate-consumer-loop")
        self._buffer: deque[Message] = deque()
        self._consumer = self._worker.start_client(lambda: AsyncConsumer(**merged), None)

    async def _call(self, function: Callable[[], Any]) -> Any:
        return function()

    def subscribe(
        self,
        topics: Iterable[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        listener = _Listener(self, on_assign, on_revoke)
        self._worker.run(
            self._call(lambda: self._consumer.subscribe(topics, listener=listener)), None
        )

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._worker.run(self._call(lambda: self._consumer.assign(partitions)), None)

    def assignment(self) -> list[TopicPartition]:
        result: list[TopicPartition] = self._worker.run(self._call(self._consumer.assignment), None)
        return result

    def poll(self, timeout: float | None = None) -> Message | None:
        """One message, or None when none came within `timeout` seconds."""
        if not self._buffer:
            wait = _DEFAULT_TIMEOUT_S if timeout is None or timeout < 0 else timeout
            self._buffer.extend(self._worker.run(self._consumer.poll(int(wait * 1000)), wait))
        return self._buffer.popleft() if self._buffer else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        first = self.poll(timeout)
        if first is None:
            return []
        batch = [first]
        while self._buffer and len(batch) < num_messages:
            batch.append(self._buffer.popleft())
        return batch

    def commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        asynchronous: bool = False,
    ) -> None:
        """Commits the positions (default) or the given offsets; with asynchronous=True the
        commit runs in the background (failures are logged by the consumer)."""
        if asynchronous:
            self._worker.run(self._call(lambda: self._consumer.commit_async(offsets)), None)
        else:
            self._worker.run(self._consumer.commit(offsets), _DEFAULT_TIMEOUT_S)

    def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        wait = _DEFAULT_TIMEOUT_S if timeout is None else timeout
        result: dict[TopicPartition, OffsetAndMetadata | None] = self._worker.run(
            self._consumer.committed(partitions, timeout_ms=int(wait * 1000)), wait
        )
        return result

    def position(self, partition: TopicPartition) -> int:
        result: int = self._worker.run(self._consumer.position(partition), _DEFAULT_TIMEOUT_S)
        return result

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        result: ConsumerGroupMetadata = self._worker.run(
            self._call(self._consumer.group_metadata), None
        )
        return result

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._worker.run(self._call(lambda: self._consumer.pause(partitions)), None)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._worker.run(self._call(lambda: self._consumer.resume(partitions)), None)

    def close(self) -> None:
        """Commits (auto commit), leaves the group and stops the loop thread."""
        if self._worker.stopped:
            return
        try:
            self._worker.run(self._consumer.close(), _DEFAULT_TIMEOUT_S)
        finally:
            self._worker.stop()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
