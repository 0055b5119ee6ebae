"""The share coordinator's rules at the state-machine level (Kafka's ShareCoordinatorShard):
every error of Initialize/Read/Write/Delete/ReadSummary, the epochs and their fences, the
snapshot cadence, and that the state is the replay of the records the rules produce."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.coordinator.share.records import (
    SNAPSHOT,
    UPDATE,
    ShareKey,
    ShareSnapshot,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
)
from lockgate.coordinator.share.results import ReadResult, StateResult, SummaryResult
from lockgate.coordinator.share.rules import Outcome, ShareStates
from lockgate.protocol.errors import ErrorCode

TOPIC = uuid.UUID(int=42)
KEY = ShareKey("g", TOPIC, 0)
PARTITIONS = 3  # the topic's partition count


class Log:
    """A state partition: the rules' records appended, then replayed (as the service does)."""

    def __init__(self, per_snapshot: int = 500) -> None:
        self.states = ShareStates(per_snapshot)
        self.records: list[tuple[bytes, bytes | None]] = []

    def apply(self, outcome: Outcome[StateResult] | Outcome[ReadResult]) -> None:
        for key, value in outcome.records:
            self.states.replay(0, len(self.records), key, value)
            self.records.append((key, value))

    def init(self, state_epoch: int = 1, start: int = 0, now: int = 1) -> StateResult:
        outcome = self.states.initialize(KEY, 0, state_epoch, start, PARTITIONS, now)
        self.apply(outcome)
        return outcome.answer

    def read(self, leader_epoch: int = 1, now: int = 2) -> ReadResult:
        outcome = self.states.read(KEY, 0, leader_epoch, PARTITIONS, now)
        self.apply(outcome)
        return outcome.answer

    def write(
        self, batches: list[StateBatch], start: int = 0, state_epoch: int = 1,
        leader_epoch: int = 1, complete: int = -1, now: int = 3,
    ) -> StateResult:  # fmt: skip
        outcome = self.states.write(
            KEY, 0, state_epoch, leader_epoch, start, complete, batches, PARTITIONS, now
        )
        self.apply(outcome)
        return outcome.answer

    def replayed(self) -> ShareStates:
        fresh = ShareStates(self.states.updates_per_snapshot)
        for offset, (key, value) in enumerate(self.records):
            fresh.replay(0, offset, key, value)
        return fresh


def test_initialize_writes_a_snapshot() -> None:
    log = Log()
    assert log.init(state_epoch=4, start=-1, now=77) == StateResult()
    (key, value), = log.records  # fmt: skip
    assert decode_key(key) == (SNAPSHOT, KEY)
    assert value is not None
    assert decode_value(SNAPSHOT, value) == ShareSnapshot(0, 4, 0, -1, -1, 77, 77, ())
    log.init(state_epoch=5, start=10, now=78)
    value = log.records[-1][1]
    assert value is not None
    # snapshot epoch + 1; a known start offset has a delivery complete count of 0
    assert decode_value(SNAPSHOT, value) == ShareSnapshot(1, 5, 0, 10, 0, 78, 78, ())


def test_initialize_again_with_the_same_epoch_and_offset_is_a_no_op() -> None:
    log = Log()
    log.init(state_epoch=2, start=5)
    outcome = log.states.initialize(KEY, 0, 2, 5, PARTITIONS, 9)
    assert outcome == Outcome(StateResult())


def test_initialize_errors() -> None:
    states = Log().states
    invalid = ErrorCode.invalid_request
    assert states.initialize(None, 0, 1, 0, PARTITIONS, 1).answer.error == invalid
    assert states.initialize(KEY, -1, 1, 0, PARTITIONS, 1).answer.error == invalid
    assert states.initialize(KEY, 0, -1, 0, PARTITIONS, 1).answer.error == invalid
    unknown = ErrorCode.unknown_topic_or_partition
    assert states.initialize(KEY, 0, 1, 0, None, 1).answer.error == unknown  # unknown topic id
    far = ShareKey("g", TOPIC, 3)
    assert states.initialize(far, 3, 1, 0, PARTITIONS, 1).answer.error == unknown


def test_initialize_with_an_older_state_epoch_is_fenced() -> None:
    log = Log()
    log.init(state_epoch=3)
    assert log.init(state_epoch=2).error == ErrorCode.fenced_state_epoch


def test_read_of_an_uninitialized_share_partition_is_invalid() -> None:
    answer = Log().read()
    assert answer.error == ErrorCode.invalid_request
    assert answer.message == "Read operation on uninitialized share partition not allowed."


