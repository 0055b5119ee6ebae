# client/consumer.py — the asyncio consumer: manual assignment or group membership (subscribe;
# the classic protocol in group_member.py, KIP-848's consumer protocol in consumer_member.py),
# positions from committed offsets, explicit offsets or ListOffsets (earliest/latest), Fetch
# from each partition's leader (or, with client_rack, from the replica the leader prefers:
# KIP-392), records decoded with their headers, read_committed (the default) filtering of
# aborted transactions, commits, pause.
#
# Invariants:
# - A partition's position only moves forward past what was returned or skipped: past every
#   record handed out, and past whole batches that hold nothing for the caller (control
#   batches, aborted data, records below the position), so a fetch never loops on them.
# - Batches are checked (CRC-32C) before their records are trusted; a trailing partial batch
#   (Fetch cuts at max bytes) is dropped and fetched again from its start.
# - read_committed: an aborted transaction's records are dropped from its first offset (as
#   listed by the broker) until its producer's ABORT marker, as the Java consumer does.
# - A preferred read replica is followed until metadata.max.age.ms passes, then the leader is
#   asked again; any error from it, its absence from the metadata or a failed request to it
#   sends the partition back to its leader at once (as the Java consumer does). An offset out
#   of range on a preferred replica is not reset: the leader is asked.
# - In a group, the assignment only changes inside poll() (a rebalance): revoked partitions
#   are committed (auto commit) and handed to the listener before they are dropped, new ones
#   start from the group's committed offset, else from auto_offset_reset. Lost partitions
#   (the member was fenced) are dropped without a commit.
from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lockgate.client.cluster import Cluster, ClusterClient, PartitionInfo, TopicPartition
from lockgate.client.connection import DEFAULT_CLIENT_ID
from lockgate.client.consumer_member import ConsumerMember
from lockgate.client.errors import (
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    OffsetOutOfRangeError,
    error_for,
)
from lockgate.client.fetched import TimestampType as TimestampType
from lockgate.client.fetched import batch_records, whole_batches
from lockgate.client.group_member import GroupMember
from lockgate.client.membership import Membership
from lockgate.client.security import ClientSecurity
from lockgate.client.transactions import ConsumerGroupMetadata, OffsetAndMetadata
from lockgate.protocol.api import ApiKey
from lockgate.protocol.records import (
    CONTROL_ABORT,
    RecordHeaders,
    control_type,
)

log = logging.getLogger(__name__)

FIRST_FETCH_VERSION = 4  # isolation level and aborted transactions
FIRST_FETCH_TOPIC_ID_VERSION = 13
FIRST_LIST_OFFSETS_VERSION = 1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1


