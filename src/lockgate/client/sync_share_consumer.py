# client/sync_share_consumer.py — a blocking facade over the asyncio share consumer, shaped
# like confluent-kafka's ShareConsumer: a config dict with Kafka's property names
# (share.acknowledgement.mode, share.acquire.mode, max.poll.records, ...), poll() returning the
# batch one poll brought, acknowledge(), commit_sync() (timeouts in seconds).
#
# Invariants: the asyncio share consumer lives on its own loop thread (loop_thread.py) and only
# that thread touches it; acknowledgement callbacks run on that thread, inside poll(),
# commit_sync() and close().
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import KafkaError
from lockgate.client.loop_thread import LoopThread
from lockgate.client.properties import (
    CONNECTION_PROPERTIES,
    PropertyTable,
    options_from_properties,
)
from lockgate.client.share_consumer import ShareConsumer as AsyncShareConsumer
from lockgate.client.share_records import ShareRecord
from lockgate.client.share_session import AcknowledgeType

__all__ = ["AcknowledgeType", "ShareConsumer", "share_consumer_options"]

_DEFAULT_TIMEOUT_S = 60.0

# Kafka property → (keyword of the asyncio ShareConsumer, conversion). Kafka refuses the
# consumer-group properties that mean nothing to a share group (auto.offset.reset,
# enable.auto.commit, group.instance.id, isolation.level, session.timeout.ms, ...): they are
# group configs there, so they are unknown here too.
_PROPERTIES: PropertyTable = {
    **CONNECTION_PROPERTIES,
    "group.id": ("group_id", str),
    "share.acknowledgement.mode": ("acknowledgement_mode", lambda v: str(v).lower()),
    "share.acquire.mode": ("acquire_mode", lambda v: str(v).lower()),
    "max.poll.records": ("max_poll_records", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "fetch.wait.max.ms": ("fetch_max_wait_ms", int),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "check.crcs": ("check_crcs", lambda v: str(v).lower() in ("true", "1")),
    "client.rack": ("client_rack", str),
}


def share_consumer_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka property names → the asyncio ShareConsumer's keywords; unknown properties raise."""
    return options_from_properties(
        config, _PROPERTIES, unknown="unsupported share consumer property", name_bad_values=True
    )


class ShareConsumer:
    """`ShareConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "g"})`. Keyword
    arguments go straight to lockgate.client.share_consumer.ShareConsumer."""

    def __init__(self, config: Mapping[str, Any] | None = None, **options: Any) -> None:
        merged = {**share_consumer_options(dict(config or {})), **options}
        self._worker = LoopThread("lockgate-share-consumer-loop")
        self._consumer = self._worker.start_client(lambda: AsyncShareConsumer(**merged), None)

    async def _call(self, function: Callable[[], Any]) -> Any:
        return function()

    @property
    def member_id(self) -> str:
        return self._consumer.member_id

    def subscribe(self, topics: Iterable[str]) -> None:
        names = list(topics)
        self._worker.run(self._call(lambda: self._consumer.subscribe(names)), None)

    def unsubscribe(self) -> None:
        self._worker.run(self._consumer.unsubscribe(), _DEFAULT_TIMEOUT_S)

    def subscription(self) -> list[str]:
        result: list[str] = self._worker.run(self._call(self._consumer.subscription), None)
        return result

    def assignment(self) -> list[TopicPartition]:
        result: list[TopicPartition] = self._worker.run(self._call(self._consumer.assignment), None)
        return result

    def poll(self, timeout: float | None = None) -> list[ShareRecord]:
        """The records one poll brought (maybe none within `timeout` seconds)."""
        wait = _DEFAULT_TIMEOUT_S if timeout is None or timeout < 0 else timeout
        result: list[ShareRecord] = self._worker.run(self._consumer.poll(int(wait * 1000)), wait)
        return result

    def acknowledge(
        self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        self._worker.run(self._call(lambda: self._consumer.acknowledge(record, type)), None)

    def acknowledge_offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        type: AcknowledgeType = AcknowledgeType.ACCEPT,
    ) -> None:
        self._worker.run(
            self._call(lambda: self._consumer.acknowledge_offset(topic, partition, offset, type)),
            None,
        )

    def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Sends the pending acknowledgements and returns each partition's outcome."""
        wait = _DEFAULT_TIMEOUT_S if timeout is None else timeout
        result: dict[TopicPartition, KafkaError | None] = self._worker.run(
            self._consumer.commit(), wait
        )
        return result

    @property
    def acquisition_lock_timeout_ms(self) -> int | None:
        return self._consumer.acquisition_lock_timeout_ms

    def close(self) -> None:
        """Acknowledges (implicit mode), closes the share sessions, leaves the group and stops
        the loop thread."""
        if self._worker.stopped:
            return
        try:
            self._worker.run(self._consumer.close(), _DEFAULT_TIMEOUT_S)
        finally:
            self._worker.stop()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
