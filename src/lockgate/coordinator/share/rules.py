# The share coordinator's rules, pure (Kafka's ShareCoordinatorShard, restated): the state of
# every share partition coordinated here, rebuilt only by replaying __share_group_state records
# (`ShareStates.replay`), and one function per API that takes that state, the request, the time
# and the topic's partition count and returns the answer and the records to append. Nothing
# here awaits: the service (service.py) appends the records and, once they are durable, replays
# them, so the state is always the replay of the log.
#
# Per share partition the state holds (as Kafka's shard does):
# - the latest ShareGroupOffset: snapshot epoch, state epoch, leader epoch, start offset,
#   delivery complete count, state batches, create and write timestamps;
# - the largest leader epoch and state epoch any replayed record carried (the fences: a request
#   with a smaller one is FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH);
# - how many ShareUpdates followed the last snapshot: a write at
#   share.coordinator.snapshot.update.records.per.snapshot of them writes a ShareSnapshot of
#   the merged state instead (the counter restarts when such a snapshot is replayed);
# - per state partition, the offset of each key's latest ShareSnapshot: every record below the
#   smallest of them is redundant and may be deleted (DeleteRecords), which is how
#   __share_group_state stays short without compaction.
# A ShareSnapshot key with a null value (DeleteShareGroupState, a deleted topic) forgets
# everything of the key.
from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from lockgate.coordinator.share.combiner import combine
from lockgate.coordinator.share.records import (
    NO_DELIVERY_COMPLETE_COUNT,
    SNAPSHOT,
    UPDATE,
    ShareKey,
    ShareSnapshot,
    ShareUpdate,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_snapshot,
    encode_update,
)
from lockgate.coordinator.share.results import (
    DEFAULT_EPOCH,
    UNINITIALIZED_START_OFFSET,
    ReadResult,
    StateResult,
    SummaryResult,
)
from lockgate.protocol.errors import ErrorCode

A = TypeVar("A", StateResult, ReadResult, SummaryResult)
Record = tuple[bytes, bytes | None]

NULL_TOPIC_ID = "The topic id cannot be null."
NEGATIVE_PARTITION = "The partition id cannot be a negative number."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH = "The state epoch cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
FENCED_LEADER_EPOCH = "The leader epoch in the request is older than the epoch on the broker."
FENCED_STATE_EPOCH = "The coordinator rejected the request because the state epoch did not match."
UNKNOWN_TOPIC_OR_PARTITION = "This server does not host this topic-partition."


