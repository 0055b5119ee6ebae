# client/membership.py — what the consumer needs from a group membership, whichever protocol
# runs it (classic JoinGroup/SyncGroup in group_member.py, KIP-848 heartbeats in
# consumer_member.py), and the part both share: the coordinator's address and the group's
# offsets (OffsetCommit / OffsetFetch under the member's id and generation or member epoch).
#
# Invariants:
# - A Rebalance is applied by the consumer in the order lost, revoked, assigned; lost partitions
#   are never committed (another member may own them already), revoked ones may be.
# - `generation_id` is the classic generation or the KIP-848 member epoch: the number the
#   coordinator checks on commits and on transactional commits (KIP-447).
from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lockgate.client.cluster import Cluster, TopicPartition
from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import ErrorCode, KafkaError, KafkaTimeoutError, error_for
from lockgate.client.transactions import ConsumerGroupMetadata, OffsetAndMetadata
from lockgate.protocol.api import ApiKey

GROUP_KEY_TYPE = 0
LAST_OFFSET_FETCH_WITH_NAMES = 9  # v10 names topics by id only
# Errors after which the coordinator must be looked up again.
COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
# A commit under a member epoch the coordinator moved past: retried once a heartbeat told us
# the new one (KIP-848).
STALE_EPOCH_RETRIES = 3


@dataclass(frozen=True, slots=True)
class Rebalance:
    """What one join or reconciliation changed: the consumer drops `lost` (no commit), then
    revokes `revoked`, then assigns `assigned`."""

    revoked: tuple[TopicPartition, ...]
    assigned: tuple[TopicPartition, ...]
    lost: tuple[TopicPartition, ...] = ()


class Membership(Protocol):
    """The consumer's view of its group membership."""

    group_id: str
    member_id: str
    generation_id: int
    assignment: tuple[TopicPartition, ...]
    rejoin_needed: bool
    fatal: KafkaError | None
    last_poll: float
    heartbeat_interval_ms: int
    rebalance_timeout_ms: int

    @property
    def cooperative(self) -> bool: ...

    @property
    def joined(self) -> bool: ...

    def metadata(self) -> ConsumerGroupMetadata: ...

    async def join(self, topics: Sequence[str], deadline: float) -> Rebalance: ...

    def reconciled(self) -> None:
        """The consumer applied the last Rebalance (callbacks ran, revoked offsets committed)."""

    async def leave(self, reason: str = "the consumer is closing") -> None: ...

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None: ...

    async def committed(
        self, partitions: Iterable[TopicPartition], *, require_stable: bool, deadline: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None]: ...


