# client/consumer_member.py — one consumer's membership of a KIP-848 consumer group
# (group_protocol="consumer"): ConsumerGroupHeartbeat (key 68) joins with epoch 0, then a
# background task heartbeats at the interval the coordinator returns; the coordinator computes
# the assignment (server-side assignor, `group_remote_assignor`) and hands it out by topic id.
#
# Invariants:
# - Ownership only changes inside join(), which the consumer calls from poll(): the
#   reconciliation revokes what the target no longer holds and adds what is new; the new owned
#   set is acknowledged in the heartbeat sent right after the consumer applied it (reconciled()),
#   never before the revoked partitions were committed and handed to the listener.
# - Heartbeats are incremental: a field is sent only when it changed since the last heartbeat
#   the coordinator answered; after an error or a lost response the next heartbeat is full.
# - FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: every owned partition is lost (not committed: it
#   may be someone else's already) and the member joins again with epoch 0.
# - One heartbeat in flight at a time (the lock): epochs and acknowledgements stay in order.
from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.errors import (
    ErrorCode,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
    error_for,
)
from lockgate.client.membership import COORDINATOR_MOVED, MemberOffsets, Rebalance
from lockgate.client.transactions import ConsumerGroupMetadata

log = logging.getLogger(__name__)

CONSUMER_GROUP_HEARTBEAT = 68
FIRST_CLIENT_MEMBER_ID_VERSION = 1  # v1: the member generates its own id (KIP-1082)
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # a static member that will come back keeps its assignment
REMOTE_ASSIGNORS = ("uniform", "range")
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000  # until the coordinator tells its own
# Errors no retry can mend: the user must change something.
FATAL = frozenset(
    {
        ErrorCode.group_max_size_reached,
        ErrorCode.unsupported_assignor,
        ErrorCode.invalid_request,
        ErrorCode.unreleased_instance_id,
        ErrorCode.fenced_instance_id,
        ErrorCode.group_authorization_failed,
        ErrorCode.topic_authorization_failed,
        ErrorCode.unsupported_version,
        ErrorCode.invalid_regular_expression,
    }
)
LOST = frozenset({ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id})


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class HeartbeatFields:
    """What the member wants the coordinator to know; compared with what it last told it."""

    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    topics: tuple[str, ...] | None
    regex: str | None
    assignor: str | None
    owned: frozenset[TopicIdPartition]


def heartbeat_body(
    group_id: str,
    member_id: str,
    member_epoch: int,
    wanted: HeartbeatFields,
    sent: HeartbeatFields | None,
) -> dict[str, Any]:
    """A ConsumerGroupHeartbeat request: every field when `sent` is None (joining, or after an
    error), else only the fields that changed since `sent` (null / -1 meaning "unchanged"), as
    the Java client does. The instance id goes with every heartbeat of a static member: the
    coordinator finds static members by it."""
    full = sent is None

    def changed(name: str) -> bool:
        return full or getattr(wanted, name) != getattr(sent, name)

    return {
        "group_id": group_id,
        "member_id": member_id,
        "member_epoch": member_epoch,
        "instance_id": wanted.instance_id,
        "rack_id": wanted.rack_id if full else None,
        "rebalance_timeout": wanted.rebalance_timeout_ms if changed("rebalance_timeout_ms") else -1,
        "subscribed_topic_names": (
            list(wanted.topics) if wanted.topics is not None and changed("topics") else None
        ),
        "subscribed_topic_regex": wanted.regex if changed("regex") else None,
        "server_assignor": wanted.assignor if changed("assignor") else None,
        "topic_partitions": _by_topic(wanted.owned) if changed("owned") else None,
    }


def _by_topic(partitions: Iterable[TopicIdPartition]) -> list[dict[str, Any]]:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for p in sorted(partitions):
        by_topic.setdefault(p.topic_id, []).append(p.partition)
    return [{"topic_id": t, "partitions": parts} for t, parts in by_topic.items()]


