# The group coordinator: the groups of the __consumer_offsets partitions coordinated here (all
# of them on a single node, those led here in a cluster). Its CoordinatorRuntime (runtime.py)
# owns those partitions, loads them in the background (snapshots, then the records after them),
# answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a group whose partition is not
# (yet) served and appends the groups' records; this coordinator is its shard (the replay of
# the groups' records, what a partition's load and unload do to the groups) and has one method
# per group API, which it hands to the piece that runs it:
# classic_runtime.py (classic membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
# consumer_runtime.py (the consumer group protocol, KIP-848, and mixed groups), share_runtime.py
# (share groups, KIP-932) and offsets.py (committed and transactional offsets, deletions,
# retention).
from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator import runtime, writes
from lockgate.coordinator.group import consumer_records, share_records
from lockgate.coordinator.group.classic import Answer, JoinRequest, SyncRequest, restore_group
from lockgate.coordinator.group.classic_runtime import ClassicRuntime
from lockgate.coordinator.group.committed import partition_of
from lockgate.coordinator.group.consumer_runtime import ConsumerProtocol, GroupTimeouts
from lockgate.coordinator.group.group import Group, TopicPartition
from lockgate.coordinator.group.offsets import Offsets, consumer_tombstones
from lockgate.coordinator.group.records import (
    CommittedOffset,
    decode_group_value,
    decode_key,
    offset_commit,
)
from lockgate.coordinator.group.share_group import ShareGroup
from lockgate.coordinator.group.share_offsets import ShareOffsets
from lockgate.coordinator.group.share_runtime import ShareProtocol, ShareSettings
from lockgate.coordinator.group.views import (
    ConsumerGroupView,
    GroupListing,
    NotFound,
    consumer_view,
    listing,
)
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.fastpath import apply_offset_commits
from lockgate.protocol.records import (
    CONTROL_COMMIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Decoded,
    build_batch,
    control_type,
)
from lockgate.topics.directory import TopicManager
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC

log = logging.getLogger(__name__)


class GroupSettings(GroupTimeouts, ShareSettings, Protocol):
    """The groups' own settings (ConfigResource GROUP) the coordinator reads."""


@dataclass(slots=True)
class _Load:
    """One load of a partition: the records of transactions still open, by producer (as
    decoded: protocol.records.Decoded), and the groups its records made or changed, in the
    order the coordinator holds them, each with its offset records (Group.offsets.records:
    where a commit goes, found with one lookup)."""

    pending: dict[int, Decoded] = field(default_factory=dict)
    groups: dict[str, dict[bytes, bytes]] = field(default_factory=dict)