@dataclass(frozen=True, slots=True)
class ShareState:
    """A share partition's durable state (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]
    create_timestamp: int
    write_timestamp: int

    def snapshot(self) -> ShareSnapshot:
        return ShareSnapshot(
            self.snapshot_epoch, self.state_epoch, self.leader_epoch, self.start_offset,
            self.delivery_complete_count, self.create_timestamp, self.write_timestamp,
            self.state_batches,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Outcome(Generic[A]):
    """An API's answer for one share partition and the records to append first (none: answer
    at once)."""

    answer: A
    records: tuple[Record, ...] = ()


@dataclass(slots=True)
class ShareStates:
    """The replayed state of the share partitions coordinated here."""

    updates_per_snapshot: int
    offsets: dict[ShareKey, ShareState] = field(default_factory=dict)
    leader_epochs: dict[ShareKey, int] = field(default_factory=dict)
    state_epochs: dict[ShareKey, int] = field(default_factory=dict)
    updates: dict[ShareKey, int] = field(default_factory=dict)
    # state partition → key → offset of the key's latest ShareSnapshot record
    snapshot_offsets: dict[int, dict[ShareKey, int]] = field(default_factory=dict)
    # state partition → the offset after the last record replayed
    ends: dict[int, int] = field(default_factory=dict)

    # -- replay ------------------------------------------------------------------------------

    def replay(self, index: int, offset: int, key: bytes, value: bytes | None) -> None:
        """Applies one record of state partition `index` at `offset`; ValueError for a record
        that is not a share state record (the caller logs and skips it)."""
        record_type, share_key = decode_key(key)
        self.ends[index] = max(self.ends.get(index, 0), offset + 1)
        if record_type == SNAPSHOT:
            snapshot = None if value is None else decode_value(SNAPSHOT, value)
            assert snapshot is None or isinstance(snapshot, ShareSnapshot)
            self._replay_snapshot(index, offset, share_key, snapshot)
        elif value is not None:
            update = decode_value(UPDATE, value)
            assert isinstance(update, ShareUpdate)
            self._replay_update(share_key, update)

    def _replay_snapshot(
        self, index: int, offset: int, key: ShareKey, value: ShareSnapshot | None
    ) -> None:
        kept = self.snapshot_offsets.setdefault(index, {})
        if value is None:  # a tombstone: the share partition's state is deleted
            for each in (self.offsets, self.leader_epochs, self.state_epochs, self.updates):
                each.pop(key, None)
            kept.pop(key, None)
            return
        self.leader_epochs[key] = max(self.leader_epochs.get(key, value.leader_epoch),
                                      value.leader_epoch)  # fmt: skip
        self.state_epochs[key] = max(self.state_epochs.get(key, value.state_epoch),
                                     value.state_epoch)  # fmt: skip
        self.offsets[key] = ShareState(
            value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
            value.delivery_complete_count, value.state_batches, value.create_timestamp,
            value.write_timestamp,
        )  # fmt: skip
        if self.updates.get(key, 0) >= self.updates_per_snapshot:
            self.updates[key] = 0  # (as Kafka: only a snapshot due by cadence restarts it)
        kept[key] = offset

    def _replay_update(self, key: ShareKey, value: ShareUpdate) -> None:
        self.leader_epochs[key] = max(self.leader_epochs.get(key, value.leader_epoch),
                                      value.leader_epoch)  # fmt: skip
        current = self.offsets.get(key)
        if current is None:  # (its snapshot was deleted below it: the update alone)
            self.offsets[key] = ShareState(
                value.snapshot_epoch, DEFAULT_EPOCH, value.leader_epoch, value.start_offset,
                value.delivery_complete_count, value.state_batches, 0, 0,
            )  # fmt: skip
        else:
            start = current.start_offset if value.start_offset == -1 else value.start_offset
            leader = current.leader_epoch if value.leader_epoch == -1 else value.leader_epoch
            self.offsets[key] = replace(
                current,
                start_offset=start,
                leader_epoch=leader,
                delivery_complete_count=value.delivery_complete_count,
                state_batches=combine(current.state_batches, value.state_batches, start),
            )
        self.updates[key] = self.updates.get(key, 0) + 1

    def forget(self, index: int, belongs: Callable[[ShareKey], bool]) -> int:
        """Forgets the share partitions of state partition `index` (an unload); how many."""
        gone = sum(1 for key in self.offsets if belongs(key))
        for each in (self.offsets, self.leader_epochs, self.state_epochs, self.updates):
            for key in [k for k in each if belongs(k)]:
                del each[key]
        self.snapshot_offsets.pop(index, None)
        self.ends.pop(index, None)
        return gone

    def redundant_below(self, index: int) -> int | None:
        """The offset below which every record of state partition `index` is redundant: the
        smallest offset of a live key's latest snapshot, or (no live key) the end of what was
        replayed; None when nothing was replayed."""
        kept = self.snapshot_offsets.get(index)
        if kept:
            return min(kept.values())
        return self.ends.get(index)

    # -- the rules ---------------------------------------------------------------------------

    def initialize(
        self,
        key: ShareKey | None,
        partition: int,
        state_epoch: int,
        start_offset: int,
        partition_count: int | None,
        now_ms: int,
    ) -> Outcome[StateResult]:
        """InitializeShareGroupState: a fresh ShareSnapshot (snapshot epoch 0 for a new key,
        the next one otherwise; leader epoch 0; no batches; delivery complete count -1 when the
        start offset is -1, to be resolved by share.auto.offset.reset, else 0). The same state
        epoch and start offset again is a no-op."""
        if key is None:
            return _fail(StateResult, ErrorCode.invalid_request, NULL_TOPIC_ID)
        if partition < 0:
            return _fail(StateResult, ErrorCode.invalid_request, NEGATIVE_PARTITION)
        if state_epoch < 0:
            return _fail(StateResult, ErrorCode.invalid_request, NEGATIVE_STATE_EPOCH)
        if self.state_epochs.get(key, state_epoch) > state_epoch:
            return _fail(StateResult, ErrorCode.fenced_state_epoch, FENCED_STATE_EPOCH)
        if not _in_metadata(partition, partition_count):
            return _unknown(StateResult)
        current = self.offsets.get(key)
        if (
            current is not None
            and self.state_epochs.get(key) == state_epoch
            and current.start_offset == start_offset
        ):
            return Outcome(StateResult())  # a duplicate
        snapshot = ShareSnapshot(
            snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
            state_epoch=state_epoch,
            leader_epoch=DEFAULT_EPOCH,
            start_offset=start_offset,
            delivery_complete_count=(
                NO_DELIVERY_COMPLETE_COUNT if start_offset == UNINITIALIZED_START_OFFSET else 0
            ),
            create_timestamp=now_ms,
            write_timestamp=now_ms,
            state_batches=(),
        )
        return Outcome(StateResult(), ((encode_key(SNAPSHOT, key), encode_snapshot(snapshot)),))

    def read(
        self, key: ShareKey | None, partition: int, leader_epoch: int, partition_count: int | None,
        now_ms: int,
    ) -> Outcome[ReadResult]:  # fmt: skip
        """ReadShareGroupState: the state; a newer leader epoch than any recorded is recorded
        first (a record carrying it: the previous leader is fenced from then on)."""
        if key is None:
            return _fail(ReadResult, ErrorCode.invalid_request, NULL_TOPIC_ID)
        if partition < 0:
            return _fail(ReadResult, ErrorCode.invalid_request, NEGATIVE_PARTITION)
        if leader_epoch < 0:
            return _fail(ReadResult, ErrorCode.invalid_request, NEGATIVE_LEADER_EPOCH)
        current = self.offsets.get(key)
        if current is None:
            return _fail(ReadResult, ErrorCode.invalid_request, READ_UNINITIALIZED)
        if self.leader_epochs.get(key, leader_epoch) > leader_epoch:
            return _fail(ReadResult, ErrorCode.fenced_leader_epoch, FENCED_LEADER_EPOCH)
        if not _in_metadata(partition, partition_count):
            return _unknown(ReadResult)
        answer = ReadResult(
            state_epoch=current.state_epoch,
            start_offset=current.start_offset,
            state_batches=current.state_batches,
        )
        if self.leader_epochs.get(key) == leader_epoch:
            return Outcome(answer)
        record = self._state_record(
            key, current, current.state_epoch, leader_epoch, current.start_offset,
            current.delivery_complete_count, (), now_ms, new_leader_epoch=True,
        )  # fmt: skip
        return Outcome(answer, (record,))

    def write(
        self,
        key: ShareKey | None,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        delivery_complete_count: int,
        batches: Sequence[StateBatch],
        partition_count: int | None,
        now_ms: int,
    ) -> Outcome[StateResult]:
        """WriteShareGroupState: a ShareUpdate of the written batches (merged among
        themselves), or every updates_per_snapshot updates a ShareSnapshot of the merged
        state. The start offset never moves back."""
        if key is None:
            return _fail(StateResult, ErrorCode.invalid_request, NULL_TOPIC_ID)
        if partition < 0:
            return _fail(StateResult, ErrorCode.invalid_request, NEGATIVE_PARTITION)
        if leader_epoch < 0:
            return _fail(StateResult, ErrorCode.invalid_request, NEGATIVE_LEADER_EPOCH)
        if state_epoch < 0:
            return _fail(StateResult, ErrorCode.invalid_request, NEGATIVE_STATE_EPOCH)
        current = self.offsets.get(key)
        if current is None:
            return _fail(StateResult, ErrorCode.invalid_request, WRITE_UNINITIALIZED)
        if self.leader_epochs.get(key, leader_epoch) > leader_epoch:
            return _fail(StateResult, ErrorCode.fenced_leader_epoch, FENCED_LEADER_EPOCH)
        if self.state_epochs.get(key, state_epoch) > state_epoch:
            return _fail(StateResult, ErrorCode.fenced_state_epoch, FENCED_STATE_EPOCH)
        if not _in_metadata(partition, partition_count):
            return _unknown(StateResult)
        record = self._state_record(
            key, current, state_epoch, leader_epoch, start_offset, delivery_complete_count,
            batches, now_ms, new_leader_epoch=False,
        )  # fmt: skip
        return Outcome(StateResult(), (record,))

    def _state_record(
        self,
        key: ShareKey,
        current: ShareState,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        delivery_complete_count: int,
        batches: Sequence[StateBatch],
        now_ms: int,
        new_leader_epoch: bool,
    ) -> Record:
        """The record a write (or a read with a newer leader epoch) appends. (As Kafka: a
        write keeps the recorded leader epoch; only a read moves it.)"""
        leader = leader_epoch if new_leader_epoch else current.leader_epoch
        start = max(start_offset, current.start_offset)
        if start_offset == current.start_offset:
            complete = max(delivery_complete_count, current.delivery_complete_count)
        elif start_offset < current.start_offset:
            complete = current.delivery_complete_count
        else:
            complete = delivery_complete_count
        if self.updates.get(key, 0) >= self.updates_per_snapshot:
            snapshot = ShareSnapshot(
                snapshot_epoch=current.snapshot_epoch + 1,
                state_epoch=current.state_epoch,
                leader_epoch=leader,
                start_offset=start,
                delivery_complete_count=complete,
                create_timestamp=now_ms,
                write_timestamp=now_ms,
                state_batches=combine(current.state_batches, batches, start),
            )
            return encode_key(SNAPSHOT, key), encode_snapshot(snapshot)
        update = ShareUpdate(
            snapshot_epoch=current.snapshot_epoch,
            leader_epoch=leader,
            start_offset=start,
            delivery_complete_count=complete,
            state_batches=combine((), batches, start),
        )
        return encode_key(UPDATE, key), encode_update(update)

    def delete(
        self, key: ShareKey | None, partition: int, partition_count: int | None
    ) -> Outcome[StateResult]:
        """DeleteShareGroupState: a tombstone; a share partition with no state: nothing."""
        if key is None:
            return _fail(StateResult, ErrorCode.invalid_request, NULL_TOPIC_ID)
        if partition < 0:
            return _fail(StateResult, ErrorCode.invalid_request, NEGATIVE_PARTITION)
        if not _in_metadata(partition, partition_count):
            return _unknown(StateResult)
        if key not in self.offsets:
            return Outcome(StateResult())
        return Outcome(StateResult(), ((encode_key(SNAPSHOT, key), None),))

    def topics_deleted(
        self, topic_ids: Collection[uuid.UUID], keys: Iterable[ShareKey] | None = None
    ) -> tuple[Record, ...]:
        """Deleted topics (Kafka's maybeCleanupShareState): a tombstone of every share
        partition of theirs that has state (of `keys` only, when given); none otherwise."""
        candidates = self.offsets if keys is None else keys
        return tuple(
            (encode_key(SNAPSHOT, key), None)
            for key in candidates
            if key.topic_id in topic_ids and key in self.offsets
        )

    def read_summary(
        self, key: ShareKey | None, partition: int, partition_count: int | None
    ) -> Outcome[SummaryResult]:
        """ReadShareGroupStateSummary: start offset, delivery complete count and epochs; a
        share partition with no state answers the uninitialized values, no error."""
        if key is None:
            return _fail(SummaryResult, ErrorCode.invalid_request, NULL_TOPIC_ID)
        if partition < 0:
            return _fail(SummaryResult, ErrorCode.invalid_request, NEGATIVE_PARTITION)
        if not _in_metadata(partition, partition_count):
            return _unknown(SummaryResult)
        current = self.offsets.get(key)
        if current is None:
            return Outcome(SummaryResult())
        return Outcome(
            SummaryResult(
                state_epoch=current.state_epoch,
                leader_epoch=current.leader_epoch,
                start_offset=current.start_offset,
                delivery_complete_count=current.delivery_complete_count,
            )
        )

    def cold_snapshots(self, keys: Sequence[ShareKey], interval_ms: int, now_ms: int
                       ) -> list[Record]:  # fmt: skip
        """Kafka's snapshotColdPartitions over `keys` (those of one state partition): a fresh
        ShareSnapshot (next snapshot epoch, write timestamp now) of every share partition not
        snapshotted for `interval_ms`, so that the records below can be deleted; nothing when
        every one was already snapshotted so (the partition is quiet)."""
        states = [(key, self.offsets[key]) for key in keys if key in self.offsets]
        if all(state.create_timestamp != state.write_timestamp for _, state in states):
            return []
        return [
            record for key, _ in states for record in self.cold_snapshot(key, interval_ms, now_ms)
        ]

    def cold_snapshot(self, key: ShareKey, interval_ms: int, now_ms: int) -> tuple[Record, ...]:
        """A fresh ShareSnapshot of one share partition if it was not snapshotted for
        `interval_ms` (next snapshot epoch, write timestamp now)."""
        state = self.offsets.get(key)
        if state is None or now_ms - state.write_timestamp < interval_ms:
            return ()
        fresh = replace(state, snapshot_epoch=state.snapshot_epoch + 1, write_timestamp=now_ms)
        return ((encode_key(SNAPSHOT, key), encode_snapshot(fresh.snapshot())),)


def share_key(group_id: str, topic_id: uuid.UUID | None, partition: int) -> ShareKey | None:
    """The key of a request's share partition (None: a null topic id, INVALID_REQUEST)."""
    return None if topic_id is None else ShareKey(group_id, topic_id, partition)


def _in_metadata(partition: int, partition_count: int | None) -> bool:
    return partition_count is not None and partition < partition_count


def _fail(kind: type[A], error: ErrorCode, message: str) -> Outcome[A]:
    return Outcome(kind(error=error, message=message))


def _unknown(kind: type[A]) -> Outcome[A]:
    return _fail(kind, ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_OR_PARTITION)
