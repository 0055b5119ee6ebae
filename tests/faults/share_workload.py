# tests/faults/share_workload.py — share consumers (KIP-932) as fault-run clients: lockgate's
# ShareConsumer in explicit acknowledgement mode, answering each record by a hash of its value
# (the same accept / release-once / reject policy as franz-go's share check: 3 in 10 released on
# its first delivery, 7 in 10 rejected, the rest accepted), recording every delivery and every
# acknowledgement's outcome in the history (checker.py's share rules read them). On any client
# error the reader drops its consumer and starts a new one, as an application would: the broker
# releases what the old one held when its connection closes.
from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import zlib
from collections import Counter
from typing import Any, Literal

from lockgate.client.admin import Admin, ResourceType
from lockgate.client.admin_groups import at_coordinator
from lockgate.client.cluster import TopicPartition
from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import ErrorCode, KafkaError, error_for
from lockgate.client.share_consumer import ShareConsumer
from lockgate.client.share_records import ShareRecord
from lockgate.client.share_session import AcknowledgeType
from tests.faults.history import History

log = logging.getLogger(__name__)

Decision = Literal["accept", "release", "reject"]
KINDS: dict[Decision, AcknowledgeType] = {
    "accept": AcknowledgeType.ACCEPT,
    "release": AcknowledgeType.RELEASE,
    "reject": AcknowledgeType.REJECT,
}
STEP_TIMEOUT_S = 20.0


def decide(value: str, delivery_count: int) -> Decision:
    """The policy, by the value alone (so any reader, and the checker, agree)."""
    bucket = zlib.crc32(value.encode()) % 10
    if bucket == 7:
        return "reject"
    if bucket == 3 and delivery_count == 1:
        return "release"
    return "accept"


