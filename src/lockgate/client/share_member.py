# client/share_member.py — one share consumer's membership of a share group (KIP-932):
# ShareGroupHeartbeat (key 76, v1) with a member id the client generates and keeps for its
# lifetime, epoch 0 to join, -1 to leave; a background task heartbeats at the interval the
# coordinator returns. The coordinator's simple assignor hands out partitions by topic id; a
# share group has no revocation phase (several members may share a partition), so the member
# simply takes each new assignment.
#
# Invariants:
# - The subscription goes out in full with the joining heartbeat and whenever it changes, as
#   null ("unchanged") otherwise; the rack only with the joining heartbeat.
# - FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the assignment is dropped and the member joins
#   again with epoch 0 under the same member id (records it holds stay acquired: their
#   acknowledgements still count at the partition leaders, which do not check membership).
# - NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE: the coordinator is looked up again;
#   COORDINATOR_LOAD_IN_PROGRESS and connection errors: retried after a backoff. Errors no retry
#   mends (authorization, invalid request, group full, share groups disabled) are kept in
#   `fatal` and raised by the consumer's next call.
# - One heartbeat in flight at a time (the lock), so epochs stay in order.
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.consumer_member import new_member_id
from lockgate.client.errors import (
    ErrorCode,
    KafkaError,
    UnsupportedVersionError,
    error_for,
)
from lockgate.client.membership import COORDINATOR_MOVED, MemberOffsets
from lockgate.client.share_session import TopicIdPartition

log = logging.getLogger(__name__)

SHARE_GROUP_HEARTBEAT = 76
SHARE_HEARTBEAT_VERSION = 1  # v0 (4.0's early access) is gone from Kafka 4.1 on
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000  # until the coordinator tells its own
FATAL = frozenset(
    {
        ErrorCode.group_max_size_reached,
        ErrorCode.invalid_request,
        ErrorCode.group_authorization_failed,
        ErrorCode.topic_authorization_failed,
        ErrorCode.unsupported_version,
        ErrorCode.group_id_not_found,  # the id names a group of another type
        ErrorCode.invalid_group_id,
    }
)
LOST = frozenset({ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id})


class ShareGroupsUnsupportedError(UnsupportedVersionError):
    """The broker does not serve share groups (no ShareGroupHeartbeat v1, or share.version 0)."""


def share_heartbeat_body(
    group_id: str,
    member_id: str,
    epoch: int,
    topics: Sequence[str] | None,
    rack_id: str | None,
) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "member_id": member_id,
        "member_epoch": epoch,
        "rack_id": rack_id,
        "subscribed_topic_names": None if topics is None else list(topics),
    }