def assignment_from(answer_assignment: Any) -> frozenset[TopicIdPartition]:
    return frozenset(
        TopicIdPartition(t.topic_id, int(p))
        for t in answer_assignment.topic_partitions
        for p in t.partitions
    )


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """One step from the owned set towards the target: what to give up, what to take, the
    owned set afterwards, and whether the target is reached (False while some topic id has
    no name in the metadata yet: those partitions wait for the next step)."""

    revoked: tuple[TopicPartition, ...]
    assigned: tuple[TopicPartition, ...]
    owned: frozenset[TopicIdPartition]
    complete: bool


def reconcile(
    owned: frozenset[TopicIdPartition],
    target: frozenset[TopicIdPartition],
    names: Mapping[uuid.UUID, str],
) -> Reconciliation:
    """Pure: revoke owned \\ target, add the resolvable part of target \\ owned. The
    coordinator only puts partitions in a member's assignment once their previous owner
    released them, so both happen in one step (the Java client does the same)."""
    revoke = owned - target
    new = target - owned
    resolvable = frozenset(p for p in new if p.topic_id in names)

    def named(parts: Iterable[TopicIdPartition]) -> tuple[TopicPartition, ...]:
        return tuple(sorted(TopicPartition(names[p.topic_id], p.partition) for p in parts))

    return Reconciliation(
        named(revoke), named(resolvable), (owned - revoke) | resolvable, resolvable == new
    )


