"""A partition over a failing storage engine: an append, marker or roll that storage refuses
changes nothing visible, the next attempt succeeds once storage recovers, snapshot failures are
not fatal, a failed fsync keeps the high watermark below unsynced data and ends
acknowledgements, and topic creation records nothing when its files cannot be made."""

from __future__ import annotations

import asyncio
import errno
import uuid
from dataclasses import replace

import pytest

from lockgate.cluster.local import LocalMetadataStore
from lockgate.config.log import LogConfig
from lockgate.config.properties import BrokerConfig
from lockgate.log.partition import Partition
from lockgate.log.steps import run
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import TRANSACTIONAL_BIT, build_batch, validate_produced_batch
from lockgate.replication.group_commit import GroupCommit
from lockgate.storage.errors import OfflineError, StorageError
from lockgate.storage.memory import MemoryEngine, MemoryFaults
from lockgate.topics.directory import TopicManager

PRODUCER = 42


def make(faults: MemoryFaults, config: LogConfig | None = None) -> tuple[MemoryEngine, Partition]:
    engine = MemoryEngine(faults)
    partition = Partition(engine, "t", 0, uuid.UUID(int=1), lambda: config or LogConfig())
    partition.load(1_000)
    return engine, partition


def batch(sequence: int, count: int = 2, transactional: bool = False) -> bytes:
    return build_batch(
        [(None, b"value-%d" % (sequence + i)) for i in range(count)],
        timestamp_ms=5_000 + sequence,
        producer_id=PRODUCER,
        producer_epoch=0,
        base_sequence=sequence,
        attributes=TRANSACTIONAL_BIT if transactional else 0,
    )


def append(partition: Partition, data: bytes) -> int:
    return partition.append(bytearray(data), validate_produced_batch(data), 6_000)[0]


def visible_state(partition: Partition) -> dict[str, object]:
    active = partition.active
    return {
        "end": partition.log_end_offset,
        "segments": [s.base_offset for s in partition.segments],
        "size": active.size,
        "offset_index": list(active.offset_index.positions),
        "time_index": list(active.time_index.timestamps),
        "max_timestamp": active.max_timestamp,
        "producer": partition.producers.get(PRODUCER),
        "open_txns": dict(partition.open_txns),
        "aborted": list(partition.aborted.entries),
        "unsynced": len(partition.unsynced),
        "data": partition.read(0, 1 << 20, partition.log_end_offset),
    }


def test_append_refused_by_a_full_disk_changes_nothing_and_the_retry_succeeds() -> None:
    faults = MemoryFaults()
    engine, partition = make(faults)
    append(partition, batch(0))
    before = visible_state(partition)
    faults.capacity = engine.used_bytes() + 10
    with pytest.raises(StorageError) as caught:
        append(partition, batch(2))
    assert caught.value.kind == "ENOSPC"
    assert visible_state(partition) == before
    faults.capacity = None
    assert append(partition, batch(2)) == 2  # the same sequence is new, not a duplicate
    assert partition.log_end_offset == 4


def test_index_write_refused_after_the_log_write_is_undone() -> None:
    faults = MemoryFaults()
    engine, partition = make(faults)
    data = batch(0)
    before = visible_state(partition)
    # room for the batch but not for the offset-index entry written for position 0
    faults.capacity = engine.used_bytes() + len(data) + 4
    with pytest.raises(StorageError):
        append(partition, data)
    assert visible_state(partition) == before
    assert engine.files["t-0/" + "0" * 20 + ".log"] == bytearray()
    faults.capacity = None
    assert append(partition, data) == 0
    assert list(partition.active.offset_index.positions) == [0]


def test_roll_that_cannot_create_its_files_leaves_the_old_segment_active() -> None:
    faults = MemoryFaults()
    config = LogConfig(segment_bytes=200)
    _engine, partition = make(faults, config)
    append(partition, batch(0, count=5))
    before = visible_state(partition)
    faults.opens_left = 1  # the new .log opens, its .index does not
    with pytest.raises(StorageError) as caught:
        append(partition, batch(5, count=5))
    assert caught.value.kind == "EMFILE"
    assert visible_state(partition) == before
    faults.opens_left = None
    assert append(partition, batch(5, count=5)) == 5
    assert [s.base_offset for s in partition.segments] == [0, 5]