def test_read_records_a_newer_leader_epoch_and_fences_older_leaders() -> None:
    log = Log()
    log.init(state_epoch=1, start=0)
    assert log.read(leader_epoch=3) == ReadResult(state_epoch=1, start_offset=0)
    assert decode_key(log.records[-1][0]) == (UPDATE, KEY)  # the new epoch, recorded
    count = len(log.records)
    assert log.read(leader_epoch=3).error == ErrorCode.none
    assert len(log.records) == count  # the same epoch: nothing written
    assert log.read(leader_epoch=2).error == ErrorCode.fenced_leader_epoch
    assert log.write([], leader_epoch=2).error == ErrorCode.fenced_leader_epoch
    assert log.write([], leader_epoch=3).error == ErrorCode.none


def test_write_errors_in_kafkas_order() -> None:
    log = Log()
    assert log.write([]).error == ErrorCode.invalid_request  # uninitialized
    log.init(state_epoch=5)
    states = log.states
    invalid = ErrorCode.invalid_request
    assert states.write(None, 0, 5, 0, 0, -1, [], PARTITIONS, 1).answer.error == invalid
    assert states.write(KEY, -1, 5, 0, 0, -1, [], PARTITIONS, 1).answer.error == invalid
    assert states.write(KEY, 0, 5, -1, 0, -1, [], PARTITIONS, 1).answer.error == invalid
    assert states.write(KEY, 0, -1, 0, 0, -1, [], PARTITIONS, 1).answer.error == invalid
    assert log.write([], state_epoch=4).error == ErrorCode.fenced_state_epoch
    assert states.write(KEY, 0, 5, 0, 0, -1, [], None, 1).answer.error == (
        ErrorCode.unknown_topic_or_partition
    )


def test_write_merges_and_start_offset_never_moves_back() -> None:
    log = Log()
    log.init(start=0)
    log.write([StateBatch(0, 9, 2, 1)], start=0, complete=10)
    log.write([StateBatch(5, 14, 0, 2)], start=0)
    assert log.read().state_batches == (StateBatch(0, 4, 2, 1), StateBatch(5, 14, 0, 2))
    log.write([], start=5, complete=3)
    log.write([], start=2, complete=9)  # an older start: neither it nor its count is taken
    summary = log.states.read_summary(KEY, 0, PARTITIONS).answer
    assert (summary.start_offset, summary.delivery_complete_count) == (5, 3)
    assert log.read().state_batches == (StateBatch(5, 14, 0, 2),)


def test_a_snapshot_every_n_updates() -> None:
    log = Log(per_snapshot=3)
    log.init()
    kinds = []
    for offset in range(8):
        log.write([StateBatch(offset, offset, 2, 1)])
        kinds.append(decode_key(log.records[-1][0])[0])
    # 3 updates, then a snapshot of the merged state; the counter restarts with it
    assert kinds == [UPDATE, UPDATE, UPDATE, SNAPSHOT, UPDATE, UPDATE, UPDATE, SNAPSHOT]
    value = log.records[-1][1]
    assert value is not None
    snapshot = decode_value(SNAPSHOT, value)
    assert isinstance(snapshot, ShareSnapshot)
    assert snapshot.snapshot_epoch == 2
    assert snapshot.state_batches == (StateBatch(0, 7, 2, 1),)


def test_delete_and_summary() -> None:
    log = Log()
    assert log.states.delete(KEY, 0, PARTITIONS) == Outcome(StateResult())  # nothing to delete
    assert log.states.read_summary(KEY, 0, PARTITIONS).answer == SummaryResult(
        start_offset=-1, delivery_complete_count=-1, leader_epoch=0, state_epoch=0
    )
    log.init(state_epoch=2, start=4)
    log.read(leader_epoch=6)
    assert log.states.read_summary(KEY, 0, PARTITIONS).answer == SummaryResult(
        state_epoch=2, leader_epoch=6, start_offset=4, delivery_complete_count=0
    )
    outcome = log.states.delete(KEY, 0, PARTITIONS)
    assert outcome.records == ((log.records[0][0], None),)  # a ShareSnapshotKey tombstone
    log.apply(outcome)
    assert log.read().error == ErrorCode.invalid_request
    assert log.states.delete(None, 0, PARTITIONS).answer.error == ErrorCode.invalid_request
    assert log.states.read_summary(KEY, 0, None).answer.error == (
        ErrorCode.unknown_topic_or_partition
    )