class GroupCoordinator:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicManager,
        write: runtime.Write,
        clock: Callable[[], int],
        on_loaded: Callable[[float], None],
        snapshots: runtime.Snapshots | None,
        timers: runtime.Timers,
        group_configs: GroupSettings | None = None,
    ) -> None:
        """`topics` holds __consumer_offsets (created here on a single node) and answers which
        topics exist; `write` appends a batch as the partition's leader; `on_loaded` is told
        how long a partition took to load; `snapshots` follows the loaded partitions on a
        single node (None in a cluster: snapshots are a single node's, for now); `timers`
        is the root's timers port, the members' sessions and rebalances are armed through;
        `group_configs` the groups' own settings (ConfigResource GROUP; None: the broker's)."""
        self.topics = topics
        self._clock = clock
        # the partitions of __consumer_offsets coordinated here, their loads and epochs
        self.runtime = runtime.CoordinatorRuntime(
            CONSUMER_OFFSETS_TOPIC,
            topics,
            config.integer("offsets.topic.num.partitions"),
            shard=self,
            write=write,
            clock=clock,
            on_loaded=on_loaded,
            snapshots=snapshots,
            timers=timers,
            voice=runtime.Voice(log, "group", "groups", logging.DEBUG, logging.INFO),
        )
        self.min_session_ms = config.integer("group.min.session.timeout.ms")
        self.max_session_ms = config.integer("group.max.session.timeout.ms")
        self.groups: dict[str, Group] = {}
        self.classic = ClassicRuntime(
            self.groups,
            self._append,
            clock,
            timers,
            config.integer("group.initial.rebalance.delay.ms"),
        )
        # the consumer group protocol (KIP-848)
        self.consumer = ConsumerProtocol(
            config,
            topics,
            self.groups,
            self.unavailable,
            self._append,
            self.classic,
            clock,
            timers,
            group_configs,
        )
        # share groups (KIP-932)
        self.share = ShareProtocol(
            config, topics, self.groups, self.unavailable, self._append, clock, timers,
            group_configs,
        )  # fmt: skip
        self.share_offsets = ShareOffsets(self.share, self._latest_offset)
        self.offsets = Offsets(
            self.groups,
            self.unavailable,
            self._append,
            topics.exists,
            self.consumer.topic_counts,
            self.classic.touch,
            max_metadata_bytes=config.integer("offset.metadata.max.bytes"),
            retention_ms=config.integer("offsets.retention.ms"),
        )

    # -- the offsets topic's partitions (the runtime's) ------------------------------------------

    @property
    def loaded(self) -> bool:
        """Every partition coordinated here is loaded (ListGroups needs them all)."""
        return self.runtime.loaded

    async def _latest_offset(self, topic: str, partition: int) -> int | ErrorCode:
        """A partition's high watermark (a share group's lag) when it is held here; the broker
        replaces this with cluster/latest_offsets.py, which asks the leader elsewhere."""
        held = self.topics.get(topic, partition)
        return held.high_watermark if held is not None else ErrorCode.not_leader_or_follower

    def unavailable(self, group_id: str) -> ErrorCode:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for the group's partition, if so."""
        return self.runtime.serving(group_id)

    def offsets_partition(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    # -- describing the groups (DescribeGroups, ListGroups, ConsumerGroupDescribe) -------------

    def describe_classic(self, group_id: str) -> Group | ErrorCode | NotFound:
        """The classic group; NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS; not found
        (unknown, or a consumer-protocol group: Kafka 4 describes those with the other API)."""
        if unavailable := self.unavailable(group_id):
            return unavailable
        group = self.groups.get(group_id)
        if group is None:
            return NotFound(f"Group {group_id} not found.")
        if group.consumer is not None or group.share is not None:
            return NotFound(f"Group {group_id} is not a classic group.")
        return group

    def list_groups(self, states: set[str], types: set[str]) -> list[GroupListing] | ErrorCode:
        """The groups coordinated here, in id order, whose state and type (lower case) pass
        the filters (empty: any); COORDINATOR_LOAD_IN_PROGRESS until every partition is loaded."""
        if not self.loaded:
            return ErrorCode.coordinator_load_in_progress
        listed = (listing(group) for _, group in sorted(self.groups.items()))
        return [
            entry
            for entry in listed
            if (not states or entry.state.lower() in states)
            and (not types or entry.group_type in types)
        ]

    def describe_consumer(self, group_id: str) -> ConsumerGroupView | ErrorCode | NotFound:
        """The consumer-protocol group (KIP-848); NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS; not found (unknown, or a classic group)."""
        if unavailable := self.unavailable(group_id):
            return unavailable
        group = self.groups.get(group_id)
        if group is None:
            return NotFound(f"Group {group_id} not found.")
        if group.consumer is None:
            return NotFound(f"Group {group_id} is not a consumer group.")
        return consumer_view(
            group.consumer, self.consumer.config.assignors[0], self.consumer.topic_counts()
        )

    def describe_share(self, group_id: str) -> ShareGroup | ErrorCode | NotFound:
        """The share group (KIP-932); NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS; not
        found (unknown, or a group of another type)."""
        if unavailable := self.unavailable(group_id):
            return unavailable
        group = self.groups.get(group_id)
        if group is None:
            return NotFound(f"Group {group_id} not found.")
        if group.share is None:
            return NotFound(f"Group {group_id} is not a share group.")
        return group.share

    # -- the shard: what the runtime's loads and unloads do to the groups ----------------------

    def size(self) -> int:
        """(Shard) The groups held here."""
        return len(self.groups)

    def attach(self, index: int) -> None:
        """(Shard) The partition's transaction markers apply its groups' pending offsets
        (the partition is this coordinator's alone)."""
        self.runtime.partition_at(index).marker_listeners[:] = [self._on_marker(index)]

    def unload(self, index: int) -> int:
        """(Shard) Forgets a partition's groups: their members' waits end with
        NOT_COORDINATOR and they look for the new coordinator; nothing is written."""
        gone = [g for g in self.groups.values() if self.offsets_partition(g.group_id) == index]
        for group in gone:
            del self.groups[group.group_id]
            self.consumer.unloaded(group)
            self.share.unloaded(group)
            self.classic.forget(group, ErrorCode.not_coordinator)
        self.offsets.forget(lambda group_id: self.offsets_partition(group_id) == index)
        return len(gone)

    def replay(self, index: int) -> runtime.Replay:
        """(Shard) A load of one partition. Transactional offsets wait for their marker,
        which is in the same partition."""
        load = _Load()
        return runtime.Replay(
            functools.partial(self._replay_batch, load), functools.partial(self._loaded, load)
        )

    def _loaded(self, load: _Load) -> runtime.Loaded:
        """The partition is loaded: the offsets of transactions still open wait for their
        markers, restored members get a session to come back."""
        for producer_id, records in load.pending.items():  # transactions still open
            for _offset, _ts, key, value in records:
                if key is None:
                    continue
                try:
                    commit = offset_commit(key, value)
                    if commit is not None and value is not None:
                        group, canonical = commit
                        self.offsets.pending.setdefault(producer_id, {}).setdefault(group, {})[
                            partition_of(canonical)
                        ] = value
                except ValueError as exc:
                    log.error("skipping a damaged %s record: %s", CONSUMER_OFFSETS_TOPIC, exc)
        # (the partition's groups are those its replay made: requests for them waited)
        restored = [self.groups[g] for g in load.groups if g in self.groups]
        for each in restored:  # restored members get a session to come back
            for member in each.members.values():
                self.classic.touch(each, member)
            self.consumer.loaded(each)
            self.share.loaded(each)
        return runtime.Loaded(len(restored))

    def _append(
        self,
        group_id: str,
        records: list[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> asyncio.Future[None]:
        """Appends records (synchronously) to the group's offsets partition; returns the future
        of their durability. `producer` makes it a transactional batch of that producer."""
        producer_id, epoch = producer if producer else (-1, -1)
        batch = build_batch(
            list(records),
            timestamp_ms=self._clock(),
            attributes=TRANSACTIONAL_BIT if producer else 0,
            producer_id=producer_id,
            producer_epoch=epoch,
        )
        try:
            return self.runtime.append(group_id, batch)
        except KafkaProtocolError as exc:  # (callers handle every failure where they await)
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return failed

    def _replay_batch(
        self, load: _Load, header: BatchHeader, data: bytes, records: Decoded
    ) -> None:
        """One batch of the replay; `load.pending` holds open transactions' records by
        producer, applied at their commit marker."""
        if header.is_control:
            ended = load.pending.pop(header.producer_id, [])
            if control_type(data) == CONTROL_COMMIT:
                self._apply(load, ended)
            return
        if header.is_transactional:
            load.pending.setdefault(header.producer_id, []).extend(records)
            return
        if load.pending:
            _drop_pending_tombstoned(load.pending, records)
        self._apply(load, records)

    def _apply(self, load: _Load, records: Decoded) -> None:
        """Replays records in order: the runs of offset commits (all but a few records of a
        load: a million of them for a million live offsets) a run at a time in one call
        (protocol.fastpath.apply_offset_commits, compiled: it checks each as offset_commit
        does and moves it into its group's records), every other record, and a commit of a
        group the load has not made yet, one at a time by _replay."""
        index, end, offsets_of = 0, len(records), load.groups
        while (index := apply_offset_commits(records, index, offsets_of)) < end:
            _offset, _ts, key, value = records[index]
            if key is not None:  # (always: records with no key are passed over)
                self._replay(load, key, value)
            index += 1

    def _replay(self, load: _Load, key: bytes, value: bytes | None) -> None:
        try:
            commit = offset_commit(key, value)
            if commit is not None:  # (as apply_offset_commits, in _apply)
                group_id, canonical = commit
                held = self._replayed_group(load, group_id).offsets.records
                if value is None:
                    held.pop(canonical, None)
                else:
                    held[canonical] = value
                return
            if share_records.record_kind(key) is not None:
                self._replay_share(load, key, value)
                return
            if consumer_records.key_version(key) in consumer_records.CONSUMER_KEY_VERSIONS:
                group_id = consumer_records.decode(key, None, {}).group_id
                self.consumer.replay(self._replayed_group(load, group_id), key, value)
                return
            decoded = decode_key(key)
            if isinstance(decoded, tuple):  # (offset commits are handled above)
                raise ValueError("an offset commit key of an unknown layout")
            # the classic group ends; its offsets and consumer-protocol state are records of
            # their own (a snapshot replays each key's latest record: a full replay must come
            # to the same whatever the order of keys)
            if value is None:
                ended = self.groups.pop(decoded, None)
                load.groups.pop(decoded, None)  # (made again: last, as in self.groups)
                if ended is not None and (ended.offsets.records or ended.consumer is not None):
                    kept = self._replayed_group(load, decoded)
                    kept.offsets, kept.consumer = ended.offsets, ended.consumer
                    load.groups[decoded] = kept.offsets.records
                return
            restore_group(
                self._replayed_group(load, decoded), decode_group_value(value), self._clock()
            )
        except (ValueError, UnicodeDecodeError, IndexError) as exc:
            log.error("skipping a damaged %s record: %s", CONSUMER_OFFSETS_TOPIC, exc)

    def _replay_share(self, load: _Load, key: bytes, value: bytes | None) -> None:
        """A share group's record; its group goes when its epoch record's tombstone comes
        (a tombstone of a group already gone is passed over)."""
        group_id = share_records.decode(key, None, {}).group_id
        if value is None and group_id not in self.groups:
            return
        container = self._replayed_group(load, group_id)
        self.share.replay(container, key, value)
        if (
            container.share is None
            and container.consumer is None
            and not container.members
            and not container.offsets.records
        ):
            del self.groups[group_id]
            load.groups.pop(group_id, None)

    def _replayed_group(self, load: _Load, group_id: str) -> Group:
        """The group a replayed record is of (made if new, and counted as the load's)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        load.groups.setdefault(group_id, group.offsets.records)
        return group

    # -- classic membership (classic_runtime.py; consumer-protocol groups: consumer_runtime.py)

    async def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
    ) -> Answer:
        def error(code: ErrorCode) -> Answer:
            return {"error_code": code, "member_id": member_id}

        if unavailable := self.unavailable(group_id):
            return error(unavailable)
        if not group_id:
            return error(ErrorCode.invalid_group_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return error(ErrorCode.invalid_session_timeout)
        group = self.groups.get(group_id)
        if group is not None and group.share is not None:
            # as Kafka 4.4: a share group cannot take classic members (no member id given)
            return {"error_code": ErrorCode.inconsistent_group_protocol, "member_id": ""}
        if group is None:
            if member_id:
                return error(ErrorCode.unknown_member_id)
            group = self.groups[group_id] = Group(group_id)
        request = JoinRequest(
            group_id, member_id, group_instance_id, protocol_type, protocols,
            session_timeout_ms, rebalance_timeout_ms, client_id, client_host,
            require_known_member_id,
        )  # fmt: skip
        if group.consumer is not None:
            if group.consumer.members:
                # a classic member in a consumer-protocol group (Kafka 4's mixed groups): the
                # server-side assignor assigns it
                return await self.consumer.classic_join(group, request)
            await self._drop_consumer_protocol(group)
        return await self.classic.join(group, request)

    async def _drop_consumer_protocol(self, group: Group) -> None:
        """An empty consumer-protocol group becomes a classic one (as Kafka): its records
        are deleted, its offsets stay."""
        tombstones = consumer_tombstones(group)
        group.consumer = None
        group.protocol_type = ""
        try:
            await self._append(group.group_id, tombstones)
        except writes.WriteFailure as exc:
            log.error("group %s: could not delete its consumer protocol records: %s",
                      group.group_id, exc)  # fmt: skip

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> Answer:
        group = self.groups.get(group_id)
        if unavailable := self.unavailable(group_id):
            return {"error_code": unavailable}
        if group is None or group.share is not None:
            return {"error_code": ErrorCode.unknown_member_id}
        request = SyncRequest(
            group_id, generation, member_id, group_instance_id, protocol_type, protocol_name,
            assignments,
        )  # fmt: skip
        if group.consumer is not None:
            return self.consumer.classic_sync(group, request)
        return await self.classic.sync(group, request)

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if unavailable := self.unavailable(group_id):
            return unavailable
        group = self.groups.get(group_id)
        if group is None or group.share is not None:
            return ErrorCode.unknown_member_id
        if group.consumer is not None:
            return self.consumer.classic_heartbeat(group, generation, member_id, group_instance_id)
        return self.classic.heartbeat(group, generation, member_id, group_instance_id)

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[Answer]]:
        group = self.groups.get(group_id)
        if unavailable := self.unavailable(group_id):
            return unavailable, []
        if group is None or group.share is not None:
            return ErrorCode.unknown_member_id, []
        if group.consumer is not None:
            return ErrorCode.none, self.consumer.classic_leave(group, members)
        return ErrorCode.none, self.classic.leave(group, members)

    # -- offsets (offsets.py) ----------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, CommittedOffset],
        api_version: int = 10,
    ) -> dict[TopicPartition, ErrorCode]:
        return await self.offsets.commit(
            group_id, generation, member_id, group_instance_id, offsets, api_version
        )

    def fetch(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        require_stable: bool,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, tuple[CommittedOffset | None, ErrorCode]]]:
        return self.offsets.fetch(group_id, partitions, require_stable, member_id, member_epoch)

    async def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, CommittedOffset],
    ) -> dict[TopicPartition, ErrorCode]:
        return await self.offsets.txn_commit(
            group_id, producer_id, producer_epoch, generation, member_id, group_instance_id,
            offsets,
        )  # fmt: skip

    def expire_offsets(self, now: int) -> int:
        return self.offsets.expire(now)

    async def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is not None and group.share is not None and not self.unavailable(group_id):
            return await self.share.delete(group)
        return await self.offsets.delete_group(group_id)

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        return await self.offsets.delete_offsets(group_id, partitions)

    # -- deleted topics -------------------------------------------------------------------------

    def topic_deleted(self, topic_id: uuid.UUID, name: str) -> None:
        """(A topic deletion listener) Kafka's handleTopicsDeletion, for the groups of the
        offsets partitions served here (those not loaded here are their coordinator's): the
        topic's committed and pending offsets are deleted, share groups' record 15 no longer
        names it. Written in the background, failures logged, never tried again (as Kafka)."""
        self.offsets.topic_deleted(name)
        self.share.topic_deleted(topic_id)

    def _on_marker(self, partition_index: int) -> Callable[[int, bool], None]:
        def apply(producer_id: int, commit: bool) -> None:
            if partition_index not in self.runtime.loaded_partitions:
                return  # the partition's replay reads this marker itself
            self.offsets.transaction_ended(
                lambda group_id: self.offsets_partition(group_id) == partition_index,
                producer_id,
                commit,
            )

        return apply


def _drop_pending_tombstoned(pending: dict[int, Decoded], records: Decoded) -> None:
    """Kafka's replay rule: an offset tombstone outside a transaction (OffsetDelete,
    DeleteGroups, a deleted topic) deletes the partition's offsets pending in open
    transactions too, so their commit brings none back (and a log compacted meanwhile,
    which keeps only the tombstone, replays to the same)."""
    doomed = set()
    for _offset, _ts, key, value in records:
        if value is None and key is not None:
            try:
                commit = offset_commit(key, None)
            except ValueError:
                continue  # (the replay logs it)
            if commit is not None:
                doomed.add(commit[1])
    if not doomed:
        return
    for producer_id, held in pending.items():
        kept = []
        for record in held:
            key = record[2]
            try:
                commit = None if key is None else offset_commit(key, record[3])
            except ValueError:
                commit = None
            if commit is None or commit[1] not in doomed:
                kept.append(record)
        pending[producer_id] = kept