class ShareMember(MemberOffsets):
    def __init__(self, cluster: Cluster, group_id: str, *, rack_id: str | None = None) -> None:
        super().__init__(cluster, group_id, None)
        self.rack_id = rack_id or None  # "" is refused by the coordinator; None = no rack
        self.member_id = new_member_id()
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = DEFAULT_HEARTBEAT_INTERVAL_MS
        self.fatal: KafkaError | None = None
        self.assignment: frozenset[TopicIdPartition] = frozenset()
        self.names: dict[uuid.UUID, str] = {}
        self._topics: tuple[str, ...] = ()
        self._sent_topics: tuple[str, ...] | None = None  # what the coordinator last accepted
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._leaving = False
        self.assignment_changed = asyncio.Event()

    @property
    def joined(self) -> bool:
        return self.member_epoch > 0

    def subscribe(self, topics: Sequence[str]) -> None:
        topics = tuple(sorted(set(topics)))
        if topics != self._topics:
            self._topics = topics
            self._wake.set()
        self._start()

    def assigned_partitions(self) -> list[TopicPartition]:
        return sorted(
            TopicPartition(self.names[p.topic_id], p.partition)
            for p in self.assignment
            if p.topic_id in self.names
        )

    # ------------------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._leaving = False
            self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        attempt = 0
        while not self._leaving:
            if self.fatal is not None:
                return
            try:
                async with self._lock:
                    if self._leaving:
                        return
                    await self._heartbeat(self.member_epoch)
                attempt = 0
                wait = self.heartbeat_interval_ms / 1000
            except KafkaError as exc:
                if self.fatal is not None:
                    log.warning("share group %s: %s", self.group_id, exc)
                    return
                log.info("share group %s: heartbeat failed: %s", self.group_id, exc)
                wait = (
                    0.0 if self.member_epoch == JOIN_EPOCH and attempt == 0
                    else self.cluster.backoff_s(attempt)
                )  # fmt: skip
                attempt += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()

    async def _heartbeat(self, epoch: int) -> None:
        connection = await self.coordinator()
        try:
            version = connection.version_for(
                SHARE_GROUP_HEARTBEAT,
                min_version=SHARE_HEARTBEAT_VERSION,
                max_version=SHARE_HEARTBEAT_VERSION,
            )
        except UnsupportedVersionError as exc:
            self.fatal = ShareGroupsUnsupportedError(
                f"the broker at {connection.address} does not serve share groups "
                f"(ShareGroupHeartbeat v1): {exc}"
            )
            raise self.fatal from exc
        joining = epoch == JOIN_EPOCH
        topics = self._topics if joining or self._topics != self._sent_topics else None
        body = share_heartbeat_body(
            self.group_id, self.member_id, epoch, topics, self.rack_id if joining else None
        )
        try:
            answer = await self._request(SHARE_GROUP_HEARTBEAT, body, version=version)
        except KafkaError:
            self._sent_topics = None  # maybe not seen: say the subscription again
            raise
        await self._apply(answer, topics)

    async def _apply(self, answer: Any, topics: tuple[str, ...] | None) -> None:
        code = ErrorCode(answer.error_code)
        if code == ErrorCode.none:
            if topics is not None:
                self._sent_topics = topics
            self.member_epoch = int(answer.member_epoch)
            interval = answer.heartbeat_interval  # kio reads it as a timedelta
            self.heartbeat_interval_ms = max(1, int(interval.total_seconds() * 1000))
            if answer.assignment is not None:
                assignment = frozenset(
                    TopicIdPartition(t.topic_id, int(p))
                    for t in answer.assignment.topic_partitions
                    for p in t.partitions
                )
                if any(p.topic_id not in self.names for p in assignment):
                    await self._resolve_names(assignment)
                if assignment != self.assignment:
                    log.info(
                        "share group %s: member %s epoch %d, %d partitions",
                        self.group_id,
                        self.member_id,
                        self.member_epoch,
                        len(assignment),
                    )
                    self.assignment = assignment
                    self.assignment_changed.set()
            return
        self._sent_topics = None
        error = error_for(code, answer.error_message, f"ShareGroupHeartbeat {self.group_id}")
        if code in LOST:
            log.warning("share group %s: %s: joining again", self.group_id, error)
            self.member_epoch = JOIN_EPOCH
            self.assignment = frozenset()
            self.assignment_changed.set()
        elif code in COORDINATOR_MOVED:
            self._coordinator_lost()
        elif code == ErrorCode.unsupported_version:
            self.fatal = ShareGroupsUnsupportedError(
                f"share group {self.group_id}: the broker has share groups disabled ({error})"
            )
        elif code in FATAL:
            self.fatal = error
        raise self.fatal or error

    async def _resolve_names(self, assignment: frozenset[TopicIdPartition]) -> None:
        try:
            metadata = await self.cluster.refresh_metadata(self._topics or None)
            self.names.update(
                {t.topic_id: name for name, t in metadata.topics.items() if t.topic_id}
            )
            if any(p.topic_id not in self.names for p in assignment):
                metadata = await self.cluster.refresh_metadata(None)
                self.names.update(
                    {t.topic_id: name for name, t in metadata.topics.items() if t.topic_id}
                )
        except KafkaError as exc:
            log.info("share group %s: topic names not resolved yet: %s", self.group_id, exc)

    async def wait_for_assignment(self, deadline: float) -> bool:
        """Waits until the member has partitions (or `deadline`, monotonic seconds)."""
        while not self.assignment:
            if self.fatal is not None:
                raise self.fatal
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.assignment_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.assignment_changed.wait(), remaining)
        return True

    # ------------------------------------------------------------------------------------------

    async def leave(self) -> None:
        """Stops heartbeating and leaves the group (epoch -1)."""
        self._leaving = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.member_epoch > JOIN_EPOCH:
            # an empty subscription with the leave, as Kafka's client sends it
            body = share_heartbeat_body(self.group_id, self.member_id, LEAVE_EPOCH, (), None)
            with contextlib.suppress(KafkaError):
                async with self._lock:
                    await self._request(
                        SHARE_GROUP_HEARTBEAT, body, version=SHARE_HEARTBEAT_VERSION
                    )
        self.member_epoch = JOIN_EPOCH
        self.assignment = frozenset()
        self._sent_topics = None