def test_abort_marker_whose_txn_index_write_fails_is_undone() -> None:
    faults = MemoryFaults()
    engine, partition = make(faults)
    append(partition, batch(0, transactional=True))
    before = visible_state(partition)
    assert before["open_txns"] == {PRODUCER: 0}
    # the marker batch fits; the 34-byte aborted-transaction entry after it does not
    faults.capacity = engine.used_bytes() + 100
    with pytest.raises(StorageError):
        partition.write_marker(PRODUCER, 0, False, 1, 7_000, False)
    assert visible_state(partition) == before
    faults.capacity = None
    assert partition.write_marker(PRODUCER, 0, False, 1, 7_000, False) == 2
    assert partition.open_txns == {}
    assert [(a.first_offset, a.last_offset) for a in partition.aborted.entries] == [(0, 2)]


def test_a_file_that_cannot_be_cut_back_is_recovered_by_the_restart() -> None:
    faults = MemoryFaults()
    engine, partition = make(faults)
    append(partition, batch(0))
    faults.capacity = engine.used_bytes() + 30
    faults.truncate_errno = errno.EIO
    with pytest.raises(StorageError):
        append(partition, batch(2))
    faults.capacity = None
    faults.truncate_errno = None
    with pytest.raises(StorageError):  # refuses to append after the bytes it could not remove
        append(partition, batch(2))
    assert partition.log_end_offset == 2
    reloaded = Partition(engine, "t", 0, uuid.UUID(int=1), LogConfig)
    reloaded.load(9_000)  # the CRC scan cuts the torn tail
    assert reloaded.log_end_offset == 2
    assert append(reloaded, batch(2)) == 2


def test_snapshot_failures_are_not_fatal() -> None:
    faults = MemoryFaults()
    _engine, partition = make(faults, LogConfig(segment_bytes=150))
    append(partition, batch(0, count=5))  # (the term's epoch is written before this one)
    faults.atomic_errno = errno.ENOSPC
    append(partition, batch(5, count=5))  # rolls; the snapshot at the roll fails
    assert len(partition.segments) == 2
    partition.close()  # the snapshot at close fails too; close still closes


async def test_failed_fsync_keeps_the_high_watermark_and_ends_acknowledgements() -> None:
    faults = MemoryFaults()
    engine = MemoryEngine(faults, durable=True)
    partition = Partition(engine, "t", 0, uuid.UUID(int=1), LogConfig)
    partition.load(1_000)
    commit = GroupCommit(durable=True)
    append(partition, batch(0))
    await commit.appended(partition)
    assert partition.high_watermark == 2
    faults.sync_errno = errno.EIO
    append(partition, batch(2))
    with pytest.raises(StorageError):
        await commit.appended(partition)
    assert partition.high_watermark == 2  # never past data that was not synced
    faults.sync_errno = None  # a later fsync that "succeeds" proves nothing (fsyncgate)
    with pytest.raises(OSError):
        await commit.appended(partition)
    assert partition.high_watermark == 2
    with pytest.raises(OfflineError):
        append(partition, batch(4))
    for offset in (0, partition.high_watermark):  # the log end too: a consumer polling there
        with pytest.raises(KafkaProtocolError) as caught:
            partition.read(offset, 1 << 20, partition.high_watermark)
        assert caught.value.code == ErrorCode.kafka_storage_error
    await asyncio.sleep(0)


def manager(engine: MemoryEngine) -> TopicManager:
    config = BrokerConfig({})
    return TopicManager(engine, LocalMetadataStore(engine, 0), config, lambda: 1_000)


def test_create_topic_failing_midway_records_nothing() -> None:
    faults = MemoryFaults()
    engine = MemoryEngine(faults)
    topics = manager(engine)
    faults.opens_left = 3 * 5 + 1  # five partitions' files, then EMFILE in the sixth
    with pytest.raises(KafkaProtocolError) as caught:
        topics.create("big", 10, 1, {})
    assert caught.value.code == ErrorCode.kafka_storage_error
    faults.opens_left = None
    assert "big" not in topics.topics
    assert not any(name.startswith("big-") for name in engine.list_dir(""))
    assert "big" not in manager(engine).store.topics()
    again = manager(engine)
    again.load()
    assert again.create("big", 10, 1, {}).partitions == 10


def test_create_topic_whose_metadata_write_fails_records_nothing() -> None:
    faults = MemoryFaults()
    engine = MemoryEngine(faults)
    topics = manager(engine)
    faults.write_errno = errno.ENOSPC  # (the metadata journal's append)
    with pytest.raises(KafkaProtocolError, match="recording topic t") as caught:
        topics.create("t", 3, 1, {})
    assert caught.value.code == ErrorCode.kafka_storage_error
    faults.write_errno = None
    assert topics.store.topics() == {}
    assert not any(name.startswith("t-") for name in engine.list_dir(""))
    topics.create("other", 1, 1, {})  # the next write must not carry the failed topic along
    assert set(manager(engine).store.topics()) == {"other"}


