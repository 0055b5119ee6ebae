# Committed offsets of the groups coordinated here: OffsetCommit and OffsetFetch (with the
# membership checks of classic and consumer-protocol groups), transactional offsets (KIP-447)
# that become visible only when their transaction's commit marker reaches the offsets
# partition, DeleteGroups and OffsetDelete, offsets retention (KIP-211) and the offsets of
# deleted topics. Every change is appended to __consumer_offsets in Kafka's record layout
# (records.py); the coordinator (service.py) owns the partitions, their loading and the
# availability answer.
#
# Invariants: memory and the log change together: the records are appended (synchronously)
# before the change is visible, and a commit is answered only once they are durable. An offset
# tombstone (OffsetDelete, DeleteGroups, a deleted topic) deletes the partition's pending
# transactional offsets too, as the replay of the log does (Kafka's rule: a transaction that
# commits later brings no offset back); expiry passes over a partition with pending offsets.
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from lockgate.coordinator import writes
from lockgate.coordinator.group import consumer_records
from lockgate.coordinator.group.committed import partition_of
from lockgate.coordinator.group.consumer_group import (
    ConsumerRecord,
    RecordKind,
    validate_offset_commit,
    validate_offset_fetch,
)
from lockgate.coordinator.group.group import Group, Member, TopicPartition
from lockgate.coordinator.group.records import (
    CommittedOffset,
    commit_timestamp,
    decode_offset_value,
    group_key,
    offset_key,
    offset_value,
    subscribed_topics,
)
from lockgate.coordinator.group.state import GroupState
from lockgate.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Records = list[tuple[bytes, bytes | None]]
# producer id → group → offsets written in its open transaction (as record values: Group.offsets)
PendingOffsets = dict[int, dict[str, dict[TopicPartition, bytes]]]


class _Append(Protocol):
    def __call__(
        self, group_id: str, records: Records, producer: tuple[int, int] | None = None
    ) -> asyncio.Future[None]:
        """Appends to the group's offsets partition (transactional: `producer` (id, epoch));
        the future of the records' durability."""


def topic_offset_keys(held: Iterable[bytes], group_id: str, topic: str) -> list[bytes]:
    """The keys of a group's offset records (committed.py's, lockgate's form) that are of
    `topic`: those beginning as its partition 0's key does, less the partition (the names are
    length-prefixed: no other topic's key begins so)."""
    prefix = offset_key(group_id, topic, 0)[:-4]
    return [key for key in held if key.startswith(prefix)]


def _log_failure(what: str) -> Callable[[asyncio.Future[None]], None]:
    """Tombstones nobody waits for whose failure is worth a line (Kafka logs it too, and
    does not try again)."""

    def check(durable: asyncio.Future[None]) -> None:
        if not durable.cancelled() and (exc := durable.exception()) is not None:
            log.error("%s: the tombstones were not written: %s", what, exc)

    return check


def _retrieve(durable: asyncio.Future[None]) -> None:
    """Expiry tombstones nobody waits for: a failed write is logged by the group commit and
    the next start replays the offsets again, to expire them again."""
    if not durable.cancelled():
        durable.exception()


