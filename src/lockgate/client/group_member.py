# client/group_member.py — one consumer's membership of a classic consumer group: find the
# coordinator, JoinGroup (MEMBER_ID_REQUIRED answered by joining again), the leader runs the
# assignor, SyncGroup, heartbeats from a background task, LeaveGroup on close (dynamic members
# only, as KIP-345 wants). The group's offsets are MemberOffsets' (membership.py).
#
# Invariants:
# - `assignment` only changes inside join(); the consumer learns the change from join()'s
#   return value, in the order revoke-then-assign, so it never fetches a partition that
#   another member may already own under the new generation.
# - Under a cooperative protocol (cooperative-sticky) a rebalance only takes away the
#   partitions that move; when some did, the member joins again at once so the follow-up
#   rebalance can hand them to their new owners (KIP-429).
# - `rejoin_needed` is set by the heartbeat task and by failed commits; it is only acted on
#   by join(), which the consumer calls from poll().
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from lockgate.client.assignors import (
    ASSIGNORS,
    COOPERATIVE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.errors import ErrorCode, KafkaError, KafkaTimeoutError, error_for
from lockgate.client.membership import COORDINATOR_MOVED, MemberOffsets, Rebalance
from lockgate.client.transactions import ConsumerGroupMetadata
from lockgate.protocol.api import ApiKey

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1
# Errors that mean "this member's generation is over: join again".
REJOIN = frozenset(
    {
        ErrorCode.rebalance_in_progress,
        ErrorCode.illegal_generation,
        ErrorCode.unknown_member_id,
    }
)


class FencedInstanceIdError(KafkaError):
    code = ErrorCode.fenced_instance_id


class GroupMember(MemberOffsets):
    def __init__(
        self,
        cluster: Cluster,
        group_id: str,
        *,
        group_instance_id: str | None = None,
        assignors: Sequence[str] = ("range", "cooperative-sticky"),
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
    ) -> None:
        unknown = [name for name in assignors if name not in ASSIGNORS]
        if unknown or not assignors:
            raise ValueError(f"unknown assignors {unknown}; known: {sorted(ASSIGNORS)}")
        super().__init__(cluster, group_id, group_instance_id)
        self.assignors = tuple(assignors)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.protocol: str | None = None
        self.assignment: tuple[TopicPartition, ...] = ()
        self.rejoin_needed = True
        self.fatal: KafkaError | None = None
        self.last_poll = time.monotonic()
        self._heartbeat: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------------------------

    def metadata(self) -> ConsumerGroupMetadata:
        """For send_offsets_to_transaction (KIP-447): fences this member once it left."""
        return ConsumerGroupMetadata(
            self.group_id, self.generation_id, self.member_id, self.group_instance_id
        )

    @property
    def cooperative(self) -> bool:
        return self.protocol in COOPERATIVE

    @property
    def joined(self) -> bool:
        return self.generation_id >= 0

    def reconciled(self) -> None:
        """Nothing to acknowledge: SyncGroup's answer was the whole hand-over."""

    # ------------------------------------------------------------------------------------------
    # Joining

    async def join(self, topics: Sequence[str], deadline: float) -> Rebalance:
        """Rebalances until this member holds a generation: returns what to revoke (under an
        eager protocol everything it held) and what is new. Retries retriable errors with
        backoff until `deadline` (time.monotonic())."""
        if self.fatal is not None:
            raise self.fatal
        attempt = 0
        while True:
            try:
                return await self._join_once(topics)
            except KafkaError as exc:
                if exc.code == ErrorCode.fenced_instance_id:
                    self.fatal = FencedInstanceIdError(str(exc))
                    raise self.fatal from exc
                if not (exc.retriable or exc.code in REJOIN or exc.code in COORDINATOR_MOVED):
                    raise
                if exc.code in COORDINATOR_MOVED:
                    self._coordinator_lost()
                if time.monotonic() > deadline:
                    raise KafkaTimeoutError(f"joining group {self.group_id}: {exc}") from exc
                log.info("group %s: join failed (%s), trying again", self.group_id, exc)
                await asyncio.sleep(self.cluster.backoff_s(attempt))
                attempt += 1

    async def _join_once(self, topics: Sequence[str]) -> Rebalance:
        owned = self.assignment
        subscription = Subscription(tuple(topics), owned, None, self.generation_id)
        metadata = encode_subscription(subscription)
        answer = await self._send_join(metadata)
        if answer.error_code == ErrorCode.member_id_required:
            self.member_id = answer.member_id  # KIP-394: join again with the id given
            answer = await self._send_join(metadata)
        if answer.error_code == ErrorCode.unknown_member_id:
            self.member_id, self.generation_id = "", NO_GENERATION
        if answer.error_code != ErrorCode.none:
            raise error_for(answer.error_code, None, f"JoinGroup {self.group_id}")
        self.member_id = answer.member_id
        generation = int(answer.generation_id)
        protocol = answer.protocol_name
        assignments: dict[str, bytes] = {}
        if answer.leader == self.member_id:
            assignments = await self._lead(protocol, answer.members)
        sync = await self._request(
            ApiKey.SYNC_GROUP,
            {
                "group_id": self.group_id,
                "generation_id": generation,
                "member_id": self.member_id,
                "group_instance_id": self.group_instance_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocol_name": protocol,
                "assignments": [
                    {"member_id": member, "assignment": blob}
                    for member, blob in assignments.items()
                ],
            },
        )
        if sync.error_code != ErrorCode.none:
            if sync.error_code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                self.generation_id = NO_GENERATION
            raise error_for(sync.error_code, None, f"SyncGroup {self.group_id}")
        new = decode_assignment(bytes(sync.assignment)).partitions
        self.generation_id, self.protocol = generation, protocol
        old = set(owned)
        if self.cooperative:
            revoked = tuple(sorted(old - set(new)))
            # partitions given up must reach their new owner: another round, at once
            self.rejoin_needed = bool(revoked)
            assigned = tuple(sorted(set(new) - old))
        else:
            revoked, assigned = tuple(sorted(old)), tuple(sorted(new))
            self.rejoin_needed = False
        self.assignment = tuple(sorted(new))
        log.info(
            "group %s: generation %d as %s (%s), %d partitions",
            self.group_id,
            generation,
            self.member_id,
            protocol,
            len(new),
        )
        self._start_heartbeat()
        return Rebalance(revoked, assigned)

    async def _send_join(self, metadata: bytes) -> Any:
        return await self._request(
            ApiKey.JOIN_GROUP,
            {
                "group_id": self.group_id,
                "session_timeout": self.session_timeout_ms,
                "rebalance_timeout": self.rebalance_timeout_ms,
                "member_id": self.member_id,
                "group_instance_id": self.group_instance_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": name, "metadata": metadata} for name in self.assignors],
                "reason": None,
            },
            timeout_ms=self.rebalance_timeout_ms + self.cluster.request_timeout_ms,
        )

    async def _lead(self, protocol: str, members: Iterable[Any]) -> dict[str, bytes]:
        subscriptions = {m.member_id: decode_subscription(bytes(m.metadata)) for m in members}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts: dict[str, int] = {}
        for topic in topics:
            try:
                counts[topic] = len((await self.cluster.topic(topic, refresh=True)).partitions)
            except KafkaError as exc:
                if exc.retriable or exc.code == ErrorCode.unknown_topic_or_partition:
                    log.info("group %s: topic %s not assignable yet: %s", self.group_id, topic, exc)
                    continue
                raise
        plan = ASSIGNORS[protocol](subscriptions, counts)
        return {m: encode_assignment(Assignment(tuple(plan.get(m, ())))) for m in subscriptions}

    # ------------------------------------------------------------------------------------------
    # Heartbeats

    def _start_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while self.generation_id != NO_GENERATION:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            if time.monotonic() - self.last_poll > self.max_poll_interval_ms / 1000:
                log.warning(
                    "group %s: no poll for max_poll_interval_ms (%d ms): leaving the group",
                    self.group_id,
                    self.max_poll_interval_ms,
                )
                await self.leave(reason="max.poll.interval.ms exceeded")
                return
            # Heartbeats go on while a rebalance waits for our poll: they keep the session alive
            # (the coordinator answers REBALANCE_IN_PROGRESS until we rejoin).
            try:
                answer = await self._request(
                    ApiKey.HEARTBEAT,
                    {
                        "group_id": self.group_id,
                        "generation_id": self.generation_id,
                        "member_id": self.member_id,
                        "group_instance_id": self.group_instance_id,
                    },
                )
            except KafkaError as exc:
                log.info("group %s: heartbeat failed: %s", self.group_id, exc)
                continue
            self._note_error(ErrorCode(answer.error_code))

    def _note_error(self, code: ErrorCode) -> None:
        if code == ErrorCode.none:
            return
        if code == ErrorCode.fenced_instance_id:
            self.fatal = FencedInstanceIdError(f"group {self.group_id}")
        elif code in COORDINATOR_MOVED:
            self._coordinator_lost()
        elif code in REJOIN:
            if code != ErrorCode.rebalance_in_progress:
                self.generation_id = NO_GENERATION
                if code == ErrorCode.unknown_member_id:
                    self.member_id = ""
            self.rejoin_needed = True
        else:
            log.warning("group %s: heartbeat answered %s", self.group_id, code.name)

    async def leave(self, reason: str = "the consumer is closing") -> None:
        """Stops heartbeating and (dynamic members) leaves, so the group rebalances now
        rather than after the session timeout."""
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None and heartbeat is not asyncio.current_task():
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        if self.member_id and self.group_instance_id is None:
            with contextlib.suppress(KafkaError):
                await self._request(
                    ApiKey.LEAVE_GROUP,
                    {
                        "group_id": self.group_id,
                        "member_id": self.member_id,
                        "members": [
                            {
                                "member_id": self.member_id,
                                "group_instance_id": None,
                                "reason": reason,
                            }
                        ],
                    },
                )
            self.member_id = ""
        self.generation_id = NO_GENERATION
        self.assignment = ()
        self.rejoin_needed = True
