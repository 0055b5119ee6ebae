"""A follower's log: the leader's batches appended as they are (offsets, leader epochs,
producer state, transactions and the aborted index the same as the leader's), a fetch
answered twice skipped, a gap refused, the cut after a leader change (KIP-101) that takes
the epochs, producer state, aborted index and high watermark back with it, and a new start at
the leader's log start for a follower left behind it, on both storage engines and across a
restart."""

from __future__ import annotations

import uuid

import pytest

from lockgate.config.log import LogConfig
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import TRANSACTIONAL_BIT, build_batch, validate_produced_batch
from lockgate.storage.engine import StorageEngine
from lockgate.storage.memory import MemoryEngine

TXN, IDEMPOTENT = 77, 5


def open_log(
    storage: StorageEngine, name: str, config: LogConfig | None = None, new_epoch: bool = True
) -> Partition:
    """A log as a single node opens it (a new epoch), or as a cluster replica (the epochs
    only the leader's batches bring)."""
    partition = Partition(storage, name, 0, uuid.UUID(int=1), lambda: config or LogConfig())
    partition.load(1_000, new_epoch=new_epoch)
    return partition


def produce(leader: Partition, producer: int, sequence: int, transactional: bool) -> None:
    batch = build_batch(
        [(None, b"v%d" % (sequence + i)) for i in range(3)],
        attributes=TRANSACTIONAL_BIT if transactional else 0,
        producer_id=producer,
        producer_epoch=0,
        base_sequence=sequence,
    )
    leader.append(bytearray(batch), validate_produced_batch(batch), 2_000)


def history(leader: Partition) -> None:
    """0-2 idempotent, 3-5 and 6-8 a transaction, 9 its ABORT, 10-12 idempotent, 13-15 a
    transaction still open."""
    produce(leader, IDEMPOTENT, 0, transactional=False)
    produce(leader, TXN, 0, transactional=True)
    produce(leader, TXN, 3, transactional=True)
    leader.write_marker(TXN, 0, False, 1, 3_000, strict_epoch=False)
    produce(leader, IDEMPOTENT, 3, transactional=False)
    produce(leader, TXN, 6, transactional=True)


def replicate(leader: Partition, follower: Partition) -> None:
    """Fetches until caught up (a read returns one segment's batches at most)."""
    while follower.log_end_offset < leader.log_end_offset:
        data = leader.read(follower.log_end_offset, 1 << 20, leader.log_end_offset)
        follower.append_replicated(data, 4_000)


def everything(partition: Partition) -> bytes:
    return b"".join(segment.log.read(0, segment.log.size) for segment in partition.segments)


def same_state(a: Partition, b: Partition) -> None:
    assert a.log_end_offset == b.log_end_offset
    assert everything(a) == everything(b)
    assert a.open_txns == b.open_txns
    assert a.aborted.entries == b.aborted.entries
    assert a.epochs.epochs == b.epochs.epochs
    assert a.epochs.start_offsets == b.epochs.start_offsets
    for producer in (TXN, IDEMPOTENT):
        left, right = a.producers.get(producer), b.producers.get(producer)
        assert left is not None and right is not None
        assert (left.epoch, left.last_sequence, left.last_offset, left.txn_first_offset) == (
            right.epoch, right.last_sequence, right.last_offset, right.txn_first_offset
        )  # fmt: skip


def test_a_follower_copies_the_leader_exactly(storage: StorageEngine) -> None:
    leader, follower = open_log(storage, "leader"), open_log(storage, "follower", new_epoch=False)
    history(leader)
    replicate(leader, follower)
    same_state(leader, follower)
    assert follower.open_txns == {TXN: 13}
    assert [e.last_offset for e in follower.aborted.entries] == [9]
    # a restart of the follower finds the same state in its files
    for segment in follower.segments:
        segment.close()
    same_state(leader, open_log(storage, "follower", new_epoch=False))


def test_a_follower_keeps_the_coordinator_epoch_fence_for_when_it_leads() -> None:
    storage = MemoryEngine()
    leader, follower = open_log(storage, "leader"), open_log(storage, "follower", new_epoch=False)
    history(leader)  # its ABORT came from coordinator epoch 1
    replicate(leader, follower)
    entry = follower.producers.get(TXN)
    assert entry is not None and entry.coordinator_epoch == 1
    with pytest.raises(KafkaProtocolError) as fenced:
        follower.write_marker(TXN, 0, False, 0, 5_000, strict_epoch=False)  # a zombie's
    assert fenced.value.code == ErrorCode.transaction_coordinator_fenced