class Offsets:
    def __init__(
        self,
        groups: dict[str, Group],
        unavailable: Callable[[str], ErrorCode],
        append: _Append,
        topic_exists: Callable[[str, int], bool],
        topic_counts: Callable[[], dict[str, int]],
        touch: Callable[[Group, Member], None],
        *,
        max_metadata_bytes: int,
        retention_ms: int,
    ) -> None:
        self.groups = groups  # the coordinator's groups (offsets live in each Group)
        # NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a group, or none
        self._unavailable = unavailable
        self._append = append
        self._topic_exists = topic_exists
        self._topic_counts = topic_counts  # (consumer-protocol members' subscriptions)
        self._touch = touch  # a classic member's sign of life
        self.max_metadata_bytes = max_metadata_bytes
        self.retention_ms = retention_ms
        self.pending: PendingOffsets = {}

    # -- OffsetCommit, OffsetFetch ---------------------------------------------------------------

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

        if unavailable := self._unavailable(group_id):
            return all_(unavailable)
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
        if group.share is not None:  # (a share group has no committed offsets)
            return all_(ErrorCode.group_id_not_found)
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
        accepted = [
            (offset_key(group_id, *tp), offset_value(o))
            for tp, o in offsets.items()
            if not results[tp]
        ]
        if accepted:
            try:
                await self._append(group_id, list(accepted))  # (as Records: values may be None)
            except writes.WriteFailure as exc:
                return all_(writes.write_error(exc, ErrorCode.kafka_storage_error))
            group.offsets.records.update(accepted)  # (held as the records: committed.py)
        return results

    def _check_offsets(
        self, offsets: dict[TopicPartition, CommittedOffset]
    ) -> dict[TopicPartition, ErrorCode]:
        results = {}
        for tp, committed in offsets.items():
            if not self._topic_exists(*tp):
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
        if unavailable := self._unavailable(group_id):
            return unavailable, {}
        group = self.groups.get(group_id)
        if group is not None and group.share is not None:
            return ErrorCode.group_id_not_found, {}
        if group is not None and group.consumer is not None:
            code = validate_offset_fetch(group.consumer, member_id, member_epoch)
            if code:
                return code, {}
        committed = group.offsets if group else {}
        wanted = list(committed) if partitions is None else partitions
        unstable = set()
        if require_stable:
            for by_group in self.pending.values():
                unstable |= set(by_group.get(group_id, {}))
        answers: dict[TopicPartition, tuple[CommittedOffset | None, ErrorCode]] = {}
        for tp in wanted:
            error = ErrorCode.unstable_offset_commit if tp in unstable else ErrorCode.none
            raw = committed.get(tp)
            answers[tp] = (None if raw is None else decode_offset_value(raw), error)
        return ErrorCode.none, answers

    # -- transactional offsets (KIP-447) ---------------------------------------------------------

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
        if unavailable := self._unavailable(group_id):
            return dict.fromkeys(offsets, unavailable)
        group = self.groups.get(group_id)
        results = self._check_offsets(offsets)
        if group is not None and group.share is not None:
            return dict.fromkeys(offsets, ErrorCode.group_id_not_found)
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
        accepted = {tp: offset_value(o) for tp, o in offsets.items() if not results[tp]}
        if accepted:
            records: Records = [(offset_key(group_id, *tp), raw) for tp, raw in accepted.items()]
            durable = self._append(group_id, records, (producer_id, producer_epoch))
            self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(accepted)
            try:
                await durable
            except writes.WriteFailure as exc:
                return dict.fromkeys(
                    offsets, writes.write_error(exc, ErrorCode.kafka_storage_error)
                )
        return results

    def transaction_ended(
        self, groups_here: Callable[[str], bool], producer_id: int, commit: bool
    ) -> None:
        """A transaction marker reached an offsets partition: the producer's pending offsets of
        the groups there (`groups_here`) become visible (commit) or are dropped (abort)."""
        by_group = self.pending.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if groups_here(g)]:
            offsets = by_group.pop(group_id)
            if commit:
                self.groups.setdefault(group_id, Group(group_id)).offsets.update(offsets)
        if not by_group:
            del self.pending[producer_id]

    def forget(self, groups_here: Callable[[str], bool]) -> None:
        """An offsets partition is unloaded: its groups' pending offsets go with it."""
        for by_group in self.pending.values():
            for group_id in [g for g in by_group if groups_here(g)]:
                del by_group[group_id]

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions the group has pending transactional offsets of (any producer)."""
        found: set[TopicPartition] = set()
        for by_group in self.pending.values():
            found.update(by_group.get(group_id, ()))
        return found

    def _drop_pending(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Offset tombstones of these partitions were appended: the group's pending
        transactional offsets of them go (the replay of the log drops them so)."""
        doomed = set(partitions)
        for producer_id in list(self.pending):
            by_group = self.pending[producer_id]
            held = by_group.get(group_id)
            if held is None:
                continue
            for tp in doomed.intersection(held):
                del held[tp]
            if not held:
                del by_group[group_id]
            if not by_group:
                del self.pending[producer_id]

    # -- deleted topics --------------------------------------------------------------------------

    def topic_deleted(self, topic: str) -> int:
        """Kafka's onTopicsDeleted for one topic: a tombstone of every offset of it that a
        group coordinated here holds, committed or pending in a transaction (lockgate's offset
        records carry no topic id: every one of the name is the deleted topic's, as Kafka
        takes a record of no topic id). Groups whose partition is not served here are passed
        over: their coordinator does it. Memory and the log change together; nobody awaits
        the durability (a failure is logged). How many partitions' offsets were deleted."""
        pending: dict[str, set[TopicPartition]] = {}
        for by_group in self.pending.values():
            for group_id, held in by_group.items():
                of_topic = [tp for tp in held if tp[0] == topic]
                if of_topic:
                    pending.setdefault(group_id, set()).update(of_topic)
        deleted = 0
        for group_id in [*self.groups, *(g for g in pending if g not in self.groups)]:
            group = self.groups.get(group_id)
            keys = topic_offset_keys(group.offsets.records, group_id, topic) if group else []
            in_transactions = pending.get(group_id, set())
            keys += [
                key
                for key in sorted(offset_key(group_id, *tp) for tp in in_transactions)
                if group is None or key not in group.offsets.records
            ]
            if not keys or self._unavailable(group_id):
                continue
            try:
                durable = self._append(group_id, [(key, None) for key in keys])
            except writes.WriteFailure as exc:
                log.error("group %s: offsets of deleted topic %s not deleted: %s",
                          group_id, topic, exc)  # fmt: skip
                continue
            durable.add_done_callback(
                _log_failure(f"group {group_id}: deleting the offsets of deleted topic {topic}")
            )
            if group is not None:
                for key in keys:
                    group.offsets.records.pop(key, None)
            self._drop_pending(group_id, in_transactions)
            deleted += len(keys)
        if deleted:
            log.info("deleted topic %s: %d committed offsets deleted", topic, deleted)
        return deleted

    # -- offsets retention (KIP-211) ------------------------------------------------------------

    def expire(self, now: int) -> int:
        """Expires committed offsets older than offsets.retention.ms, as Kafka: every offset of
        an Empty group once the group has been Empty that long (by commit time for a group that
        never had members), only unsubscribed topics' offsets of a group with consumer
        members (by commit time); pending transactional offsets never. A group left with no
        offsets and no members is deleted. Memory and the log change together (the tombstones
        are appended before anything else can be), their durability is awaited by nobody."""
        expired = 0
        for group_id in list(self.groups):
            group = self.groups[group_id]
            if self._unavailable(group_id) or group.share is not None:
                continue  # (a share group has no offsets to expire)
            doomed = self._expired_offsets(group, now)
            in_transactions = self.pending_partitions(group_id)
            if in_transactions:  # (as Kafka: not while a transaction may still commit one)
                doomed = [key for key in doomed if partition_of(key) not in in_transactions]
            drop_group = (
                not group.has_members
                and group.state == GroupState.EMPTY
                and (len(doomed) == len(group.offsets))
                and not in_transactions
            )
            if not doomed and drop_group and not group.generation and group.consumer is None:
                # nothing of it is in the log (no offsets left, e.g. its topics deleted, and
                # never a generation): it goes from memory alone, as Kafka deletes it then
                del self.groups[group_id]
                continue
            if not doomed and not (drop_group and group.generation):
                continue
            records: Records = [(key, None) for key in doomed]
            if drop_group:
                records.append((group_key(group_id), None))
                records += consumer_tombstones(group)
            try:
                durable = self._append(group_id, records)
            except writes.WriteFailure as exc:
                log.error("group %s: could not expire offsets: %s", group_id, exc)
                continue
            durable.add_done_callback(_retrieve)
            for key in doomed:
                group.offsets.records.pop(key, None)
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

    def _expired_offsets(self, group: Group, now: int) -> list[bytes]:
        """The keys of the group's offset records that expire (committed.py)."""
        deadline = now - self.retention_ms
        held = group.offsets.records
        if group.state == GroupState.EMPTY and not group.has_members:
            base = group.state_timestamp if group.generation else -1
            if base >= 0:
                return list(held) if base <= deadline else []
            return [key for key, value in held.items() if commit_timestamp(value) <= deadline]
        if group.protocol_type != "consumer":
            return []  # other protocols' members may still need every offset (as Kafka)
        subscribed = self._subscribed_topics(group)
        return [
            key
            for key, value in held.items()
            if commit_timestamp(value) <= deadline and partition_of(key)[0] not in subscribed
        ]

    def _subscribed_topics(self, group: Group) -> set[str]:
        """Topics the members subscribe to (classic consumer or consumer-protocol members)."""
        subscribed: set[str] = set()
        for member in group.members.values():
            subscribed |= subscribed_topics(member.metadata_for(group.protocol))
        if group.consumer is not None:
            counts = self._topic_counts()
            for consumer_member in group.consumer.members.values():
                subscribed |= consumer_member.subscribed(counts)
        return subscribed

    # -- DeleteGroups, OffsetDelete -------------------------------------------------------------

    async def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if unavailable := self._unavailable(group_id):
            return unavailable
        if group is None:
            return ErrorCode.group_id_not_found
        if group.has_members:
            return ErrorCode.non_empty_group
        records: Records = [(key, None) for key in group.offsets.records]
        in_transactions = self.pending_partitions(group_id)
        # (as Kafka: the pending transactional offsets go too, one tombstone a partition)
        records += [
            (key, None)
            for key in sorted(offset_key(group_id, *tp) for tp in in_transactions)
            if key not in group.offsets.records
        ]
        records.append((group_key(group_id), None))
        records += consumer_tombstones(group)
        del self.groups[group_id]
        self._drop_pending(group_id, in_transactions)
        try:
            await self._append(group_id, records)
        except writes.WriteFailure as exc:
            return writes.write_error(exc, ErrorCode.kafka_storage_error)
        return ErrorCode.none

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        group = self.groups.get(group_id)
        if unavailable := self._unavailable(group_id):
            return unavailable, {}
        if group is None or group.share is not None:
            return ErrorCode.group_id_not_found, {}
        subscribed = self._subscribed_topics(group) if group.protocol_type == "consumer" else set()
        results = {
            tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none
            for tp in partitions
        }
        in_transactions = self.pending_partitions(group_id)
        # (as Kafka: a tombstone where an offset is committed or pending in a transaction)
        doomed = [
            tp
            for tp, error in results.items()
            if not error and (tp in group.offsets or tp in in_transactions)
        ]
        if doomed:
            try:
                await self._append(group_id, [(offset_key(group_id, *tp), None) for tp in doomed])
            except writes.WriteFailure as exc:
                return writes.write_error(exc, ErrorCode.kafka_storage_error), {}
            for tp in doomed:
                group.offsets.pop(tp, None)
            self._drop_pending(group_id, doomed)
        return ErrorCode.none, results


def consumer_tombstones(group: Group) -> Records:
    """Deletes an empty consumer-protocol group's records (none for a classic group)."""
    if group.consumer is None:
        return []
    return [
        consumer_records.encode(ConsumerRecord(kind, group.group_id, None, None), {})
        for kind in (RecordKind.TARGET_EPOCH, RecordKind.PARTITION_METADATA,
                     RecordKind.GROUP_EPOCH)
    ]  # fmt: skip