def test_add_partitions_failing_midway_keeps_the_old_count() -> None:
    faults = MemoryFaults()
    engine = MemoryEngine(faults)
    topics = manager(engine)
    topics.create("t", 2, 1, {})
    faults.opens_left = 3 * 2 + 1
    with pytest.raises(KafkaProtocolError):
        topics.add_partitions("t", 6)
    faults.opens_left = None
    assert topics.topics["t"].partitions == 2
    assert manager(engine).store.topics()["t"].partitions == 2
    assert sorted(n for n in engine.list_dir("") if n.startswith("t-")) == ["t-0", "t-1"]
    topics.add_partitions("t", 6)
    assert manager(engine).store.topics()["t"].partitions == 6


def test_log_config_is_unchanged_by_a_failed_create() -> None:
    faults = MemoryFaults()
    topics = manager(MemoryEngine(faults))
    faults.opens_left = 0  # (after the metadata journal's opening)
    with pytest.raises(KafkaProtocolError):
        topics.create("t", 1, 1, {"segment.bytes": "1048576"})
    faults.opens_left = None
    record = topics.create("t", 1, 1, {})
    assert topics.get("t", 0) is not None
    assert replace(record).configs == {}


def test_an_undo_that_cannot_cut_the_log_leaves_the_partition_refusing_appends() -> None:
    faults = MemoryFaults()
    engine, partition = make(faults)
    data = batch(0)
    partition.epochs.ensure_saved()  # (the term's epoch, else written before the first append)
    faults.capacity = engine.used_bytes() + len(data) + 4  # the index entry does not fit
    faults.truncate_errno = errno.EIO  # and nothing can be cut back
    with pytest.raises(StorageError):
        append(partition, data)
    faults.capacity = None
    faults.truncate_errno = None
    assert partition.log_end_offset == 0
    with pytest.raises(StorageError):  # never a second batch at the same offsets
        append(partition, data)
    reloaded = Partition(engine, "t", 0, uuid.UUID(int=1), LogConfig)
    reloaded.load(9_000)  # the unacknowledged batch may survive; it is whole and indexed
    assert reloaded.log_end_offset in (0, 2)
    assert append(reloaded, batch(2)) == reloaded.log_end_offset - 2


def test_create_topic_whose_directory_cannot_be_made_records_nothing() -> None:
    faults = MemoryFaults(make_dirs_errno=errno.ENOSPC)
    engine = MemoryEngine(faults)
    topics = manager(engine)
    with pytest.raises(KafkaProtocolError) as caught:
        topics.create("t", 2, 1, {})
    assert caught.value.code == ErrorCode.kafka_storage_error
    assert "t" not in topics.topics and topics.store.topics() == {}


def test_a_deletion_whose_directories_cannot_be_set_aside_never_lends_them_to_the_name() -> None:
    """A deletion is done once recorded; a partition directory that can be neither renamed
    aside nor removed stays until the next start (which removes it as an orphan), and until
    then the name cannot be created again on top of the old records."""
    faults = MemoryFaults()
    engine = MemoryEngine(faults)
    topics = manager(engine)
    topics.create("t", 3, 1, {})
    held = topics.get("t", 1)
    assert held is not None
    append(held, batch(0))
    faults.rename_errno = errno.EIO
    _record, trash = run(topics.deleting("t"))
    assert "t" not in topics.topics and "t" not in manager(engine).store.topics()
    assert trash == [] and not any(n.startswith("t-") for n in engine.list_dir(""))
    topics.create("t", 3, 1, {})  # removed in place: the name is free
    fresh = topics.get("t", 1)
    assert fresh is not None and fresh.log_end_offset == 0
    append(fresh, batch(0))
    faults.remove_errno = errno.EIO
    run(topics.deleting("t"))
    faults.rename_errno = faults.remove_errno = None
    with pytest.raises(KafkaProtocolError, match="next start") as refused:
        topics.create("t", 1, 1, {})
    assert refused.value.code == ErrorCode.topic_already_exists
    assert {n for n in engine.list_dir("") if n.startswith("t-")} == {"t-0", "t-1", "t-2"}
    restarted = manager(engine)
    restarted.load()
    assert not any(n.startswith("t-") for n in engine.list_dir(""))  # orphans of a deletion
    restarted.create("t", 1, 1, {})
    again = restarted.get("t", 0)
    assert again is not None and again.log_end_offset == 0