def test_a_deleted_topic_tombstones_its_share_partitions_with_state() -> None:
    """Kafka's maybeCleanupShareState: a ShareSnapshot tombstone for every share partition
    of the deleted topics that has state, whatever the group; others are left."""
    log = Log()
    other_topic = ShareKey("g", uuid.UUID(int=43), 0)
    other_group = ShareKey("h", TOPIC, 2)
    log.init()
    for key in (other_topic, other_group):
        log.apply(log.states.initialize(key, key.partition, 1, 0, PARTITIONS, 1))
    log.write([StateBatch(0, 4, 2, 1)])  # (an update too: the tombstone forgets it all)
    records = log.states.topics_deleted({TOPIC})
    assert sorted((decode_key(key) for key, _value in records), key=str) == [
        (SNAPSHOT, KEY), (SNAPSHOT, other_group)
    ]  # fmt: skip
    assert all(value is None for _key, value in records)
    # only the keys asked about, when given
    assert log.states.topics_deleted({TOPIC}, [other_group, other_topic]) == (
        (encode_key(SNAPSHOT, other_group), None),
    )
    log.apply(Outcome(StateResult(), records))
    assert set(log.states.offsets) == {other_topic}
    assert log.read().error == ErrorCode.invalid_request  # (uninitialized now)
    assert log.states.topics_deleted({TOPIC}) == ()  # nothing left: nothing written
    assert log.states.topics_deleted({uuid.UUID(int=99)}, [other_topic]) == ()


def test_redundant_offset_is_the_oldest_latest_snapshot() -> None:
    log = Log(per_snapshot=2)
    other = ShareKey("h", TOPIC, 1)
    log.init()  # offset 0: KEY's snapshot
    log.apply(log.states.initialize(other, 1, 1, 0, PARTITIONS, 1))  # offset 1
    for _ in range(3):
        log.write([])  # offsets 2, 3 updates, 4 a snapshot of KEY
    assert log.states.redundant_below(0) == 1  # other's snapshot is the oldest needed
    log.apply(log.states.delete(other, 1, PARTITIONS))
    assert log.states.redundant_below(0) == 4
    log.apply(log.states.delete(KEY, 0, PARTITIONS))
    assert log.states.redundant_below(0) == len(log.records)  # nothing live: all redundant


def test_cold_snapshots() -> None:
    log = Log()
    log.init(now=100)
    assert log.states.cold_snapshots([KEY], 50, 120) == []  # not cold yet
    records = log.states.cold_snapshots([KEY], 50, 200)
    for key, value in records:
        log.states.replay(0, len(log.records), key, value)
        log.records.append((key, value))
    state = log.states.offsets[KEY]
    assert (state.snapshot_epoch, state.create_timestamp, state.write_timestamp) == (1, 100, 200)
    # every share partition already snapshotted cold: the partition is quiet, nothing to do
    assert log.states.cold_snapshots([KEY], 50, 1_000) == []


_Batch = tuple[int, int, int, int]
_Op = tuple[str, int, int, list[_Batch]]
_ops = st.lists(
    st.tuples(
        st.sampled_from(["init", "read", "write", "write", "write", "delete"]),
        st.integers(0, 4),  # a state epoch (init) or a leader epoch (read, write)
        st.integers(-1, 20),  # a start offset
        st.lists(
            st.tuples(
                st.integers(0, 30), st.integers(0, 5), st.sampled_from([0, 2, 4]), st.integers(1, 3)
            ),
            max_size=3,
        ),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_a_load_from_the_redundant_offset_is_the_full_replay(ops: list[_Op]) -> None:
    """What pruning deletes (every record below the oldest latest snapshot) changes no share
    partition's state: a load of the rest gives the state a replay of everything gives."""
    log = Log(per_snapshot=2)
    for kind, epoch, start, raw in ops:
        if kind == "init":
            log.init(state_epoch=epoch, start=start)
        elif kind == "read":
            log.read(leader_epoch=epoch)
        elif kind == "write":
            batches = [StateBatch(f, f + n, s, c) for f, n, s, c in raw]
            log.write(batches, start=start, leader_epoch=epoch, state_epoch=4)
        else:
            log.apply(log.states.delete(KEY, 0, PARTITIONS))
    full = log.replayed()
    assert full.offsets == log.states.offsets
    below = log.states.redundant_below(0) or 0
    pruned = ShareStates(2)
    for offset in range(below, len(log.records)):
        pruned.replay(0, offset, *log.records[offset])
    assert pruned.offsets == full.offsets
    assert pruned.state_epochs == full.state_epochs