class MemberOffsets:
    """The coordinator connection and the group's offsets, for either membership."""

    # OffsetCommit/OffsetFetch v9 are the first to carry a member epoch (KIP-848).
    min_offset_version = 0
    # OffsetFetch sends the member id and epoch only where the coordinator checks them.
    sends_member_on_fetch = False

    def __init__(self, cluster: Cluster, group_id: str, group_instance_id: str | None) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.member_id = ""
        self.generation_id = -1
        self._coordinator_id: int | None = None

    async def coordinator(self) -> BrokerConnection:
        if self._coordinator_id is None:
            self._coordinator_id = await self.cluster.find_coordinator(
                GROUP_KEY_TYPE, self.group_id
            )
        try:
            return await self.cluster.connection(self._coordinator_id)
        except KafkaError as exc:
            # a coordinator that cannot be reached (killed, or gone from the metadata) is
            # looked up again next time: its group may be led elsewhere by now, and a client
            # that kept dialing it would never learn (Kafka's clients mark it unknown too)
            if exc.retriable:
                self._coordinator_lost()
            raise

    def _coordinator_lost(self) -> None:
        self._coordinator_id = None

    async def _request(self, api_key: int, body: Mapping[str, Any], **options: Any) -> Any:
        connection = await self.coordinator()
        try:
            return await connection.request(api_key, body, **options)
        except KafkaError as exc:
            if exc.retriable:
                self._coordinator_lost()
            raise

    def _note_error(self, code: ErrorCode) -> None:
        """A commit's error code, for the membership to act on (rejoin, rediscover)."""

    async def _stale_epoch(self) -> bool:
        """After STALE_MEMBER_EPOCH: waits for the next heartbeat; True to commit again."""
        return False

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """OffsetCommit under this member's generation (or member epoch). A rebalance in
        between raises (REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID /
        FENCED_MEMBER_EPOCH) and marks the member for a rejoin: the partitions may belong to
        someone else now."""
        if not offsets:
            return
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = defaultdict(list)
        for tp, value in sorted(offsets.items()):
            by_topic[tp.topic].append((tp.partition, value))
        topic_ids = {t: (await self.cluster.topic(t)).topic_id for t in by_topic}
        names = {topic_id: name for name, topic_id in topic_ids.items()}
        for attempt in range(STALE_EPOCH_RETRIES + 1):
            connection = await self.coordinator()
            version = connection.version_for(
                ApiKey.OFFSET_COMMIT, min_version=self.min_offset_version
            )
            answer = await self._request(
                ApiKey.OFFSET_COMMIT,
                {
                    "group_id": self.group_id,
                    "generation_id_or_member_epoch": self.generation_id,
                    "member_id": self.member_id,
                    "group_instance_id": self.group_instance_id,
                    "retention_time": -1,
                    "topics": [
                        {
                            "name": topic,
                            "topic_id": topic_ids[topic],
                            "partitions": [
                                {
                                    "partition_index": partition,
                                    "committed_offset": value.offset,
                                    "committed_leader_epoch": value.leader_epoch,
                                    "committed_metadata": value.metadata or "",
                                }
                                for partition, value in partitions
                            ],
                        }
                        for topic, partitions in by_topic.items()
                    ],
                },
                version=version,
            )
            failure: KafkaError | None = None
            for topic in answer.topics:
                name = getattr(topic, "name", None) or names.get(getattr(topic, "topic_id", None))
                for partition in topic.partitions:
                    code = ErrorCode(partition.error_code)
                    if code != ErrorCode.none and failure is None:
                        failure = error_for(
                            code, None, f"OffsetCommit {name}-{partition.partition_index}"
                        )
            if failure is None:
                return
            if (
                failure.code == ErrorCode.stale_member_epoch
                and attempt < STALE_EPOCH_RETRIES
                and await self._stale_epoch()
            ):
                continue
            self._note_error(failure.code)
            raise failure

    async def committed(
        self, partitions: Iterable[TopicPartition], *, require_stable: bool, deadline: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets. `require_stable` (read_committed consumers, KIP-447)
        waits while a transaction holding offsets for them is open: the broker answers
        UNSTABLE_OFFSET_COMMIT and we ask again until `deadline`."""
        wanted = list(dict.fromkeys(partitions))
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in wanted:
            by_topic[tp.topic].append(tp.partition)
        topics = [{"name": t, "partition_indexes": p} for t, p in by_topic.items()]
        attempt = 0
        while True:
            connection = await self.coordinator()
            version = connection.version_for(
                ApiKey.OFFSET_FETCH,
                min_version=self.min_offset_version,
                max_version=LAST_OFFSET_FETCH_WITH_NAMES,
            )
            member_id, epoch = (
                (self.member_id, self.generation_id) if self.sends_member_on_fetch else (None, -1)
            )
            answer = await self._request(
                ApiKey.OFFSET_FETCH,
                {
                    "group_id": self.group_id,
                    "topics": topics,
                    "require_stable": require_stable,
                    "groups": [
                        {
                            "group_id": self.group_id,
                            "member_id": member_id,
                            "member_epoch": epoch,
                            "topics": topics,
                        }
                    ],
                },
                version=version,
            )
            groups = getattr(answer, "groups", None)
            entry: Any = groups[0] if groups else answer
            codes = [ErrorCode(entry.error_code)] + [
                ErrorCode(p.error_code) for t in entry.topics for p in t.partitions
            ]
            failure = next((c for c in codes if c != ErrorCode.none), ErrorCode.none)
            if failure == ErrorCode.none:
                break
            error = error_for(failure, None, f"OffsetFetch {self.group_id}")
            if failure in COORDINATOR_MOVED:
                self._coordinator_lost()
            waits = failure in (ErrorCode.unstable_offset_commit, ErrorCode.stale_member_epoch)
            if not error.retriable and not waits:
                raise error
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"committed offsets of {self.group_id}: {error}")
            if failure != ErrorCode.stale_member_epoch or not await self._stale_epoch():
                await asyncio.sleep(self.cluster.backoff_s(attempt))
            attempt += 1
        found: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
        for topic in entry.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, int(p.partition_index))
                if p.committed_offset >= 0 and tp in found:
                    found[tp] = OffsetAndMetadata(
                        int(p.committed_offset),
                        p.metadata,
                        int(getattr(p, "committed_leader_epoch", -1)),
                    )
        return found