def new_member_id() -> str:
    """A member id of the shape the Java client generates (a base64url UUID), kept for the
    consumer's lifetime."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class ConsumerProtocolUnsupportedError(UnsupportedVersionError):
    """The broker does not serve the consumer group protocol (KIP-848)."""


class ConsumerMember(MemberOffsets):
    min_offset_version = 9  # OffsetCommit/OffsetFetch v9 carry the member epoch
    sends_member_on_fetch = True
    cooperative = True  # the coordinator only ever moves the partitions that change owner

    def __init__(
        self,
        cluster: Cluster,
        group_id: str,
        *,
        group_instance_id: str | None = None,
        remote_assignor: str | None = None,
        rebalance_timeout_ms: int = 300_000,
        max_poll_interval_ms: int = 300_000,
        rack_id: str | None = None,
    ) -> None:
        if remote_assignor is not None and remote_assignor not in REMOTE_ASSIGNORS:
            raise ValueError(
                f"unknown group_remote_assignor {remote_assignor!r}; known: {REMOTE_ASSIGNORS}"
            )
        super().__init__(cluster, group_id, group_instance_id)
        self.remote_assignor = remote_assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.rack_id = rack_id
        self.heartbeat_interval_ms = DEFAULT_HEARTBEAT_INTERVAL_MS
        self._own_member_id = new_member_id()
        self.generation_id = JOIN_EPOCH  # the member epoch; 0 until the coordinator gives one
        self.assignment: tuple[TopicPartition, ...] = ()
        self.rejoin_needed = True
        self.fatal: KafkaError | None = None
        self.last_poll = time.monotonic()
        self._topics: tuple[str, ...] = ()
        self._owned: frozenset[TopicIdPartition] = frozenset()
        self._names: dict[uuid.UUID, str] = {}  # every id we resolved: revoked ones need it too
        self._target: frozenset[TopicIdPartition] | None = None
        self._pending_owned: frozenset[TopicIdPartition] | None = None  # applied, not acked
        self._acknowledged: frozenset[TopicIdPartition] = frozenset()
        self._lost: tuple[TopicPartition, ...] = ()
        self._sent: HeartbeatFields | None = None
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._beat_done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------------------------

    @property
    def joined(self) -> bool:
        return self.generation_id > 0

    def metadata(self) -> ConsumerGroupMetadata:
        """For send_offsets_to_transaction (KIP-447): the member epoch stands for the
        generation, so the coordinator fences this member once it moved past it."""
        return ConsumerGroupMetadata(
            self.group_id, self.generation_id, self.member_id, self.group_instance_id
        )

    def _wanted(self) -> HeartbeatFields:
        return HeartbeatFields(
            self.group_instance_id,
            self.rack_id,
            self.rebalance_timeout_ms,
            self._topics,
            None,
            self.remote_assignor,
            self._acknowledged,
        )

    # ------------------------------------------------------------------------------------------
    # Joining and reconciling (from poll())

    async def join(self, topics: Sequence[str], deadline: float) -> Rebalance:
        """Joins (epoch 0) when not a member, then takes one reconciliation step towards the
        latest target assignment. Retriable errors are retried until `deadline`."""
        if self.fatal is not None:
            raise self.fatal
        topics = tuple(sorted(topics))
        if topics != self._topics:
            self._topics = topics
            self._wake.set()  # the new subscription goes out now, not at the next interval
        attempt = 0
        while not self.joined:
            try:
                async with self._lock:
                    await self._heartbeat(JOIN_EPOCH)
                if self.joined:
                    break
                failure: KafkaError = KafkaError(f"no member epoch ({self.generation_id})")
            except KafkaError as exc:
                if self.fatal is not None:
                    raise self.fatal from exc
                failure = exc
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"joining group {self.group_id}: {failure}") from failure
            log.info("group %s: join failed (%s), trying again", self.group_id, failure)
            await asyncio.sleep(self.cluster.backoff_s(attempt))
            attempt += 1
        self._start_heartbeat()
        # lost partitions stay the consumer's to release until a join succeeded and says so
        lost, self._lost = self._lost, ()
        step = await self._reconcile()
        return Rebalance(step.revoked, step.assigned, lost)

    async def _reconcile(self) -> Reconciliation:
        target = self._target
        if target is None:
            self.rejoin_needed = False
            return Reconciliation((), (), self._owned, True)
        if any(p.topic_id not in self._names for p in target):
            await self._resolve_names()
        step = reconcile(self._owned, target, self._names)
        self._owned = step.owned
        self._pending_owned = step.owned
        self.assignment = tuple(
            sorted(TopicPartition(self._names[p.topic_id], p.partition) for p in step.owned)
        )
        if step.complete:
            self._target = None
        self.rejoin_needed = not step.complete
        if step.revoked or step.assigned:
            log.info(
                "group %s: epoch %d, -%d +%d partitions",
                self.group_id,
                self.generation_id,
                len(step.revoked),
                len(step.assigned),
            )
        return step

    async def _resolve_names(self) -> None:
        """Topic ids of the assignment → names, from Metadata (the subscribed topics, or every
        topic when one of them is not known yet: a regex subscription, a recreated topic)."""
        try:
            metadata = await self.cluster.refresh_metadata(self._topics or None)
            self._names.update(
                {t.topic_id: name for name, t in metadata.topics.items() if t.topic_id}
            )
            if self._target and any(p.topic_id not in self._names for p in self._target):
                metadata = await self.cluster.refresh_metadata(None)
                self._names.update(
                    {t.topic_id: name for name, t in metadata.topics.items() if t.topic_id}
                )
        except KafkaError as exc:
            log.info("group %s: topic names not resolved yet: %s", self.group_id, exc)

    def reconciled(self) -> None:
        """The consumer applied the step: acknowledge the owned set with the next heartbeat,
        sent at once so the coordinator can hand revoked partitions on."""
        if self._pending_owned is not None:
            self._acknowledged, self._pending_owned = self._pending_owned, None
            self._wake.set()

    # ------------------------------------------------------------------------------------------
    # Heartbeats

    def _start_heartbeat(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.heartbeat_interval_ms / 1000)
            self._wake.clear()
            if not self.joined or self.fatal is not None:
                continue  # poll() rejoins (after releasing lost partitions) or raises
            if time.monotonic() - self.last_poll > self.max_poll_interval_ms / 1000:
                log.warning(
                    "group %s: no poll for max_poll_interval_ms (%d ms): leaving the group",
                    self.group_id,
                    self.max_poll_interval_ms,
                )
                await self._leave_group()
                self._lose()
                continue
            try:
                async with self._lock:
                    if self.joined:
                        await self._heartbeat(self.generation_id)
            except KafkaError as exc:
                log.info("group %s: heartbeat failed: %s", self.group_id, exc)
                await asyncio.sleep(self.cluster.backoff_s(0))

    async def _heartbeat(self, epoch: int) -> None:
        """One heartbeat and its answer applied. Raises on errors (after acting on them)."""
        connection = await self.coordinator()
        try:
            version = connection.version_for(CONSUMER_GROUP_HEARTBEAT)
        except UnsupportedVersionError as exc:
            self.fatal = ConsumerProtocolUnsupportedError(
                f"the broker at {connection.address} does not serve the consumer group protocol "
                f"(KIP-848, ConsumerGroupHeartbeat): use group_protocol='classic' ({exc})"
            )
            raise self.fatal from exc
        if epoch == JOIN_EPOCH:
            self._sent = None
            self.member_id = (
                self._own_member_id if version >= FIRST_CLIENT_MEMBER_ID_VERSION else ""
            )
        wanted = self._wanted()
        body = heartbeat_body(self.group_id, self.member_id, epoch, wanted, self._sent)
        try:
            answer = await self._request(CONSUMER_GROUP_HEARTBEAT, body, version=version)
        except KafkaError:
            self._sent = None  # the coordinator may or may not have seen it: say it all again
            raise
        self._apply(answer, wanted)

    def _apply(self, answer: Any, wanted: HeartbeatFields) -> None:
        code = ErrorCode(answer.error_code)
        self._beat_done.set()
        self._beat_done = asyncio.Event()
        if code == ErrorCode.none:
            self._sent = wanted
            if answer.member_id:
                self.member_id = str(answer.member_id)
            self.generation_id = int(answer.member_epoch)
            interval = answer.heartbeat_interval  # kio reads it as a timedelta
            self.heartbeat_interval_ms = max(1, int(interval.total_seconds() * 1000))
            if answer.assignment is not None:
                target = assignment_from(answer.assignment)
                if target != self._owned or self._target is not None:
                    self._target = target
                    self.rejoin_needed = True
            return
        self._sent = None
        error = error_for(code, answer.error_message, f"ConsumerGroupHeartbeat {self.group_id}")
        if code in LOST:
            log.warning("group %s: %s: partitions lost, joining again", self.group_id, error)
            self._lose()
        elif code in COORDINATOR_MOVED:
            self._coordinator_lost()
        elif code == ErrorCode.unsupported_version:
            self.fatal = ConsumerProtocolUnsupportedError(
                f"group {self.group_id}: the broker does not serve the consumer group protocol "
                f"(KIP-848): use group_protocol='classic' ({error})"
            )
        elif code in FATAL:
            self.fatal = error
        raise self.fatal or error

    def _lose(self) -> None:
        """Everything owned is gone: poll() releases it (on-lost) and joins with epoch 0."""
        owned = {TopicPartition(self._names[p.topic_id], p.partition) for p in self._owned}
        self._lost = tuple(sorted(owned | set(self._lost)))
        self._owned = self._acknowledged = frozenset()
        self._pending_owned = None
        self._target = None
        self.assignment = ()
        self.generation_id = JOIN_EPOCH
        self._sent = None
        self.rejoin_needed = True

    async def _stale_epoch(self) -> bool:
        """A commit under an epoch the coordinator moved past: wait for the heartbeat that
        tells the new one (asked for now), then commit again."""
        if not self.joined or self._task is None:
            return False
        waiter = self._beat_done
        self._wake.set()
        try:
            await asyncio.wait_for(waiter.wait(), self.cluster.request_timeout_ms / 1000)
        except TimeoutError:
            return False
        return self.joined

    # ------------------------------------------------------------------------------------------
    # Leaving

    async def leave(self, reason: str = "the consumer is closing") -> None:
        """Stops heartbeating and leaves: epoch -1, or -2 for a static member, whose partitions
        the coordinator keeps for it until the session times out."""
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.joined:
            log.info("group %s: leaving (%s)", self.group_id, reason)
            await self._leave_group()
        self._owned = self._acknowledged = frozenset()
        self._pending_owned = self._target = None
        self._lost = ()
        self.assignment = ()
        self.generation_id = JOIN_EPOCH
        self._sent = None
        self.rejoin_needed = True

    async def _leave_group(self) -> None:
        epoch = STATIC_LEAVE_EPOCH if self.group_instance_id is not None else LEAVE_EPOCH
        body = heartbeat_body(self.group_id, self.member_id, epoch, self._wanted(), self._sent)
        with contextlib.suppress(KafkaError):
            connection = await self.coordinator()
            await self._request(
                CONSUMER_GROUP_HEARTBEAT,
                body,
                version=connection.version_for(CONSUMER_GROUP_HEARTBEAT),
            )
        self.generation_id = JOIN_EPOCH