def test_a_fetch_answered_twice_is_skipped_and_a_gap_refused() -> None:
    storage = MemoryEngine()
    leader, follower = open_log(storage, "leader"), open_log(storage, "follower", new_epoch=False)
    history(leader)
    replicate(leader, follower)
    end = follower.append_replicated(leader.read(0, 1 << 20, leader.log_end_offset), 4_000)
    assert end == leader.log_end_offset
    same_state(leader, follower)
    produce(leader, IDEMPOTENT, 6, transactional=False)  # 16-18
    produce(leader, IDEMPOTENT, 9, transactional=False)  # 19-21
    stranger = open_log(storage, "stranger")
    with pytest.raises(KafkaProtocolError) as refused:
        stranger.append_replicated(leader.read(19, 1 << 20, leader.log_end_offset), 4_000)
    assert refused.value.code == ErrorCode.corrupt_message
    assert stranger.log_end_offset == 0


def test_the_cut_after_a_leader_change(storage: StorageEngine) -> None:
    config = LogConfig(segment_bytes=200)  # several segments, so the cut removes some
    leader = open_log(storage, "leader", config)
    follower = open_log(storage, "follower", config, new_epoch=False)
    history(leader)
    replicate(leader, follower)
    follower.advance_high_watermark(follower.log_end_offset)
    assert len(follower.segments) > 2

    end = follower.truncate_to(7, 5_000)  # inside the batch 6-8: the whole batch goes
    assert end == 6
    assert follower.high_watermark == 6
    assert follower.aborted.entries == []  # the ABORT at 9 is gone, its transaction open again
    assert follower.open_txns == {TXN: 3}
    entry = follower.producers.get(IDEMPOTENT)
    assert entry is not None and entry.last_offset == 2
    assert everything(follower) == everything(leader)[: len(everything(follower))]

    # the new leader (the old one cut the same way) goes on at a later epoch
    leader.truncate_to(6, 5_000)
    leader.leader_epoch = 5
    leader.epochs.begin_epoch(5, 6)
    leader.write_marker(TXN, 1, True, 2, 6_000, strict_epoch=False)
    replicate(leader, follower)
    same_state(leader, follower)
    assert follower.epochs.latest_epoch == 5 and follower.epochs.start_offsets[-1] == 6
    assert follower.open_txns == {}

    for segment in follower.segments:
        segment.close()
    same_state(leader, open_log(storage, "follower", config, new_epoch=False))


def test_a_cut_at_or_past_the_end_changes_nothing() -> None:
    storage = MemoryEngine()
    follower = open_log(storage, "follower")
    produce(follower, IDEMPOTENT, 0, transactional=False)
    assert follower.truncate_to(3, 5_000) == 3
    assert follower.truncate_to(10, 5_000) == 3
    assert follower.truncate_to(0, 5_000) == 0
    assert follower.producers.get(IDEMPOTENT) is None


def test_a_follower_behind_the_leaders_log_start_starts_anew_there(
    storage: StorageEngine,
) -> None:
    config = LogConfig(segment_bytes=200)
    leader = open_log(storage, "leader", config)
    follower = open_log(storage, "follower", config, new_epoch=False)
    produce(leader, IDEMPOTENT, 0, transactional=False)  # 0-2
    replicate(leader, follower)
    for sequence in (3, 6, 9):  # 3-11, while the follower is away
        produce(leader, IDEMPOTENT, sequence, transactional=False)
    leader.advance_high_watermark(leader.log_end_offset)
    assert leader.delete_records(6, 5_000) == 6

    follower.truncate_fully_and_start_at(3, 6_000)  # not behind: nothing happens
    assert (follower.log_start_offset, follower.log_end_offset) == (0, 3)
    follower.truncate_fully_and_start_at(6, 6_000)
    assert (follower.log_start_offset, follower.log_end_offset, follower.high_watermark) == (
        6, 6, 6
    )  # fmt: skip
    assert follower.epochs.epochs == [] and follower.producers.get(IDEMPOTENT) is None
    assert [s.base_offset for s in follower.segments] == [6]

    replicate(leader, follower)
    assert follower.log_end_offset == 12
    assert everything(follower) == leader.read(6, 1 << 20, 12)
    assert follower.epochs.epochs == leader.epochs.epochs[-1:]
    entry = follower.producers.get(IDEMPOTENT)
    assert entry is not None and entry.last_offset == 11
    # a restart finds the new start and nothing of the old log
    kept = everything(follower)
    for segment in follower.segments:
        segment.close()
    again = open_log(storage, "follower", config, new_epoch=False)
    assert (again.log_start_offset, again.log_end_offset) == (6, 12)
    assert everything(again) == kept
