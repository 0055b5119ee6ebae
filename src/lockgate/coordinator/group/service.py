# The group coordinator at run time: classic-protocol membership (join barrier, sync, session
# expiry, static members), committed offsets persisted in __consumer_offsets (Kafka's record
# layout, replayed at start-up), and transactional offsets (KIP-447) that become visible only
# when the transaction's commit marker reaches the offsets partition. Consumer-protocol groups
# (KIP-848) are run by consumer_runtime.py; this module hands them their requests and has
# consumer_group.py's rules check their member epochs in offset commits and fetches.
from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from lockgate.coordinator import writes
from lockgate.coordinator.group import consumer_records
from lockgate.coordinator.group.consumer_group import (
    ConsumerRecord,
    RecordKind,
    validate_offset_commit,
    validate_offset_fetch,
)
from lockgate.coordinator.group.consumer_runtime import ConsumerProtocol
from lockgate.coordinator.group.group import Group, Member, TopicPartition
from lockgate.coordinator.group.records import (
    CommittedOffset,
    GroupRecord,
    MemberRecord,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key,
    group_value,
    offset_key,
    offset_value,
    subscribed_topics,
)
from lockgate.coordinator.group.state import GroupState
from lockgate.coordinator.snapshots import PartitionImage, restore
from lockgate.coordinator.txn.log import partition_for
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    CONTROL_COMMIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    build_batch,
    control_type,
    iter_records,
)
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC

if TYPE_CHECKING:
    from lockgate.server.broker import Broker

log = logging.getLogger(__name__)

Answer = dict[str, Any]


def now_ms() -> int:
    return int(time.time() * 1000)


def _retrieve(durable: asyncio.Future[None]) -> None:
    """Expiry tombstones nobody waits for: a failed write is logged by the group commit and
    the next start replays the offsets again, to expire them again."""
    if not durable.cancelled():
        durable.exception()