async def configure_group(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Sets a share group's configs (ConfigResource GROUP) before its members join."""
    async with Admin(bootstrap) as admin:
        await admin.alter_configs(group, set_configs=configs, resource_type=ResourceType.GROUP)


class ShareReader:
    """One share consumer of `group` on `topics`, started anew after any failure. Records:
    share_delivery {reader, topic, partition, offset, value, count} per record handed out, and
    share_ack {reader, value, ack, ok} per acknowledgement once its outcome is known (ok true:
    the broker applied it; false: it answered an error or the outcome is unknown)."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        history: History,
        group: str,
        topics: tuple[str, ...],
        request_timeout_ms: int = 5_000,
    ) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.history = history
        self.group = group
        self.topics = topics
        self.request_timeout_ms = request_timeout_ms
        self.instance = 0
        self.failures = 0
        self.delivered = 0
        self.by_partition: Counter[tuple[str, int]] = Counter()
        self.last_failure = ""
        self.consumer: ShareConsumer | None = None
        # (topic, partition, offset) → (value, kind) of acknowledgements not answered yet
        self._outstanding: dict[tuple[str, int, int], tuple[str, Decision]] = {}

    def _answered(self, tp: TopicPartition, offsets: frozenset[int], error: object) -> None:
        for offset in sorted(offsets):
            entry = self._outstanding.pop((tp.topic, tp.partition, offset), None)
            if entry is not None:  # else a GAP the client acknowledged by itself
                value, kind = entry
                self.history.record(
                    "share_ack", reader=self.name, value=value, ack=kind, ok=error is None
                )

    def _unknown(self) -> None:
        """Acknowledgements of a dropped consumer whose outcome never came: unknown."""
        for value, kind in self._outstanding.values():
            self.history.record("share_ack", reader=self.name, value=value, ack=kind, ok=False)
        self._outstanding.clear()

    def _consumer(self) -> ShareConsumer:
        self.instance += 1
        return ShareConsumer(
            self.bootstrap,
            group_id=self.group,
            client_id=f"{self.name}-{self.instance}",
            acknowledgement_mode="explicit",
            max_poll_records=50,
            fetch_max_wait_ms=200,
            request_timeout_ms=self.request_timeout_ms,
            acknowledgement_callback=self._answered,
        )

    async def run(self, stop: asyncio.Event) -> None:
        consumer: ShareConsumer | None = None
        while not stop.is_set():
            try:
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    if consumer is None:
                        consumer = self.consumer = self._consumer()
                        await consumer.start()
                        consumer.subscribe(self.topics)
                    await self.step(consumer)
            except (KafkaError, TimeoutError, OSError) as exc:
                self.failures += 1
                self.last_failure = repr(exc)
                log.info("%s: share consumer failed: %s; starting over", self.name, exc)
                if consumer is not None:
                    await _close(consumer)
                consumer = self.consumer = None
                self._unknown()
                await asyncio.sleep(0.2)
        if consumer is not None:
            await _close(consumer)
        self._unknown()

    def diagnosis(self) -> str:
        """What this reader has seen, for the log of a run whose share group did not finish."""
        consumer = self.consumer
        return (
            f"consumer #{self.instance} member {consumer.member_id if consumer else None} "
            f"assigned {consumer.assignment() if consumer else None}; "
            f"deliveries by partition {dict(self.by_partition)}; "
            f"{self.failures} failures, the last {self.last_failure or None}"
        )

    async def step(self, consumer: ShareConsumer) -> list[ShareRecord]:
        """One poll, each record recorded and acknowledged by the policy, then committed (the
        outcomes arrive through the acknowledgement callback)."""
        records = await consumer.poll(300)
        at = time.time()
        for record in records:
            value = (record.value or b"").decode()
            self.delivered += 1
            self.by_partition[(record.topic, record.partition)] += 1
            self.history.record(
                "share_delivery",
                reader=self.name,
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                value=value,
                count=record.delivery_count,
                at=at,
            )
            kind = decide(value, record.delivery_count)
            self._outstanding[(record.topic, record.partition, record.offset)] = (value, kind)
            consumer.acknowledge(record, KINDS[kind])
        if records:
            await consumer.commit()
        return records


async def _close(consumer: ShareConsumer) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5):
            await consumer.close()


SHARE_KEY_TYPE = 2  # FindCoordinator key type SHARE: "group:topicId:partition"
DESCRIBE_SHARE_GROUP_OFFSETS = 90


async def share_coordinator(bootstrap: str, group: str, topic: str, partition: int) -> int:
    """The broker coordinating the share state of (group, topic-partition)."""
    async with Admin(bootstrap) as admin:
        info = await admin.cluster.topic(topic)
        assert info.topic_id is not None
        # the topic id as Kafka prints it: URL-safe base64 without padding
        topic_id = base64.urlsafe_b64encode(info.topic_id.bytes).rstrip(b"=").decode()
        key = f"{group}:{topic_id}:{partition}"
        return await admin.cluster.find_coordinator(SHARE_KEY_TYPE, key)


async def share_start_offsets(
    bootstrap: str, group: str, topics: tuple[str, ...]
) -> dict[tuple[str, int], int]:
    """Each partition's share-partition start offset (DescribeShareGroupOffsets v1, at the
    group's coordinator, which reads it from the share coordinator); -1 for none."""
    async with Admin(bootstrap) as admin:

        async def send(connection: BrokerConnection) -> Any:
            answer = await connection.request(
                DESCRIBE_SHARE_GROUP_OFFSETS,
                {"groups": [{"group_id": group, "topics": None}]},
                version=1,
            )
            (described,) = answer.groups
            if described.error_code != ErrorCode.none:
                raise error_for(described.error_code, described.error_message, group)
            return described

        described = await at_coordinator(admin.cluster, group, send)
    found: dict[tuple[str, int], int] = {}
    for topic in described.topics:
        if topic.topic_name not in topics:
            continue
        for part in topic.partitions:
            if part.error_code != ErrorCode.none:
                raise error_for(part.error_code, part.error_message, topic.topic_name)
            found[(topic.topic_name, int(part.partition_index))] = int(part.start_offset)
    return found
