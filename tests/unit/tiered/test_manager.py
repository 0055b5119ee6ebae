"""Tiered storage on the leader (tiered/manager.py): copies of rolled segments, local and
remote retention, reads below the local log start, the rebuild from manifests and the
cleanup of what an interrupted copy left. On both storage engines, against the in-memory
object store (the S3 server is tests/integration/test_tiered_storage.py's)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from lockgate.config.log import LogConfig
from lockgate.handlers.k02_list_offsets import (
    EARLIEST,
    EARLIEST_LOCAL,
    EARLIEST_PENDING_UPLOAD,
    LATEST_TIERED,
    lookup,
    remote_extent_known,
)
from lockgate.log.partition import Partition
from lockgate.log.txn_index import AbortedTxn
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    TRANSACTIONAL_BIT,
    build_batch,
    validate_produced_batch,
)
from lockgate.storage.engine import StorageEngine
from lockgate.storage.memory import MemoryEngine
from lockgate.storage.object_store import MemoryObjectStore, ObjectStoreError
from lockgate.tiered.failures import REPEAT_LOG_MS
from lockgate.tiered.layout import MANIFEST, partition_prefix
from lockgate.tiered.listing import scan
from lockgate.tiered.manager import RemoteLogManager
from tests.support.batches import values

NOW = 1_000_000
TOPIC_ID = uuid.UUID(int=7)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def tiered_partition(storage: StorageEngine, config: LogConfig, segments: int = 6) -> Partition:
    """`segments` segments of one 3-record batch each (timestamps 1000, 2000, ...), the last
    one active, everything visible."""
    partition = Partition(storage, "events", 0, TOPIC_ID, lambda: config)
    partition.load(NOW)
    for i in range(segments):
        if i:
            partition.roll(NOW)
        batch = build_batch([(None, b"v%d-%d" % (i, j)) for j in range(3)],
                            timestamp_ms=(i + 1) * 1000)  # fmt: skip
        partition.append(bytearray(batch), validate_produced_batch(batch), NOW)
    partition.advance_high_watermark(partition.log_end_offset)
    return partition


TIERED = LogConfig(
    remote_storage=True, retention_ms=-1, local_retention_ms=-1, local_retention_bytes=1
)  # fmt: skip  (keeps one local segment)


async def test_rolled_segments_are_copied_then_deleted_locally(storage: StorageEngine) -> None:
    partition = tiered_partition(storage, TIERED)
    store = MemoryObjectStore()
    manager = RemoteLogManager(store, storage, 1, Clock())
    await manager.run([partition])
    # the five rolled segments are remote; locally only what local retention keeps
    assert (partition.remote_start, partition.remote_end) == (0, 15)
    assert partition.local_log_start_offset == 15
    assert [s.base_offset for s in partition.segments] == [15]
    assert partition.log_start_offset == 0
    assert manager.stats.copied_segments == 5
    found, orphans = await scan(store, partition_prefix("events", TOPIC_ID, 0))
    assert sorted(s.base_offset for s in found) == [0, 3, 6, 9, 12] and orphans == []
    assert lookup(partition, EARLIEST, 0)[0] == 0
    assert lookup(partition, EARLIEST_LOCAL, 0)[0] == 15
    assert lookup(partition, LATEST_TIERED, 0)[0] == 14


async def test_reads_below_the_local_start_come_from_the_object_store(
    storage: StorageEngine,
) -> None:
    partition = tiered_partition(storage, TIERED)
    expected = [(o, b"v%d-%d" % (o // 3, o % 3)) for o in range(18)]
    manager = RemoteLogManager(MemoryObjectStore(), storage, 1, Clock())
    await manager.run([partition])
    assert manager.serves(partition, 4) and not manager.serves(partition, 15)
    read: list[tuple[int, bytes | None]] = []
    offset = 0
    while offset < 15:
        data, aborted = await manager.read(partition, offset, 1, partition.high_watermark, False)
        assert data and aborted is None  # one whole batch at least, even over max_bytes
        read += values(data)
        offset = read[-1][0] + 1
    read += values(partition.read(15, 10**6, partition.high_watermark))
    assert read == expected
    # a read in the middle of a batch starts with that batch
    data, _ = await manager.read(partition, 7, 10**6, partition.high_watermark, True)
    assert values(data)[0][0] == 6


async def test_nothing_is_deleted_locally_while_the_store_refuses(
    storage: StorageEngine,
) -> None:
    partition = tiered_partition(storage, TIERED)
    store = MemoryObjectStore()
    store.unavailable = ObjectStoreError("connection refused", retriable=True)
    manager = RemoteLogManager(store, storage, 1, Clock())
    await manager.run([partition])  # logged, not raised
    assert len(partition.segments) == 6 and partition.remote_start is None
    store.unavailable = None
    await manager.run([partition])
    assert partition.remote_end == 15 and len(partition.segments) == 1


async def test_remote_retention_deletes_the_oldest_remote_segments(
    storage: StorageEngine,
) -> None:
    config = LogConfig(remote_storage=True, retention_ms=10_000, local_retention_ms=-1,
                       local_retention_bytes=1)  # fmt: skip
    partition = tiered_partition(storage, config)
    clock = Clock()
    clock.now = 3_500  # batches of 1000 ms... : none is 10 s old
    store = MemoryObjectStore()
    manager = RemoteLogManager(store, storage, 1, clock)
    await manager.run([partition])
    assert partition.remote_start == 0
    clock.now = 13_500  # segments with max timestamps 1000, 2000, 3000 are past 10 s
    await manager.run([partition])
    assert partition.remote_start == 9 and partition.log_start_offset == 9
    assert manager.stats.deleted_segments == 3
    keys = [o.key for o in await store.list("")]
    assert not any(f"{0:020d}-" in k or f"{3:020d}-" in k for k in keys)


async def test_delete_records_removes_the_remote_segments_below(storage: StorageEngine) -> None:
    partition = tiered_partition(storage, TIERED)
    manager = RemoteLogManager(MemoryObjectStore(), storage, 1, Clock())
    await manager.run([partition])
    assert partition.delete_records(7, NOW) == 7  # at once for readers
    await manager.run([partition])
    assert partition.remote_start == 6 and partition.log_start_offset == 7


async def test_a_restart_rebuilds_the_remote_log_and_deletes_orphans(
    storage: StorageEngine,
) -> None:
    partition = tiered_partition(storage, TIERED)
    store = MemoryObjectStore()
    await RemoteLogManager(store, storage, 1, Clock()).run([partition])
    # an interrupted copy: data files without their manifest
    await store.put(partition_prefix("events", TOPIC_ID, 0) + f"{15:020d}-x.log", b"torn")
    fresh = RemoteLogManager(store, storage, 1, Clock())
    forgotten = tiered_partition(MemoryEngine(), TIERED, segments=1)  # a restarted broker's
    forgotten.topic_id = TOPIC_ID
    await fresh.remote_log(forgotten)  # (a fetch's: it deletes nothing, a read must not wait)
    assert (forgotten.remote_start, forgotten.remote_end) == (0, 15)
    await fresh.run([forgotten])  # the orphans go with the next pass
    _found, orphans = await scan(store, partition_prefix("events", TOPIC_ID, 0))
    assert orphans == []


async def test_a_copy_cut_off_before_its_manifest_leaves_nothing_remote(
    storage: StorageEngine,
) -> None:
    partition = tiered_partition(storage, TIERED, segments=2)
    store = MemoryObjectStore()
    real_put = store.put

    async def refuse_manifests(key: str, data: bytes) -> None:
        if key.endswith(MANIFEST):
            raise ObjectStoreError("cut off", retriable=True)
        await real_put(key, data)

    store.put = refuse_manifests  # type: ignore[method-assign]
    manager = RemoteLogManager(store, storage, 1, Clock())
    await manager.run([partition])
    assert partition.remote_start is None and len(partition.segments) == 2
    assert manager.stats.copy_errors == 1
    store.put = real_put  # type: ignore[method-assign]
    restarted = RemoteLogManager(store, storage, 1, Clock())
    await restarted.run([partition])  # the leftovers deleted, the segment copied again
    found, orphans = await scan(store, partition_prefix("events", TOPIC_ID, 0))
    assert [s.base_offset for s in found] == [0] and orphans == []


async def test_topic_deletion_deletes_every_object(storage: StorageEngine) -> None:
    partition = tiered_partition(storage, TIERED)
    store = MemoryObjectStore()
    manager = RemoteLogManager(store, storage, 1, Clock())
    await manager.run([partition])
    assert await manager.topic_deleted("events", TOPIC_ID) > 0
    assert await store.list("") == []


def append(partition: Partition, count: int, producer_id: int = -1, sequence: int = 0) -> None:
    """A batch of `count` records, transactional when it has a producer id."""
    batch = build_batch(
        [(None, b"v")] * count, attributes=TRANSACTIONAL_BIT if producer_id >= 0 else 0,
        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence if producer_id >= 0 else -1,
    )  # fmt: skip
    partition.append(bytearray(batch), validate_produced_batch(batch), NOW)
    partition.advance_high_watermark(partition.log_end_offset)


def abort(partition: Partition, producer_id: int) -> None:
    partition.write_marker(producer_id, 0, False, 0, NOW, False)
    partition.advance_high_watermark(partition.log_end_offset)


async def test_read_committed_learns_of_an_abort_indexed_in_a_later_segment(
    storage: StorageEngine,
) -> None:
    """A transaction is indexed by the segment of its abort marker: a read of an earlier
    segment holding its records must still hide them, whether that marker's segment is
    remote or still local."""
    partition = Partition(storage, "events", 0, TOPIC_ID, lambda: TIERED)
    partition.load(NOW)
    append(partition, 3)  # 0-2
    append(partition, 3, producer_id=77)  # 3-5: a transaction's first records...
    partition.roll(NOW)
    append(partition, 3, producer_id=77, sequence=3)  # 6-8
    partition.roll(NOW)
    append(partition, 3, producer_id=77, sequence=6)  # 9-11
    abort(partition, 77)  # 12: ...aborted two segments later
    append(partition, 3, producer_id=88)  # 13-15: another one...
    partition.roll(NOW)
    append(partition, 3)  # 16-18
    abort(partition, 88)  # 19: ...aborted in the active segment, never copied
    manager = RemoteLogManager(MemoryObjectStore(), storage, 1, Clock())
    await manager.run([partition])
    assert (partition.remote_end, partition.local_log_start_offset) == (16, 16)
    first = AbortedTxn(77, 3, 12, 13)
    second = AbortedTxn(88, 13, 19, 20)
    for offset, wanted in [(0, [first]), (6, [first]), (9, [first, second])]:
        data, aborted = await manager.read(partition, offset, 10**6, 20, True)
        assert data and aborted == wanted, offset
    # what read_uncommitted reads is not told about aborts
    assert (await manager.read(partition, 0, 10**6, 20, False))[1] is None


async def test_segments_above_the_last_stable_offset_wait(storage: StorageEngine) -> None:
    partition = tiered_partition(storage, TIERED)
    partition.high_watermark = 7  # (a follower behind: nothing at or past 7 is visible)
    manager = RemoteLogManager(MemoryObjectStore(), storage, 1, Clock())
    await manager.run([partition])
    assert partition.remote_end == 6


async def test_timestamp_lookups_reach_the_tiered_segments(storage: StorageEngine) -> None:
    partition = tiered_partition(storage, TIERED)  # batch i has timestamp (i + 1) * 1000
    manager = RemoteLogManager(MemoryObjectStore(), storage, 1, Clock())
    await manager.run([partition])
    assert await manager.offset_for_timestamp(partition, 0) == (0, 1000)
    assert await manager.offset_for_timestamp(partition, 2500) == (6, 3000)
    assert await manager.offset_for_timestamp(partition, 5001) is None  # local: 15.. at 6000
    partition.delete_records(7, NOW)
    assert await manager.offset_for_timestamp(partition, 0) == (7, 3000)


async def test_earliest_pending_upload(storage: StorageEngine) -> None:
    partition = tiered_partition(storage, TIERED)
    assert lookup(partition, EARLIEST_PENDING_UPLOAD, 0)[0] == 0  # tiered, nothing copied
    await RemoteLogManager(MemoryObjectStore(), storage, 1, Clock()).run([partition])
    assert lookup(partition, EARLIEST_PENDING_UPLOAD, 0)[0] == 15
    local = tiered_partition(MemoryEngine(), LogConfig())
    assert lookup(local, EARLIEST_PENDING_UPLOAD, 0)[0] == -1
    assert lookup(local, LATEST_TIERED, 0)[0] == -1
    assert lookup(local, EARLIEST_LOCAL, 0)[0] == 0


async def test_sequential_remote_reads_are_read_ahead_and_the_cache_stays_bounded(
    storage: StorageEngine,
) -> None:
    partition = Partition(storage, "events", 0, TOPIC_ID, lambda: TIERED)
    partition.load(NOW)
    for i in range(60):  # three segments of 20 batches
        if i and i % 20 == 0:
            partition.roll(NOW)
        batch = build_batch([(None, b"w%d" % i)], timestamp_ms=1000)
        partition.append(bytearray(batch), validate_produced_batch(batch), NOW)
    partition.advance_high_watermark(partition.log_end_offset)
    manager = RemoteLogManager(MemoryObjectStore(), storage, 1, Clock())
    await manager.run([partition])
    reader = manager.reader
    reader.chunk_bytes = 128  # a batch here is ~100 bytes: a few chunks per segment
    reader.cache_bytes = 1024
    offset = 0
    while offset < partition.local_log_start_offset:
        data, _ = await manager.read(partition, offset, 100, partition.high_watermark, False)
        offset = values(data)[-1][0] + 1
        await asyncio.sleep(0)  # (the read-ahead runs)
    assert reader.cache_hits > 0
    assert reader._cached <= reader.cache_bytes
    assert sum(len(c) for c in reader._chunks.values()) == reader._cached


async def test_turning_remote_storage_off_with_delete_on_disable_deletes_the_remote_part(
    storage: StorageEngine,
) -> None:
    config = TIERED
    partition = Partition(storage, "events", 0, TOPIC_ID, lambda: config)
    partition.load(NOW)
    for i in range(4):
        if i:
            partition.roll(NOW)
        batch = build_batch([(None, b"x%d" % i)], timestamp_ms=1000)
        partition.append(bytearray(batch), validate_produced_batch(batch), NOW)
    partition.advance_high_watermark(partition.log_end_offset)
    store = MemoryObjectStore()
    manager = RemoteLogManager(store, storage, 1, Clock())
    await manager.run([partition])
    assert partition.log_start_offset == 0 and partition.local_log_start_offset == 3
    config = LogConfig(remote_delete_on_disable=True)  # remote.storage.enable=false
    await manager.run([partition])
    assert await store.list("") == []
    assert partition.remote_start is None and partition.log_start_offset == 3


async def test_every_copied_segment_carries_the_producer_snapshot_at_its_end(
    storage: StorageEngine,
) -> None:
    """A tiered topic keeps a producer snapshot per local segment end (not only the last
    two), so each copy has the one its segment ends with."""
    partition = tiered_partition(storage, TIERED)
    store = MemoryObjectStore()
    await RemoteLogManager(store, storage, 1, Clock()).run([partition])
    found, _orphans = await scan(store, partition_prefix("events", TOPIC_ID, 0))
    assert len(found) == 5 and all(".snapshot" in s.files for s in found)
    # those of segments no longer local went with them (the last two always stay)
    snapshots = [n for n in storage.list_dir("events-0") if n.endswith(".snapshot")]
    assert sorted(int(n.split(".")[0]) for n in snapshots) == [12, 15]


# --- object store failures --------------------------------------------------------------------


class FlakyStore(MemoryObjectStore):
    """Fails the calls `fails(method, key)` picks; with `done_anyway` a failed put is done
    first (the store did it, the client heard it failed)."""

    def __init__(self) -> None:
        super().__init__()
        self.fails: Callable[[str, str], bool] = lambda method, key: False
        self.done_anyway = False

    def _fault(self, method: str, key: str) -> None:
        if self.fails(method, key):
            raise ObjectStoreError(f"500 InternalError: {method} {key}", retriable=True)

    async def put(self, key: str, data: bytes) -> None:
        if self.done_anyway:
            await super().put(key, data)
        self._fault("put", key)
        await super().put(key, data)

    async def put_file(self, key: str, path: Path) -> None:
        self._fault("put", key)
        await super().put_file(key, path)

    async def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._fault("delete", key)
        await super().delete(keys)


async def remote_ranges(store: MemoryObjectStore) -> tuple[list[tuple[int, int]], list[str]]:
    found, orphans = await scan(store, partition_prefix("events", TOPIC_ID, 0))
    return sorted((s.base_offset, s.end_offset) for s in found), orphans


async def test_a_manifest_put_done_but_reported_failed_is_not_copied_twice(
    storage: StorageEngine,
) -> None:
    partition = tiered_partition(storage, TIERED, segments=3)
    store = FlakyStore()
    store.done_anyway = True
    failed: list[str] = []

    def first_manifest(method: str, key: str) -> bool:
        if key.endswith(MANIFEST) and not failed:
            failed.append(key)
            return True
        return False

    store.fails = first_manifest
    manager = RemoteLogManager(store, storage, 1, Clock())
    await manager.run([partition])  # the manifest is in the store, the copy failed
    assert failed and partition.remote_start is None and len(partition.segments) == 3
    await manager.run([partition])  # copied again, under a new id
    assert await remote_ranges(store) == ([(0, 2), (3, 5)], [])
    assert partition.remote_end == 6 and manager.stats.copy_errors == 1


async def test_a_failed_copy_leaves_no_object_behind_once_the_store_answers(
    storage: StorageEngine,
) -> None:
    partition = tiered_partition(storage, TIERED, segments=3)
    store = FlakyStore()
    down = {"delete": True, "index": True}
    store.fails = lambda method, key: (
        (down["index"] and method == "put" and key.endswith(".index"))
        or (down["delete"] and method == "delete")
    )
    manager = RemoteLogManager(store, storage, 1, Clock())
    await manager.run([partition])  # the .log is up, the .index failed, no delete works
    assert partition.remote_start is None and len(partition.segments) == 3
    assert (await remote_ranges(store))[1] != []  # what the failed copy put
    down["delete"] = False
    await manager.run([partition])  # leftovers deleted first; the copy fails again
    assert await remote_ranges(store) == ([], [])
    down["index"] = False
    await manager.run([partition])
    assert await remote_ranges(store) == ([(0, 2), (3, 5)], [])
    assert [s.base_offset for s in partition.segments] == [6]


async def test_a_remote_delete_cut_after_its_manifest_is_finished_by_a_later_pass(
    storage: StorageEngine,
) -> None:
    config = LogConfig(remote_storage=True, retention_ms=10_000, local_retention_ms=-1,
                       local_retention_bytes=1)  # fmt: skip
    partition = tiered_partition(storage, config)
    clock = Clock()
    clock.now = 3_500
    store = FlakyStore()
    manager = RemoteLogManager(store, storage, 1, clock)
    await manager.run([partition])
    clock.now = 11_500  # the first segment (max timestamp 1000) is past retention
    store.fails = lambda method, key: method == "delete" and not key.endswith(MANIFEST)
    await manager.run([partition])
    assert partition.remote_start == 3 and manager.stats.delete_errors == 1
    assert (await remote_ranges(store))[1] != []  # the data files of segment 0
    store.fails = lambda method, key: False
    await manager.run([partition])
    assert await remote_ranges(store) == ([(3, 5), (6, 8), (9, 11), (12, 14)], [])


async def test_a_failure_that_goes_on_is_logged_when_it_begins_and_ends(
    storage: StorageEngine, caplog: pytest.LogCaptureFixture
) -> None:
    partition = tiered_partition(storage, TIERED)
    store = MemoryObjectStore()
    store.unavailable = ObjectStoreError("connection refused", retriable=True)
    clock = Clock()
    manager = RemoteLogManager(store, storage, 1, clock)
    caplog.set_level(logging.INFO, "lockgate.tiered")
    for _ in range(20):  # passes 200 ms apart
        await manager.run([partition])
        clock.now += 200
    clock.now += REPEAT_LOG_MS
    await manager.run([partition])
    store.unavailable = None
    await manager.run([partition])
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (
        "events-0: tiered storage pass failed (retried until the object store answers): "
        "connection refused"
    )
    assert lines[1].startswith("events-0: tiered storage pass still failing (21 times in 64 s)")
    assert all("copied segment" in line for line in lines[2:-1]) and len(lines) == 8
    assert lines[-1] == "events-0: tiered storage pass works again (after 21 failures in 64 s)"
    assert not any(r.exc_info for r in caplog.records)


async def test_list_offsets_reads_the_remote_log_of_a_restarted_broker_first(
    storage: StorageEngine,
) -> None:
    """After a restart, until a pass or a fetch reads the manifests, the partition knows only
    its local log: the earliest offset (-2) must still be the remote log's start, not the
    local one, or a consumer reset to the earliest skips the remote history."""
    partition = tiered_partition(storage, TIERED)
    store = MemoryObjectStore()
    await RemoteLogManager(store, storage, 1, Clock()).run([partition])
    fresh = RemoteLogManager(store, storage, 1, Clock())
    restarted = Partition(storage, "events", 0, TOPIC_ID, lambda: TIERED)
    restarted.load(NOW)
    assert fresh.unknown(restarted) and lookup(restarted, EARLIEST, 0)[0] == 15
    await remote_extent_known(fresh, restarted, EARLIEST_LOCAL)  # (needs no remote log)
    assert fresh.unknown(restarted)
    await remote_extent_known(fresh, restarted, EARLIEST)
    assert not fresh.unknown(restarted)
    assert lookup(restarted, EARLIEST, 0)[0] == 0
    assert lookup(restarted, LATEST_TIERED, 0)[0] == 14
    store.unavailable = ObjectStoreError("connection refused", retriable=True)
    with pytest.raises(KafkaProtocolError) as failed:
        await remote_extent_known(RemoteLogManager(store, storage, 1, Clock()), restarted, -6)
    assert failed.value.code == ErrorCode.kafka_storage_error


async def test_local_segments_go_as_each_copy_lands(storage: StorageEngine) -> None:
    """A backlog of rolled segments: each local one goes once its own copy is done, not
    after the last copy of the pass (a producer faster than the store would otherwise hold
    the whole backlog on disk)."""
    partition = tiered_partition(storage, TIERED)
    store = MemoryObjectStore()
    seen: list[int] = []
    real_put = store.put

    async def watching(key: str, data: bytes) -> None:
        if key.endswith(".manifest"):
            seen.append(len(partition.segments))
        await real_put(key, data)

    store.put = watching  # type: ignore[method-assign]
    await RemoteLogManager(store, storage, 1, Clock()).run([partition])
    # before each manifest: the segments copied so far are gone already
    assert seen == [6, 5, 4, 3, 2]