class GroupCoordinator:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.num_partitions = config.integer("offsets.topic.num.partitions")
        self.initial_delay_ms = config.integer("group.initial.rebalance.delay.ms")
        self.min_session_ms = config.integer("group.min.session.timeout.ms")
        self.max_session_ms = config.integer("group.max.session.timeout.ms")
        self.max_metadata_bytes = config.integer("offset.metadata.max.bytes")
        self.offsets_retention_ms = config.integer("offsets.retention.ms")
        self.groups: dict[str, Group] = {}
        # producer id → group → offsets written in its open transaction
        self.pending_txn_offsets: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        # __consumer_offsets partitions coordinated here → their leader epoch: every
        # partition on a single node, those led here in a cluster
        self.owned: dict[int, int] = {}
        self.loaded_partitions: set[int] = set()
        self._loads: dict[int, asyncio.Task[Any]] = {}
        self.sessions_expired = 0
        self.replayed_batches = 0  # by the last load, after the snapshots
        self.expiry_lateness_ms = 0.0  # the latest a session expired after its deadline
        self.consumer = ConsumerProtocol(self)  # the consumer group protocol (KIP-848)

    # -- the offsets topic ----------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        """Every partition coordinated here is loaded."""
        return self.loaded_partitions.issuperset(self.owned)

    def ensure_topic(self) -> None:
        """A single node: creates the topic if needed and coordinates every partition."""
        topics = self.broker.topics
        if CONSUMER_OFFSETS_TOPIC not in topics.topics:
            topics.create(CONSUMER_OFFSETS_TOPIC, self.num_partitions, 1, {}, internal=True)
        self.num_partitions = topics.topics[CONSUMER_OFFSETS_TOPIC].partitions
        for index in range(self.num_partitions):
            partition = self._partition_at(index)
            partition.marker_listeners.append(self._on_marker(index))
            self.owned[index] = partition.leader_epoch

    def on_leadership(self, index: int, epoch: int | None) -> None:
        """Cluster mode: this broker leads `index` of __consumer_offsets in `epoch` and
        coordinates its groups (loaded in the background), or (None) no longer does."""
        task = self._loads.pop(index, None)
        if task is not None:
            task.cancel()
        self._unload(index)
        if epoch is None:
            return
        self.num_partitions = self.broker.topics.topics[CONSUMER_OFFSETS_TOPIC].partitions
        partition = self._partition_at(index)
        listener = self._on_marker(index)
        partition.marker_listeners[:] = [listener]  # (the partition is this coordinator's alone)
        self.owned[index] = epoch
        self._loads[index] = asyncio.get_running_loop().create_task(self._load_partition(index))

    def _unload(self, index: int) -> None:
        """Forgets a partition's groups: their members' waits end with NOT_COORDINATOR and
        they look for the new coordinator; nothing is written."""
        self.owned.pop(index, None)
        self.loaded_partitions.discard(index)
        gone = [g for g in self.groups.values() if self.offsets_partition(g.group_id) == index]
        for group in gone:
            del self.groups[group.group_id]
            if group.rebalance_task is not None:
                group.rebalance_task.cancel()
            self.consumer.unloaded(group)
            for member in group.members.values():
                if member.expiry is not None:
                    member.expiry.cancel()
                for waiter in (member.join_waiter, member.sync_waiter):
                    if waiter is not None and not waiter.done():
                        waiter.set_result({"error_code": ErrorCode.not_coordinator,
                                           "member_id": member.member_id})  # fmt: skip
        for by_group in self.pending_txn_offsets.values():
            for group_id in [g for g in by_group if self.offsets_partition(g) == index]:
                del by_group[group_id]
        if gone:
            log.info("no longer coordinating %s-%d: %d groups unloaded", CONSUMER_OFFSETS_TOPIC,
                     index, len(gone))  # fmt: skip

    def gate(self, group_id: str) -> ErrorCode:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for the group's partition, if so."""
        index = self.offsets_partition(group_id)
        if index not in self.owned:
            return ErrorCode.not_coordinator
        if index not in self.loaded_partitions:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    def offsets_partition(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def _partition_at(self, index: int) -> Partition:
        partition = self.broker.topics.get(CONSUMER_OFFSETS_TOPIC, index)
        if partition is None:  # the internal topic's log could not be opened
            raise KafkaProtocolError(
                ErrorCode.coordinator_not_available, f"{CONSUMER_OFFSETS_TOPIC}-{index} is not open"
            )
        return partition

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
            timestamp_ms=now_ms(),
            attributes=TRANSACTIONAL_BIT if producer else 0,
            producer_id=producer_id,
            producer_epoch=epoch,
        )
        index = self.offsets_partition(group_id)
        try:
            if index not in self.owned:  # lost while the caller awaited something
                raise KafkaProtocolError(ErrorCode.not_coordinator)
            partition = self._partition_at(index)
            return writes.append(self.broker.writer, partition, batch, internal=True)
        except KafkaProtocolError as exc:  # (callers handle every failure where they await)
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return failed

    async def load(self) -> None:
        """A single node's start: loads every partition, one at a time without holding the
        event loop; a group is served as soon as its partition is loaded
        (COORDINATOR_LOAD_IN_PROGRESS before)."""
        started = time.monotonic()
        loads = [await self._load_partition(index) for index in sorted(self.owned)]
        self.replayed_batches = sum(batches for _, batches in loads)
        log.info("group coordinator loaded %d groups from %d snapshots and %d batches in %.2fs",
                 len(self.groups), sum(s for s, _ in loads), self.replayed_batches,
                 time.monotonic() - started)  # fmt: skip

    async def _load_partition(self, index: int) -> tuple[bool, int]:
        """Replays one partition and marks it loaded; returns whether a snapshot was used and
        the batches replayed after it.
        Transactional offsets wait for their marker, which is in the same partition."""
        started = time.monotonic()
        pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        partition = self._partition_at(index)
        image = PartitionImage()
        visit = functools.partial(self._replay_batch, pending)
        loaded = await restore(partition, visit, image, now_ms())
        if self.broker.cluster is None:  # (snapshots are a single node's, for now)
            self.broker.snapshots.follow(partition, image, loaded.snapshot_offset)
        for producer_id, records in pending.items():  # transactions still open
            for key, value in records:
                decoded = decode_key(key)
                if isinstance(decoded, tuple) and value is not None:
                    group, topic, p = decoded
                    self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(group, {})[
                        (topic, p)
                    ] = decode_offset_value(value)
        self.loaded_partitions.add(index)
        restored = [g for g in self.groups.values() if self.offsets_partition(g.group_id) == index]
        for each in restored:  # restored members get a session to come back
            for member in each.members.values():
                self._touch(each, member)
            self.consumer.loaded(each)
        self.broker.metrics.coordinator_loaded("group", time.monotonic() - started)
        log.log(logging.INFO if self.broker.cluster else logging.DEBUG,
                "%s-%d loaded in epoch %d: %d groups from %s and %d batches in %.2fs",
                CONSUMER_OFFSETS_TOPIC, index, self.owned.get(index, -1), len(restored),
                "a snapshot" if loaded.snapshot_offset >= 0 else "no snapshot", loaded.replayed,
                time.monotonic() - started)  # fmt: skip
        return loaded.snapshot_offset >= 0, loaded.replayed

    def _replay_batch(
        self,
        pending: dict[int, list[tuple[bytes, bytes | None]]],
        header: BatchHeader,
        data: bytes,
    ) -> None:
        """One batch of the replay; `pending` holds open transactions' offsets by producer."""
        if header.is_control:
            records = pending.pop(header.producer_id, [])
            if control_type(data) == CONTROL_COMMIT:
                for key, value in records:
                    self._replay(key, value)
            return
        for _offset, _ts, record_key, value in iter_records(data):
            if record_key is None:
                continue
            if header.is_transactional:
                pending.setdefault(header.producer_id, []).append((record_key, value))
            else:
                self._replay(record_key, value)

    def _replay(self, key: bytes, value: bytes | None) -> None:
        try:
            if consumer_records.key_version(key) in consumer_records.CONSUMER_KEY_VERSIONS:
                group_id = consumer_records.decode(key, None, {}).group_id
                self.consumer.replay(self.groups.setdefault(group_id, Group(group_id)), key, value)
                return
            decoded = decode_key(key)
            if isinstance(decoded, tuple):
                group_id, topic, partition = decoded
                group = self.groups.setdefault(group_id, Group(group_id))
                if value is None:
                    group.offsets.pop((topic, partition), None)
                else:
                    group.offsets[(topic, partition)] = decode_offset_value(value)
                return
            if value is None:
                self.groups.pop(decoded, None)
                return
            self._restore_group(decoded, decode_group_value(value))
        except (ValueError, UnicodeDecodeError, IndexError) as exc:
            log.error("skipping a damaged %s record: %s", CONSUMER_OFFSETS_TOPIC, exc)

    def _restore_group(self, group_id: str, record: GroupRecord) -> None:
        group = self.groups.setdefault(group_id, Group(group_id))
        group.protocol_type = record.protocol_type
        group.generation = record.generation
        group.protocol = record.protocol
        group.leader = record.leader
        group.members = {}
        group.static_members = {}
        now = time.monotonic()
        for m in record.members:
            member = Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                record.protocol_type,
                [(record.protocol or "", m.subscription)],
                m.assignment,
                now,
            )
            group.members[m.member_id] = member
            if m.group_instance_id:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        group.state_timestamp = record.state_timestamp

    def _group_record(self, group: Group) -> GroupRecord:
        return GroupRecord(
            group.protocol_type,
            group.generation,
            group.protocol,
            group.leader,
            now_ms(),
            tuple(
                MemberRecord(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata_for(group.protocol),
                    m.assignment,
                )
                for m in group.members.values()
            ),
        )

    def _persist_group(self, group: Group) -> asyncio.Future[None]:
        record = self._group_record(group)
        group.state_timestamp = record.state_timestamp  # when the group entered this state
        return self._append(group.group_id, [(group_key(group.group_id), group_value(record))])

    # -- membership ------------------------------------------------------------------------------

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
        def error(code: ErrorCode, member: str = member_id) -> Answer:
            return {"error_code": code, "member_id": member}

        if gate := self.gate(group_id):
            return error(gate)
        if not group_id:
            return error(ErrorCode.invalid_group_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            return error(ErrorCode.invalid_session_timeout)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return error(ErrorCode.unknown_member_id)
            group = self.groups[group_id] = Group(group_id)
        if group.consumer is not None:
            if group.consumer.members:
                # a classic member in a consumer-protocol group (Kafka 4's mixed groups): the
                # server-side assignor assigns it
                return await self.consumer.classic_join(
                    group, member_id, group_instance_id, protocol_type, protocols,
                    session_timeout_ms, rebalance_timeout_ms, client_id, client_host,
                    require_known_member_id,
                )  # fmt: skip
            await self._drop_consumer_protocol(group)
        if not group.supports(protocol_type, protocols):
            return error(ErrorCode.inconsistent_group_protocol)
        named = bool(member_id)
        rejoined_static = False
        previous_leader = group.leader
        if not member_id:
            member_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
            if group_instance_id is None and require_known_member_id:
                group.pending_members.add(member_id)
                return error(ErrorCode.member_id_required, member_id)
            if group_instance_id is not None:
                rejoined_static = self._replace_static_member(group, group_instance_id, member_id)
        elif member_id not in group.pending_members and (
            code := group.check_member(member_id, group_instance_id, None)
        ):
            # as Kafka: FENCED_INSTANCE_ID before the unknown-member check, so a replaced
            # incarnation stops instead of rejoining without an id and fencing its replacement
            # in turn; an instance id the group does not know is UNKNOWN_MEMBER_ID
            return error(code)
        group.pending_members.discard(member_id)
        member = group.members.get(member_id)
        if (
            named
            and member is not None
            and member.protocols == protocols
            and (
                group.state == GroupState.COMPLETING_REBALANCE
                or (group.state == GroupState.STABLE and member_id != group.leader)
            )
        ):
            # As Kafka: a member rejoining with unchanged metadata (it may have lost the answer
            # to its JoinGroup) gets the current generation again instead of starting another
            # rebalance; only the leader's rejoin in Stable starts one (it may have seen new
            # topic metadata). Without this, a client that resends JoinGroup after each
            # completed join (kafka-python does when its poll times out mid-join) rebalances
            # the group for ever.
            self._touch(group, member)
            return self._join_answer(group, member)
        if member is None:
            if not group.members:
                # the first member of an empty group sets its protocol type (as Kafka): the
                # type of an earlier generation must not refuse the newcomers
                group.protocol_type = protocol_type
            member = group.members[member_id] = Member(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
            )
            if group_instance_id is not None:
                group.static_members[group_instance_id] = member_id
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        self._touch(group, member)
        if rejoined_static and group.state == GroupState.STABLE:
            answer = await self._static_rejoin(group, member, previous_leader)
            if answer is not None:
                return answer
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(error(ErrorCode.unknown_member_id))
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        member.join_waiter = waiter
        if not group.protocol_type:
            group.protocol_type = protocol_type
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"{member_id} joined")
        else:
            self._maybe_complete_join(group)
        return await waiter

    async def _drop_consumer_protocol(self, group: Group) -> None:
        """An empty consumer-protocol group becomes a classic one (as Kafka): its records
        are deleted, its offsets stay."""
        tombstones = self._consumer_tombstones(group)
        group.consumer = None
        group.protocol_type = ""
        try:
            await self._append(group.group_id, tombstones)
        except writes.WriteFailure as exc:
            log.error("group %s: could not delete its consumer protocol records: %s",
                      group.group_id, exc)  # fmt: skip

    async def _static_rejoin(
        self, group: Group, member: Member, previous_leader: str | None
    ) -> Answer | None:
        """KIP-345, as Kafka: a static member that restarted and rejoins a Stable group keeps
        its assignment and nobody rebalances, unless its protocols change the group's
        selected protocol (then None: the caller rebalances). The answer names the leader
        from before the rejoin, so a rejoining leader does not compute assignments that a
        stable group would never hand out."""
        if group.select_protocol() != group.protocol:
            return None
        try:
            await self._persist_group(group)  # the new member id must survive a restart
        except writes.WriteFailure as exc:
            log.error("group %s: could not persist static member %s: %s", group.group_id,
                      member.member_id, exc)  # fmt: skip
        log.info(
            "group %s: static member %s rejoined as %s and keeps its assignment (no rebalance)",
            group.group_id,
            member.group_instance_id,
            member.member_id,
        )
        return {**self._join_answer(group, member), "leader": previous_leader, "members": []}

    def _replace_static_member(self, group: Group, instance_id: str, new_member_id: str) -> bool:
        """A static member that restarts takes its place back and fences its old incarnation.
        True if it had a place to take back."""
        old_id = group.static_members.get(instance_id)
        old = group.members.pop(old_id, None) if old_id else None
        if old is None:
            return False
        for waiter in (old.join_waiter, old.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result(
                    {"error_code": ErrorCode.fenced_instance_id, "member_id": old.member_id}
                )
        old.member_id = new_member_id
        old.join_waiter = old.sync_waiter = None
        group.members[new_member_id] = old
        group.static_members[instance_id] = new_member_id
        if group.leader == old_id:
            group.leader = new_member_id
        return True

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        initial = group.state == GroupState.EMPTY
        for member in group.members.values():
            if member.sync_waiter is not None and not member.sync_waiter.done():
                member.sync_waiter.set_result({"error_code": ErrorCode.rebalance_in_progress})
            member.sync_waiter = None
        group.transition(GroupState.PREPARING_REBALANCE)
        log.info(
            "group %s rebalancing (generation %d): %s", group.group_id, group.generation, reason
        )
        delay = self.initial_delay_ms if initial else group.max_rebalance_timeout_ms
        group.rebalance_deadline = time.monotonic() + delay / 1000
        group.rebalance_initial = initial
        # A running timer task may be inside _complete_join, awaiting the previous generation's
        # write: it notices the new rebalance afterwards and runs it too.
        if group.rebalance_task is None or group.rebalance_task.done():
            group.rebalance_task = asyncio.get_running_loop().create_task(
                self._rebalance_timer(group)
            )

    async def _rebalance_timer(self, group: Group) -> None:
        """Completes the join when everyone has rejoined (after the initial delay for a new
        group, which new joiners extend up to the rebalance timeout), or at the deadline;
        again if another rebalance began while the generation was being written."""
        while group.state == GroupState.PREPARING_REBALANCE:
            initial = group.rebalance_initial
            hard_deadline = (
                time.monotonic() + max(group.max_rebalance_timeout_ms, self.initial_delay_ms) / 1000
            )
            while group.state == GroupState.PREPARING_REBALANCE:
                remaining = group.rebalance_deadline - time.monotonic()
                if remaining <= 0 or (not initial and group.all_joined()):
                    break
                if initial and group.all_joined() and remaining > 0:
                    await asyncio.sleep(min(remaining, 0.05))
                    if time.monotonic() >= min(group.rebalance_deadline, hard_deadline):
                        break
                    continue
                await asyncio.sleep(min(remaining, 0.05))
            if group.state == GroupState.PREPARING_REBALANCE:
                await self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if self.initial_delay_ms and group.generation == 0:
            # a new joiner during the initial delay extends it (bounded by the timer)
            group.rebalance_deadline = max(
                group.rebalance_deadline, time.monotonic() + self.initial_delay_ms / 1000
            )

    async def _complete_join(self, group: Group) -> None:
        for member_id in [m for m, member in group.members.items() if member.join_waiter is None]:
            log.info(
                "group %s: %s did not rejoin in time and is removed", group.group_id, member_id
            )
            self._remove_member(group, member_id)
        group.generation += 1
        if not group.members:
            group.transition(GroupState.EMPTY)
            group.protocol = None
            group.leader = None
            try:
                await self._persist_group(group)
            except writes.WriteFailure as exc:
                log.error("group %s: could not persist it empty: %s", group.group_id, exc)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE)
        generation = group.generation
        durable = self._persist_group(group)
        try:
            await durable
        except writes.WriteFailure as exc:
            log.error(
                "group %s: could not persist generation %d: %s",
                group.group_id,
                group.generation,
                exc,
            )
        if group.state != GroupState.COMPLETING_REBALANCE or group.generation != generation:
            # A member joined or left during the write and a new rebalance began: the waiting
            # members count as rejoined and get the next generation instead of this one.
            return
        for member in group.members.values():
            waiter, member.join_waiter = member.join_waiter, None
            self._touch(group, member)
            if waiter is None or waiter.done():
                continue
            waiter.set_result(self._join_answer(group, member))
        log.info(
            "group %s generation %d: %d members, protocol %s, leader %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol,
            group.leader,
        )

    def _join_answer(self, group: Group, member: Member) -> Answer:
        """The JoinGroup answer of the current generation; the leader gets every member."""
        everyone = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata_for(group.protocol),
            }
            for m in group.members.values()
        ]
        return {
            "error_code": 0,
            "generation_id": group.generation,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol,
            "leader": group.leader,
            "member_id": member.member_id,
            "skip_assignment": False,
            "members": everyone if member.member_id == group.leader else [],
        }

    def _remove_member(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        if member.expiry is not None:
            member.expiry.cancel()
            member.expiry = None
        if (
            member.group_instance_id
            and group.static_members.get(member.group_instance_id) == member_id
        ):
            del group.static_members[member.group_instance_id]
        for waiter in (member.join_waiter, member.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result(
                    {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}
                )

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
        if gate := self.gate(group_id):
            return {"error_code": gate}
        if group is None:
            return {"error_code": ErrorCode.unknown_member_id}
        if group.consumer is not None:
            return self.consumer.classic_sync(
                group, generation, member_id, group_instance_id, protocol_type, protocol_name
            )
        error = group.check_member(member_id, group_instance_id, generation)
        if error:
            return {"error_code": error}
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol
        ):
            return {"error_code": ErrorCode.inconsistent_group_protocol}
        member = group.members[member_id]
        self._touch(group, member)
        answer = {
            "error_code": 0,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol,
        }
        if group.state == GroupState.PREPARING_REBALANCE:
            return {"error_code": ErrorCode.rebalance_in_progress}
        if group.state == GroupState.STABLE:
            return {**answer, "assignment": member.assignment}
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.transition(GroupState.STABLE)
            try:
                await self._persist_group(group)
            except writes.WriteFailure as exc:
                log.error("group %s: could not persist assignments: %s", group_id, exc)
            for m in group.members.values():
                pending, m.sync_waiter = m.sync_waiter, None
                if pending is not None and not pending.done():
                    pending.set_result({**answer, "assignment": m.assignment})
        return await waiter

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        if gate := self.gate(group_id):
            return gate
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.consumer is not None:
            return self.consumer.classic_heartbeat(group, generation, member_id, group_instance_id)
        error = group.check_member(member_id, group_instance_id, generation)
        if error:
            return error
        self._touch(group, group.members[member_id])
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[Answer]]:
        group = self.groups.get(group_id)
        if gate := self.gate(group_id):
            return gate, []
        if group is None:
            return ErrorCode.unknown_member_id, []
        if group.consumer is not None:
            return ErrorCode.none, self.consumer.classic_leave(group, members)
        answers = []
        left = 0
        for member_id, instance_id in members:
            # as Kafka 4.4: without a member id, the static member of the instance id leaves
            # (an administrator's removal); a member id still pending (told
            # MEMBER_ID_REQUIRED) just goes; any other is checked as Heartbeat checks it. The
            # answer echoes the member id of the request; every departure rebalances.
            leaving: str | None = None
            if not member_id:
                if instance_id is not None:
                    leaving = group.static_members.get(instance_id)
                code = ErrorCode.none if leaving is not None else ErrorCode.unknown_member_id
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                code = ErrorCode.none
            else:
                code = group.check_member(member_id, instance_id, None)
                leaving = member_id
            answers.append(
                {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
            )
            if code:
                continue
            if leaving is not None:
                self._remove_member(group, leaving)
            left += 1
        if left:
            self._after_departure(group, f"{left} member(s) left")
        return ErrorCode.none, answers

    def _after_departure(self, group: Group, reason: str) -> None:
        if group.state == GroupState.PREPARING_REBALANCE:
            return  # the running timer completes the join with whoever rejoined
        if not group.members and group.state != GroupState.EMPTY:
            self._prepare_rebalance(group, reason)
            return
        if group.members:
            self._prepare_rebalance(group, reason)

    def _touch(self, group: Group, member: Member) -> None:
        """A sign of life: the member's session restarts. One timer per member (as Kafka's
        heartbeat purgatory), so an expiry happens at its deadline, not at the next sweep."""
        member.last_heartbeat = time.monotonic()
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._session_timer, group, member
        )

    def _session_timer(self, group: Group, member: Member) -> None:
        member.expiry = None
        if self.groups.get(group.group_id) is not group:
            return
        if group.members.get(member.member_id) is not member:
            return
        if member.join_waiter is not None or member.sync_waiter is not None:
            # waiting in a join or sync is being alive; the rebalance timeout bounds that
            member.expiry = asyncio.get_running_loop().call_later(
                member.session_timeout_ms / 1000, self._session_timer, group, member
            )
            return
        late_ms = (time.monotonic() - member.last_heartbeat) * 1000 - member.session_timeout_ms
        log.info(
            "group %s: session of %s expired (%d ms after its %d ms timeout)",
            group.group_id,
            member.member_id,
            round(late_ms),
            member.session_timeout_ms,
        )
        self.sessions_expired += 1
        self.expiry_lateness_ms = max(self.expiry_lateness_ms, late_ms)
        self._remove_member(group, member.member_id)
        self._after_departure(group, f"session of {member.member_id} expired")

    # -- offsets ---------------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, CommittedOffset],
        api_version: int = 10,
    ) -> dict[TopicPartition, ErrorCode]:
        def all_(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        if gate := self.gate(group_id):
            return all_(gate)
        if not group_id:
            return all_(ErrorCode.invalid_group_id)
        group = self.groups.get(group_id)
        results = self._check_offsets(offsets)
        if group is None:
            if generation >= 0:
                # as Kafka 4.4: the group is gone (expired, deleted) or never was, so the
                # committer's generation or member epoch is of no group: GROUP_ID_NOT_FOUND
                # from v9 (a KIP-848 consumer whose group expired rejoins), ILLEGAL_GENERATION
                # before (what older clients know)
                gone = ErrorCode.group_id_not_found if api_version >= 9 else None
                return all_(gone or ErrorCode.illegal_generation)
            # generation -1 (the admin client, a consumer without group management, whatever
            # member id it names): a group without members is created for the offsets
            group = self.groups[group_id] = Group(group_id)
        if group.consumer is not None:
            # KIP-848: the member epoch instead of the generation (KIP-1251: an older one for
            # partitions the member already had then); -1 only for an empty group
            code = validate_offset_commit(
                group.consumer, member_id, group_instance_id, generation,
                (tp for tp, error in results.items() if not error),
                transactional=False, api_version=api_version,
            )  # fmt: skip
            if code:
                return all_(code)
        else:
            error = group.check_offset_commit(
                member_id, group_instance_id, generation, transactional=False
            )
            if error:
                return all_(error)
            if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
                # as Kafka 4.4, a member's commit is a sign of life: its session restarts
                member = group.members.get(member_id)
                if member is not None:
                    self._touch(group, member)
        accepted = {tp: o for tp, o in offsets.items() if not results[tp]}
        if accepted:
            try:
                await self._append(
                    group_id,
                    [(offset_key(group_id, *tp), offset_value(o)) for tp, o in accepted.items()],
                )
            except writes.WriteFailure as exc:
                return all_(writes.write_error(exc, ErrorCode.kafka_storage_error))
            group.offsets.update(accepted)
        return results

    def _check_offsets(
        self, offsets: dict[TopicPartition, CommittedOffset]
    ) -> dict[TopicPartition, ErrorCode]:
        results = {}
        for tp, committed in offsets.items():
            if not self.broker.topics.exists(*tp):
                results[tp] = ErrorCode.unknown_topic_or_partition
            elif len(committed.metadata.encode()) > self.max_metadata_bytes:
                results[tp] = ErrorCode.offset_metadata_too_large
            else:
                results[tp] = ErrorCode.none
        return results

    def fetch(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        require_stable: bool,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, dict[TopicPartition, tuple[CommittedOffset | None, ErrorCode]]]:
        """`member_id`/`member_epoch` (OffsetFetch v9+) are checked in a consumer-protocol
        group: UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH (ILLEGAL_GENERATION for a classic member);
        none (null member id, epoch -1) is the admin."""
        if gate := self.gate(group_id):
            return gate, {}
        group = self.groups.get(group_id)
        if group is not None and group.consumer is not None:
            code = validate_offset_fetch(group.consumer, member_id, member_epoch)
            if code:
                return code, {}
        committed = group.offsets if group else {}
        wanted = list(committed) if partitions is None else partitions
        unstable = set()
        if require_stable:
            for by_group in self.pending_txn_offsets.values():
                unstable |= set(by_group.get(group_id, {}))
        answers: dict[TopicPartition, tuple[CommittedOffset | None, ErrorCode]] = {}
        for tp in wanted:
            error = ErrorCode.unstable_offset_commit if tp in unstable else ErrorCode.none
            answers[tp] = (committed.get(tp), error)
        return ErrorCode.none, answers

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
        """Transactional offsets (the transaction checks are the caller's): KIP-447 fencing
        when the request names a generation, member or instance; then a transactional batch
        of the producer in the offsets partition; visible once its commit marker lands.
        Before fencing, Kafka 4.4's rules for a group that does not exist: a generation >= 0
        is ILLEGAL_GENERATION (GROUP_ID_NOT_FOUND from v6, which lockgate does not serve);
        generation -1 creates it (empty) and, as into any empty group, is accepted whatever
        member or instance id it names (Group.check_offset_commit)."""
        if gate := self.gate(group_id):
            return dict.fromkeys(offsets, gate)
        group = self.groups.get(group_id)
        results = self._check_offsets(offsets)
        if group is not None and group.consumer is not None:
            # KIP-447 with the consumer protocol: the generation is the member epoch, checked as
            # in OffsetCommit (KIP-1251 included); a stale one is ILLEGAL_GENERATION, as Kafka
            # answers TxnOffsetCommit before v6 (which has no STALE_MEMBER_EPOCH)
            error = validate_offset_commit(
                group.consumer, member_id, group_instance_id, generation,
                (tp for tp, code in results.items() if not code),
                transactional=True, api_version=0,
            )  # fmt: skip
            if error == ErrorCode.stale_member_epoch:
                error = ErrorCode.illegal_generation
            if error:
                return dict.fromkeys(offsets, error)
        elif group is None:
            if generation >= 0:
                return dict.fromkeys(offsets, ErrorCode.illegal_generation)
            group = self.groups[group_id] = Group(group_id)
        else:
            error = group.check_offset_commit(
                member_id, group_instance_id, generation, transactional=True
            )
            if error:
                return dict.fromkeys(offsets, error)
        accepted = {tp: o for tp, o in offsets.items() if not results[tp]}
        if accepted:
            records: list[tuple[bytes, bytes | None]] = [
                (offset_key(group_id, *tp), offset_value(o)) for tp, o in accepted.items()
            ]
            durable = self._append(group_id, records, (producer_id, producer_epoch))
            self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(group_id, {}).update(
                accepted
            )
            try:
                await durable
            except writes.WriteFailure as exc:
                return dict.fromkeys(
                    offsets, writes.write_error(exc, ErrorCode.kafka_storage_error)
                )
        return results

    def _on_marker(self, partition_index: int) -> Any:
        def apply(producer_id: int, commit: bool) -> None:
            if partition_index not in self.loaded_partitions:
                return  # the partition's replay reads this marker itself
            by_group = self.pending_txn_offsets.get(producer_id)
            if not by_group:
                return
            for group_id in [g for g in by_group if self.offsets_partition(g) == partition_index]:
                offsets = by_group.pop(group_id)
                if commit:
                    self.groups.setdefault(group_id, Group(group_id)).offsets.update(offsets)
            if not by_group:
                del self.pending_txn_offsets[producer_id]

        return apply

    # -- offsets retention (KIP-211) ----------------------------------------------------------

    def expire_offsets(self, now: int) -> int:
        """Expires committed offsets older than offsets.retention.ms, as Kafka: every offset of
        an Empty group once the group has been Empty that long (by commit time for a group that
        never had members), only unsubscribed topics' offsets of a group with consumer
        members (by commit time); pending transactional offsets never. A group left with no
        offsets and no members is deleted. Memory and the log change together (the tombstones
        are appended before anything else can be), their durability is awaited by nobody."""
        expired = 0
        for group_id in list(self.groups):
            group = self.groups[group_id]
            if self.gate(group_id):
                continue
            doomed = self._expired_offsets(group, now)
            drop_group = (
                not group.has_members
                and group.state == GroupState.EMPTY
                and (len(doomed) == len(group.offsets))
            )
            if not doomed and not (drop_group and group.generation):
                continue
            records: list[tuple[bytes, bytes | None]] = [
                (offset_key(group_id, *tp), None) for tp in doomed
            ]
            if drop_group:
                records.append((group_key(group_id), None))
                records += self._consumer_tombstones(group)
            try:
                durable = self._append(group_id, records)
            except writes.WriteFailure as exc:
                log.error("group %s: could not expire offsets: %s", group_id, exc)
                continue
            durable.add_done_callback(_retrieve)
            for tp in doomed:
                group.offsets.pop(tp, None)
            if drop_group:
                del self.groups[group_id]
            expired += len(doomed)
            log.info(
                "group %s: %d offsets expired (offsets.retention.ms)%s",
                group_id,
                len(doomed),
                "; group removed" if drop_group else "",
            )
        return expired

    def _expired_offsets(self, group: Group, now: int) -> list[TopicPartition]:
        deadline = now - self.offsets_retention_ms
        if group.state == GroupState.EMPTY and not group.has_members:
            base = group.state_timestamp if group.generation else -1
            return [
                tp
                for tp, committed in group.offsets.items()
                if (base if base >= 0 else committed.commit_timestamp) <= deadline
            ]
        if group.protocol_type != "consumer":
            return []  # other protocols' members may still need every offset (as Kafka)
        subscribed = self._subscribed_topics(group)
        return [
            tp
            for tp, committed in group.offsets.items()
            if tp[0] not in subscribed and committed.commit_timestamp <= deadline
        ]

    def _subscribed_topics(self, group: Group) -> set[str]:
        """Topics the members subscribe to (classic consumer or consumer-protocol members)."""
        subscribed: set[str] = set()
        for member in group.members.values():
            subscribed |= subscribed_topics(member.metadata_for(group.protocol))
        if group.consumer is not None:
            counts = self.consumer.topic_counts()
            for consumer_member in group.consumer.members.values():
                subscribed |= consumer_member.subscribed(counts)
        return subscribed

    def _consumer_tombstones(self, group: Group) -> list[tuple[bytes, bytes | None]]:
        """Deletes an empty consumer-protocol group's records (none for a classic group)."""
        if group.consumer is None:
            return []
        return [
            consumer_records.encode(ConsumerRecord(kind, group.group_id, None, None), {})
            for kind in (RecordKind.TARGET_EPOCH, RecordKind.PARTITION_METADATA,
                         RecordKind.GROUP_EPOCH)
        ]  # fmt: skip

    # -- administration -------------------------------------------------------------------------

    async def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if gate := self.gate(group_id):
            return gate
        if group is None:
            return ErrorCode.group_id_not_found
        if group.has_members:
            return ErrorCode.non_empty_group
        records: list[tuple[bytes, bytes | None]] = [
            (offset_key(group_id, *tp), None) for tp in group.offsets
        ]
        records.append((group_key(group_id), None))
        records += self._consumer_tombstones(group)
        del self.groups[group_id]
        try:
            await self._append(group_id, records)
        except writes.WriteFailure as exc:
            return writes.write_error(exc, ErrorCode.kafka_storage_error)
        return ErrorCode.none

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        group = self.groups.get(group_id)
        if gate := self.gate(group_id):
            return gate, {}
        if group is None:
            return ErrorCode.group_id_not_found, {}
        subscribed = self._subscribed_topics(group) if group.protocol_type == "consumer" else set()
        results = {
            tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none
            for tp in partitions
        }
        doomed = [tp for tp, error in results.items() if not error and tp in group.offsets]
        if doomed:
            try:
                await self._append(group_id, [(offset_key(group_id, *tp), None) for tp in doomed])
            except writes.WriteFailure as exc:
                return writes.write_error(exc, ErrorCode.kafka_storage_error), {}
            for tp in doomed:
                group.offsets.pop(tp, None)
        return ErrorCode.none, results