class IsolationLevel(enum.IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class OffsetReset(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"  # raise OffsetOutOfRangeError


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: RecordHeaders
    leader_epoch: int  # the batch's partition leader epoch, -1 if unknown


class RebalanceListener(Protocol):
    """Told about assignment changes of a subscribed consumer, inside poll()."""

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None: ...

    # A listener may also define `async def on_partitions_lost(lost)`: partitions taken away
    # without a chance to commit (a fenced member); without it, on_partitions_revoked is told.


@dataclass(slots=True)
class FetchedPartition:
    messages: list[Message]
    next_position: int | None  # None: keep the position (nothing complete was returned)


class FetchDecoder(Protocol):
    """Turns one partition's Fetch records into messages and the position after them:
    decode_fetched, or a decoder that keeps the records elsewhere (client/columns.py)."""

    def __call__(
        self,
        tp: TopicPartition,
        records: bytes,
        position: int,
        aborted_transactions: list[tuple[int, int]] | None,
        *,
        check_crcs: bool = True,
    ) -> FetchedPartition: ...


class Consumer(ClusterClient):
    """`async with Consumer("host:port") as consumer: consumer.assign([...]); await ...`, or
    with `group_id=...`: `consumer.subscribe(["topic"])`, then poll() and commit()."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        cluster: Cluster | None = None,
        client_id: str | None = DEFAULT_CLIENT_ID,
        isolation_level: IsolationLevel | str = IsolationLevel.READ_COMMITTED,
        auto_offset_reset: OffsetReset | str = OffsetReset.LATEST,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        partition_assignment_strategy: Sequence[str] = ("range", "cooperative-sticky"),
        group_protocol: str = "classic",
        group_remote_assignor: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        security: ClientSecurity | None = None,
        client_rack: str | None = None,
        decoder: FetchDecoder | None = None,
    ) -> None:
        super().__init__(
            bootstrap_servers, cluster, client_id, security, request_timeout_ms, retry_backoff_ms
        )
        self._decode: FetchDecoder = decoder if decoder is not None else decode_fetched
        cluster = self.cluster
        self.isolation_level = (
            IsolationLevel[isolation_level.upper()]
            if isinstance(isolation_level, str)
            else isolation_level
        )
        self.auto_offset_reset = OffsetReset(auto_offset_reset)
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.retry_backoff = retry_backoff_ms / 1000
        self.check_crcs = check_crcs
        # Kafka's client.rack: sent with every fetch, so that a leader with a replica selector
        # may name a replica of this rack to read from (KIP-392)
        self.client_rack = client_rack or ""
        # partition → (the broker its leader prefers it is read from, until when: monotonic s)
        self._read_replicas: dict[TopicPartition, tuple[int, float]] = {}
        self._positions: dict[TopicPartition, int | None] = {}
        self._paused: set[TopicPartition] = set()
        self._closed = False
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self._next_auto_commit = 0.0
        if group_protocol not in ("classic", "consumer"):
            raise ValueError(f"group_protocol is 'classic' or 'consumer', not {group_protocol!r}")
        if group_remote_assignor is not None and group_protocol != "consumer":
            raise ValueError("group_remote_assignor needs group_protocol='consumer'")
        self.group_protocol = group_protocol
        self._member: Membership | None
        if group_id is None:
            self._member = None
        elif group_protocol == "consumer":
            # session and heartbeat interval are the coordinator's settings under KIP-848
            self._member = ConsumerMember(
                cluster,
                group_id,
                group_instance_id=group_instance_id,
                remote_assignor=group_remote_assignor,
                rebalance_timeout_ms=max_poll_interval_ms,
                max_poll_interval_ms=max_poll_interval_ms,
            )
        else:
            self._member = GroupMember(
                cluster,
                group_id,
                group_instance_id=group_instance_id,
                assignors=partition_assignment_strategy,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=max_poll_interval_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                max_poll_interval_ms=max_poll_interval_ms,
            )
        self._topics: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None
        self._listener: RebalanceListener | None = None
        self._subscribed = False
        self._joined_topics: tuple[str, ...] = ()
        self._next_pattern_check = 0.0
        self._pending_commits: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        """Commits (auto commit) and leaves the group, then closes the connections."""
        if self._closed:
            return
        self._closed = True
        if self._member is not None:
            await asyncio.gather(*self._pending_commits, return_exceptions=True)
            if self.enable_auto_commit and self._member.joined:
                with contextlib.suppress(KafkaError):
                    await self.commit()
            await self._member.leave()
        await super().close()

    # ------------------------------------------------------------------------------------------
    # Assignment and positions

    async def partitions_for(self, topic: str) -> list[int]:
        info = await self.cluster.topic(topic, refresh=True)
        return [p.partition for p in info.partitions]

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replaces the assignment. Partitions kept from the previous one keep their position;
        new ones start at auto_offset_reset unless seek() says otherwise."""
        if self._subscribed:
            raise ValueError("the consumer is subscribed: unsubscribe() before assign()")
        wanted = list(dict.fromkeys(partitions))
        self._positions = {tp: self._positions.get(tp) for tp in wanted}
        self._paused &= set(wanted)

    # ------------------------------------------------------------------------------------------
    # Group membership

    def subscribe(
        self,
        topics: Iterable[str] = (),
        *,
        pattern: str | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        """Joins the consumer's group (at the next poll) for these topics, or every topic
        whose name matches `pattern` (checked at each rebalance and every metadata max age)."""
        if self._member is None:
            raise ValueError("subscribe() needs a group_id")
        names = tuple(sorted(set(topics)))
        if bool(names) == (pattern is not None):
            raise ValueError("give topics or a pattern")
        if not self._subscribed and self._positions:
            raise ValueError("the consumer has a manual assignment: assign([]) first")
        self._topics, self._listener, self._subscribed = names, listener, True
        self._pattern = None if pattern is None else re.compile(pattern)
        self._member.rejoin_needed = True

    async def unsubscribe(self) -> None:
        """Gives up the partitions (listener told, auto commit) and leaves the group."""
        if self._member is None or not self._subscribed:
            return
        await self._revoke(list(self._positions))
        await self._member.leave(reason="the consumer unsubscribed")
        self._subscribed, self._topics, self._pattern = False, (), None

    def group_metadata(self) -> ConsumerGroupMetadata:
        """For Producer.send_offsets_to_transaction (KIP-447): the group, generation, member
        id and instance id, which let the coordinator fence this consumer once it left."""
        if self._member is None:
            raise ValueError("group_metadata() needs a group_id")
        return self._member.metadata()

    async def _subscribed_topics(self) -> tuple[str, ...]:
        if self._pattern is None:
            return self._topics
        metadata = await self.cluster.refresh_metadata(None)
        return tuple(
            sorted(
                name
                for name, info in metadata.topics.items()
                if not info.internal and self._pattern.fullmatch(name)
            )
        )

    async def _ensure_group(self) -> None:
        member = self._member
        assert member is not None
        if member.fatal is not None:
            raise member.fatal
        member.last_poll = time.monotonic()
        now_ms = time.monotonic() * 1000
        pattern_due = self._pattern is not None and now_ms >= self._next_pattern_check
        if pattern_due and member.joined:
            self._next_pattern_check = now_ms + self.cluster.metadata_max_age_ms
            if await self._subscribed_topics() != self._joined_topics:
                member.rejoin_needed = True
        # A cooperative round that took partitions away is followed at once by another that
        # hands them over; more rounds than that mean the group is still changing.
        for _ in range(3):
            if not member.rejoin_needed and member.joined:
                return
            if not member.cooperative and self._positions:
                await self._revoke(list(self._positions))  # eager: give up everything first
                member.assignment = ()
            topics = await self._subscribed_topics()
            deadline = (
                time.monotonic()
                + (member.rebalance_timeout_ms + self.cluster.request_timeout_ms) / 1000
            )
            rebalance = await member.join(topics, deadline)
            self._joined_topics = topics
            if rebalance.lost:
                await self._lose(list(rebalance.lost))
            if rebalance.revoked:
                await self._revoke(list(rebalance.revoked))
            if rebalance.assigned:
                await self._assign_from_group(list(rebalance.assigned), deadline)
            member.reconciled()

    async def _lose(self, partitions: list[TopicPartition]) -> None:
        held = [tp for tp in partitions if tp in self._positions]
        for tp in held:
            self._positions.pop(tp, None)
            self._paused.discard(tp)
        if self._listener is not None and held:
            on_lost = getattr(self._listener, "on_partitions_lost", None)
            if on_lost is not None:
                await on_lost(held)
            else:
                await self._listener.on_partitions_revoked(held)

    async def _revoke(self, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        if self.enable_auto_commit:
            try:
                await self.commit(self._consumed(partitions))
            except KafkaError as exc:
                log.warning(
                    "auto commit before giving up %d partitions failed: %s", len(partitions), exc
                )
        if self._listener is not None:
            await self._listener.on_partitions_revoked(partitions)
        for tp in partitions:
            self._positions.pop(tp, None)
            self._paused.discard(tp)

    async def _assign_from_group(self, partitions: list[TopicPartition], deadline: float) -> None:
        member = self._member
        assert member is not None
        committed = await member.committed(
            partitions,
            require_stable=self.isolation_level is IsolationLevel.READ_COMMITTED,
            deadline=deadline,
        )
        for tp in partitions:
            found = committed.get(tp)
            self._positions[tp] = None if found is None else found.offset
        if self._listener is not None:
            await self._listener.on_partitions_assigned(partitions)

    def _consumed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return {
            tp: OffsetAndMetadata(position)
            for tp in partitions
            if (position := self._positions.get(tp)) is not None
        }

    async def commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> None:
        """Commits the given offsets (the next offset to read), by default the position of
        every assigned partition. Raises REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION /
        UNKNOWN_MEMBER_ID when the group moved on; the next poll rejoins."""
        if self._member is None:
            raise ValueError("commit() needs a group_id")
        chosen = (
            self._consumed(self._positions)
            if offsets is None
            else {
                tp: value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
                for tp, value in offsets.items()
            }
        )
        await self._member.commit(chosen)

    def commit_async(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> asyncio.Task[None]:
        """commit() in the background; the offsets are taken now. Await the task for the
        outcome; close() waits for the ones still running."""
        if offsets is None:
            offsets = self._consumed(self._positions)
        task = asyncio.create_task(self.commit(offsets))
        self._pending_commits.add(task)
        task.add_done_callback(self._pending_commits.discard)
        return task

    async def committed(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        if self._member is None:
            raise ValueError("committed() needs a group_id")
        wait = self.cluster.request_timeout_ms if timeout_ms is None else timeout_ms
        return await self._member.committed(
            partitions,
            require_stable=self.isolation_level is IsolationLevel.READ_COMMITTED,
            deadline=time.monotonic() + wait / 1000,
        )

    # ------------------------------------------------------------------------------------------
    # Pausing

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stops fetching these partitions (positions are kept) until resume()."""
        for tp in partitions:
            if tp not in self._positions:
                raise ValueError(f"{tp} is not assigned")
            self._paused.add(tp)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused.difference_update(partitions)

    def paused(self) -> list[TopicPartition]:
        return sorted(self._paused)

    def assignment(self) -> list[TopicPartition]:
        return list(self._positions)

    def seek(self, topic_partition: TopicPartition, offset: int) -> None:
        if topic_partition not in self._positions:
            raise ValueError(f"{topic_partition} is not assigned")
        if offset < 0:
            raise ValueError(f"offset {offset} is negative")
        self._positions[topic_partition] = offset

    async def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        await self._seek_to(EARLIEST_TIMESTAMP, partitions)

    async def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        await self._seek_to(LATEST_TIMESTAMP, partitions)

    async def position(self, topic_partition: TopicPartition) -> int:
        """The offset of the next record to be returned, resolving auto_offset_reset."""
        if topic_partition not in self._positions:
            raise ValueError(f"{topic_partition} is not assigned")
        await self._resolve_missing_positions()
        position = self._positions[topic_partition]
        assert position is not None
        return position

    async def _seek_to(self, timestamp: int, partitions: Iterable[TopicPartition] | None) -> None:
        targets = list(self._positions) if partitions is None else list(partitions)
        for tp in targets:
            if tp not in self._positions:
                raise ValueError(f"{tp} is not assigned")
        offsets = await self.list_offsets({tp: timestamp for tp in targets})
        self._positions.update(offsets)

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return await self.list_offsets({tp: EARLIEST_TIMESTAMP for tp in partitions})

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark (read_uncommitted) or last stable offset (read_committed)."""
        return await self.list_offsets({tp: LATEST_TIMESTAMP for tp in partitions})

    async def list_offsets(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """ListOffsets against each leader: -2 earliest, -1 latest, else the first offset whose
        timestamp is at least the one given (-1 when there is none)."""
        result: dict[TopicPartition, int] = {}
        remaining = dict(timestamps)
        last_error: KafkaError | None = None
        for attempt in range(self.cluster.metadata_retries):
            if not remaining:
                break
            if attempt:
                await asyncio.sleep(self.retry_backoff)
            by_leader: dict[int, list[tuple[TopicPartition, PartitionInfo]]] = {}
            for tp in remaining:
                partition = await self.cluster.partition(tp)
                by_leader.setdefault(partition.leader_id, []).append((tp, partition))
            answers = await asyncio.gather(
                *(
                    self._list_offsets_from(leader, group, remaining)
                    for leader, group in by_leader.items()
                ),
                return_exceptions=True,
            )
            for answer in answers:
                if isinstance(answer, BaseException):
                    if not isinstance(answer, KafkaError) or not answer.retriable:
                        raise answer
                    last_error = answer
                    continue
                for tp, outcome in answer.items():
                    if isinstance(outcome, int):
                        result[tp] = outcome
                        remaining.pop(tp, None)
                    elif outcome.retriable:
                        # a moved leader or a stale epoch: ask the cluster again next round
                        self.cluster.invalidate(tp.topic)
                        last_error = outcome
                    else:
                        raise outcome
        if remaining:
            raise last_error or KafkaConnectionError(
                f"no offsets for {', '.join(map(str, remaining))}"
            )
        return result

    async def _list_offsets_from(
        self,
        leader_id: int,
        group: list[tuple[TopicPartition, PartitionInfo]],
        timestamps: dict[TopicPartition, int],
    ) -> dict[TopicPartition, int | KafkaError]:
        connection = await self.cluster.connection(leader_id)
        version = connection.version_for(
            ApiKey.LIST_OFFSETS, min_version=FIRST_LIST_OFFSETS_VERSION
        )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, partition in group:
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "current_leader_epoch": partition.leader_epoch,
                    "timestamp": timestamps[tp],
                }
            )
        response = await connection.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": CONSUMER_REPLICA_ID,
                "isolation_level": int(self.isolation_level),
                "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
                "timeout": self.cluster.request_timeout_ms,
            },
            version=version,
        )
        outcome: dict[TopicPartition, int | KafkaError] = {}
        for topic in response.topics:
            for answer in topic.partitions:
                tp = TopicPartition(topic.name, int(answer.partition_index))
                if answer.error_code != ErrorCode.none:
                    outcome[tp] = error_for(answer.error_code, None, f"ListOffsets {tp}")
                else:
                    outcome[tp] = int(answer.offset)
        return outcome

    async def _resolve_missing_positions(self) -> None:
        missing = [tp for tp, position in self._positions.items() if position is None]
        if not missing:
            return
        if self.auto_offset_reset is OffsetReset.NONE:
            raise OffsetOutOfRangeError(
                f"no position for {', '.join(map(str, missing))} and auto_offset_reset is none"
            )
        timestamp = (
            EARLIEST_TIMESTAMP
            if self.auto_offset_reset is OffsetReset.EARLIEST
            else LATEST_TIMESTAMP
        )
        self._positions.update(await self.list_offsets({tp: timestamp for tp in missing}))

    # ------------------------------------------------------------------------------------------
    # Fetching

    async def poll(self, timeout_ms: int | None = None) -> list[Message]:
        """One round of Fetch requests (one per leader, in parallel); returns the messages
        they brought, possibly none. The brokers hold each request up to
        min(fetch_max_wait_ms, timeout_ms) waiting for data."""
        if self._closed:
            raise KafkaConnectionError("the consumer is closed")
        if self._subscribed:
            await self._ensure_group()
            self._maybe_auto_commit()
            if not self._positions or self._positions.keys() <= self._paused:
                wait = self.fetch_max_wait_ms if timeout_ms is None else timeout_ms
                await asyncio.sleep(min(wait, self._member_heartbeat_ms()) / 1000)
                return []
        elif not self._positions:
            raise ValueError("no partitions assigned")
        await self._resolve_missing_positions()
        max_wait = (
            self.fetch_max_wait_ms
            if timeout_ms is None
            else min(self.fetch_max_wait_ms, timeout_ms)
        )
        by_broker: dict[int, list[tuple[TopicPartition, PartitionInfo]]] = {}
        for tp in self._positions:
            if tp in self._paused:
                continue
            try:
                partition = await self.cluster.partition(tp)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                continue
            by_broker.setdefault(self._read_replica(tp, partition), []).append((tp, partition))
        if not by_broker:
            await asyncio.sleep(self.retry_backoff)
            return []
        results = await asyncio.gather(
            *(self._fetch_from(broker, group, max_wait) for broker, group in by_broker.items()),
            return_exceptions=True,
        )
        messages: list[Message] = []
        retry = False
        for (broker, group), result in zip(by_broker.items(), results, strict=True):
            if isinstance(result, BaseException):
                if isinstance(result, KafkaError) and result.retriable:
                    retry = True
                    self._forget_read_replica((tp for tp, _partition in group), broker)
                    continue
                raise result
            messages.extend(result)
        if retry and not messages:
            await asyncio.sleep(self.retry_backoff)
        return messages

    def _read_replica(self, tp: TopicPartition, partition: PartitionInfo) -> int:
        """The broker to fetch `tp` from: the replica its leader prefers while that holds and
        the broker is in the metadata, else the leader."""
        preferred = self._read_replicas.get(tp)
        if preferred is None:
            return partition.leader_id
        broker, until = preferred
        if time.monotonic() >= until or broker not in self.cluster.metadata.brokers:
            del self._read_replicas[tp]  # ask the leader again
            return partition.leader_id
        return broker

    def _forget_read_replica(self, partitions: Iterable[TopicPartition], broker: int) -> None:
        """A request to `broker` failed: the partitions it served as preferred replica go back
        to their leaders."""
        for tp in partitions:
            if self._read_replicas.get(tp, (None, 0.0))[0] == broker:
                del self._read_replicas[tp]

    def _maybe_auto_commit(self) -> None:
        now = time.monotonic()
        if not self.enable_auto_commit or now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self.auto_commit_interval
        if self._positions and not self._pending_commits:
            task = self.commit_async()
            task.add_done_callback(_log_failed_auto_commit)

    def _member_heartbeat_ms(self) -> int:
        return 100 if self._member is None else self._member.heartbeat_interval_ms

    def messages(
        self, *, max_messages: int | None = None, idle_timeout_ms: int | None = None
    ) -> AsyncIterator[Message]:
        """Async iterator over messages: stops after `max_messages`, or once no message came
        for `idle_timeout_ms` (runs until cancelled when both are None)."""
        return _MessageStream(self, max_messages, idle_timeout_ms)

    async def _fetch_from(
        self, broker: int, group: list[tuple[TopicPartition, PartitionInfo]], max_wait_ms: int
    ) -> list[Message]:
        """One Fetch to `broker`: the leader of the partitions in `group`, or the replica
        their leaders prefer."""
        connection = await self.cluster.connection(broker)
        version = connection.version_for(ApiKey.FETCH, min_version=FIRST_FETCH_VERSION)
        use_ids = version >= FIRST_FETCH_TOPIC_ID_VERSION
        topic_ids: dict[str, Any] = {}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, partition in group:
            position = self._positions.get(tp)
            if position is None:
                continue
            if use_ids:
                info = self.cluster.metadata.topics.get(tp.topic)
                if info is None or info.topic_id is None:
                    self.cluster.invalidate(tp.topic)
                    continue
                topic_ids[tp.topic] = info.topic_id
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "current_leader_epoch": partition.leader_epoch,
                    "fetch_offset": position,
                    "last_fetched_epoch": -1,
                    "log_start_offset": -1,
                    "partition_max_bytes": self.max_partition_fetch_bytes,
                }
            )
        if not by_topic:
            return []
        response = await connection.request(
            ApiKey.FETCH,
            {
                "replica_id": CONSUMER_REPLICA_ID,
                "max_wait": max_wait_ms,
                "min_bytes": self.fetch_min_bytes,
                "max_bytes": self.fetch_max_bytes,
                "isolation_level": int(self.isolation_level),
                "session_id": 0,
                "session_epoch": -1,  # no fetch session: every request is a full fetch
                "topics": [
                    {"topic": name, "topic_id": topic_ids.get(name), "partitions": parts}
                    for name, parts in by_topic.items()
                ],
                "forgotten_topics_data": [],
                "rack_id": self.client_rack,
            },
            version=version,
            timeout_ms=self.cluster.request_timeout_ms + max_wait_ms,
        )
        if response.error_code != ErrorCode.none:
            raise error_for(response.error_code, None, "Fetch")
        names_by_id = {topic_id: name for name, topic_id in topic_ids.items()}
        messages: list[Message] = []
        for topic in response.responses:
            name = names_by_id.get(topic.topic_id) if use_ids else topic.topic
            if name is None:
                continue
            for data in topic.partitions:
                tp = TopicPartition(name, int(data.partition_index))
                if tp not in self._positions:
                    continue
                messages.extend(self._apply_partition(tp, data))
        return messages

    def _apply_partition(self, tp: TopicPartition, data: Any) -> list[Message]:
        error = ErrorCode(data.error_code)
        position = self._positions.get(tp)
        if position is None:
            return []
        if error != ErrorCode.none and self._read_replicas.pop(tp, None) is not None:
            # the preferred replica failed us (not in sync any more, behind, gone): the leader
            # serves or names another; an offset out of range there is no reason to reset
            if error != ErrorCode.offset_out_of_range:
                self.cluster.invalidate(tp.topic)
            return []
        if error == ErrorCode.offset_out_of_range:
            if self.auto_offset_reset is OffsetReset.NONE:
                raise OffsetOutOfRangeError(f"{tp} has no offset {position}")
            self._positions[tp] = None  # resolved by the next poll
            return []
        if error != ErrorCode.none:
            exc = error_for(error, None, f"Fetch {tp}")
            if exc.retriable:
                self.cluster.invalidate(tp.topic)
                return []
            raise exc
        preferred = int(getattr(data, "preferred_read_replica", -1))
        if preferred >= 0:  # the leader sends us elsewhere (and sent no records)
            until = time.monotonic() + self.cluster.metadata_max_age_ms / 1000
            self._read_replicas[tp] = (preferred, until)
            return []
        aborted = [
            (int(a.first_offset), int(a.producer_id)) for a in (data.aborted_transactions or ())
        ]
        result = self._decode(
            tp,
            bytes(data.records or b""),
            position,
            aborted if self.isolation_level is IsolationLevel.READ_COMMITTED else None,
            check_crcs=self.check_crcs,
        )
        if result.next_position is not None and self._positions.get(tp) == position:
            self._positions[tp] = result.next_position
        return result.messages


def _log_failed_auto_commit(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("auto commit failed (the next one will try again): %s", task.exception())


class _MessageStream(AsyncIterator[Message]):
    def __init__(self, consumer: Consumer, max_messages: int | None, idle_timeout_ms: int | None):
        self._consumer = consumer
        self._left = max_messages
        self._idle_timeout = None if idle_timeout_ms is None else idle_timeout_ms / 1000
        self._buffer: deque[Message] = deque()

    def __aiter__(self) -> _MessageStream:
        return self

    async def __anext__(self) -> Message:
        if self._left is not None and self._left <= 0:
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        deadline = None if self._idle_timeout is None else loop.time() + self._idle_timeout
        while not self._buffer:
            if deadline is None:
                wait_ms = None
            else:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise StopAsyncIteration
                wait_ms = max(1, int(remaining * 1000))
            self._buffer.extend(await self._consumer.poll(wait_ms))
        if self._left is not None:
            self._left -= 1
        return self._buffer.popleft()


def decode_fetched(
    tp: TopicPartition,
    records: bytes,
    position: int,
    aborted_transactions: list[tuple[int, int]] | None,
    *,
    check_crcs: bool = True,
) -> FetchedPartition:
    """The messages in one partition's Fetch records at or after `position`, and the position
    after them. `aborted_transactions` (first offset, producer id) enables read_committed
    filtering; None means read_uncommitted."""
    messages: list[Message] = []
    next_position: int | None = None
    aborted_queue = list(aborted_transactions or ())
    heapq.heapify(aborted_queue)
    aborting: set[int] = set()  # producers whose records are being dropped
    for chunk, header in whole_batches(records, str(tp), check_crcs=check_crcs):
        if header.last_offset < position:
            continue
        # Batches come in offset order: whatever this one holds, it is behind us afterwards.
        next_position = header.last_offset + 1
        if aborted_transactions is not None:
            while aborted_queue and aborted_queue[0][0] <= header.last_offset:
                aborting.add(heapq.heappop(aborted_queue)[1])
        if header.is_control:
            if header.producer_id in aborting and is_abort_marker(chunk):
                aborting.discard(header.producer_id)
            continue
        if (
            aborted_transactions is not None
            and header.is_transactional
            and header.producer_id in aborting
        ):
            continue
        decoded, timestamp_type = batch_records(chunk, header, str(tp))
        for record in decoded:
            if record.offset < position:
                continue
            messages.append(
                Message(
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=record.offset,
                    timestamp=record.timestamp,
                    timestamp_type=timestamp_type,
                    key=record.key,
                    value=record.value,
                    headers=record.headers,
                    leader_epoch=header.partition_leader_epoch,
                )
            )
    return FetchedPartition(messages, next_position)


def is_abort_marker(batch: bytes) -> bool:
    try:
        return control_type(batch) == CONTROL_ABORT
    except (ValueError, IndexError):
        return False  # an unknown control record type is skipped, as Kafka's consumer does
