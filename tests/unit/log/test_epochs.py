"""Leader epoch history: persistence in the leader-epoch-checkpoint layout, truncation after a
cut tail, OffsetForLeaderEpoch lookups, and damaged checkpoints."""

from __future__ import annotations

import errno
import uuid

import pytest

from lockgate.config.log import LogConfig
from lockgate.log.epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache
from lockgate.log.partition import Partition
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.storage.errors import StorageError
from lockgate.storage.memory import MemoryEngine, MemoryFaults

PATH = "t-0/leader-epoch-checkpoint"


def cache_with(*entries: tuple[int, int]) -> tuple[LeaderEpochCache, MemoryEngine]:
    storage = MemoryEngine()
    cache = LeaderEpochCache(storage, PATH)
    for epoch, start in entries:
        cache.begin_epoch(epoch, start)
    return cache, storage


def test_empty_history() -> None:
    cache, storage = cache_with()
    assert cache.latest_epoch == UNDEFINED_EPOCH
    assert cache.end_offset_for(0, 10) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert storage.read_all(PATH) is None  # nothing written until an epoch begins


def test_begin_epoch_persists_kafka_layout() -> None:
    cache, storage = cache_with((0, 0), (1, 10), (4, 25))
    assert cache.latest_epoch == 4
    assert storage.read_all(PATH) == b"0\n3\n0 0\n1 10\n4 25\n"
    reloaded = LeaderEpochCache(storage, PATH)
    assert reloaded.epochs == [0, 1, 4]
    assert reloaded.start_offsets == [0, 10, 25]


def test_epochs_must_grow() -> None:
    cache, _ = cache_with((3, 0))
    with pytest.raises(AssertionError):
        cache.begin_epoch(3, 5)
    with pytest.raises(AssertionError):
        cache.begin_epoch(2, 5)


def test_end_offset_for() -> None:
    cache, _ = cache_with((1, 0), (2, 10), (5, 30))
    log_end = 42
    assert cache.end_offset_for(0, log_end) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache.end_offset_for(1, log_end) == (1, 10)
    assert cache.end_offset_for(2, log_end) == (2, 30)
    assert cache.end_offset_for(3, log_end) == (2, 30)  # never led: the epoch before it
    assert cache.end_offset_for(4, log_end) == (2, 30)
    assert cache.end_offset_for(5, log_end) == (5, log_end)  # current epoch: the log end


def test_truncate_after_drops_epochs_past_the_log_end() -> None:
    cache, storage = cache_with((0, 0), (1, 10), (2, 20), (3, 30))
    cache.truncate_after(30)  # the last epoch starts exactly at the end: kept
    assert cache.epochs == [0, 1, 2, 3]
    cache.truncate_after(15)
    assert cache.epochs == [0, 1]
    assert cache.start_offsets == [0, 10]
    assert storage.read_all(PATH) == b"0\n2\n0 0\n1 10\n"


def test_truncate_after_keeps_the_first_epoch_at_the_log_end() -> None:
    cache, storage = cache_with((2, 50), (3, 60))
    cache.truncate_after(5)
    assert cache.epochs == [2]
    assert cache.start_offsets == [5]
    assert LeaderEpochCache(storage, PATH).start_offsets == [5]


def test_truncate_after_with_nothing_to_do_does_not_rewrite() -> None:
    cache, storage = cache_with((0, 0))
    storage.files[PATH] = bytearray(b"0\n1\n0 0\n")  # same content, different object
    before = storage.files[PATH]
    cache.truncate_after(100)
    assert storage.files[PATH] is before


def test_out_of_order_entries_are_skipped() -> None:
    storage = MemoryEngine()
    storage.write_atomic(PATH, b"0\n5\n0 0\n2 10\n1 20\n3 5\n4 30\n")
    cache = LeaderEpochCache(storage, PATH)
    assert cache.epochs == [0, 2, 4]
    assert cache.start_offsets == [0, 10, 30]


def test_count_shorter_than_the_entries_reads_only_count() -> None:
    storage = MemoryEngine()
    storage.write_atomic(PATH, b"0\n1\n0 0\n1 10\n")
    assert LeaderEpochCache(storage, PATH).epochs == [0]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\n",
        b"0",
        b"0\n",
        b"0\nthree\n0 0\n",
        b"0\n1\n",  # an announced entry is missing
        b"0\n1\n5\n",  # an entry with one number
        b"0\n1\n1 2 3\n",  # an entry with three numbers
        b"0\n2\n0 0\n",  # the second entry is an empty line
        b"0\n1\nzero zero\n",
        b"0\n1\n0 0x10\n",
        b"0\n1\n\xff\xfe \x00\n",
        b"\x00" * 64,
        bytes(range(256)),
        b"0\n1\n" + b"9" * 5000 + b" 0\n",  # beyond int() digit limits
        b"0\n-3\n0 0\n",
    ],
)
def test_garbage_checkpoint_loads_as_an_empty_history(raw: bytes) -> None:
    storage = MemoryEngine()
    storage.write_atomic(PATH, raw)
    cache = LeaderEpochCache(storage, PATH)
    assert cache.epochs == [] or cache.epochs == [0]
    assert len(cache.epochs) == len(cache.start_offsets)
    cache.begin_epoch(cache.latest_epoch + 1, 7)
    # The next epoch is persisted in a sound file.
    assert LeaderEpochCache(storage, PATH).epochs == cache.epochs


def test_a_partition_opens_on_a_full_disk_and_appends_once_its_epoch_is_saved() -> None:
    """A broker restarting on a full disk: the new epoch cannot be persisted, yet the partition
    opens and serves reads; appends are refused (KAFKA_STORAGE_ERROR) until the epoch is on
    disk, so no batch is ever written under an unrecorded epoch."""
    faults = MemoryFaults()
    storage = MemoryEngine(faults)

    def opened() -> Partition:
        partition = Partition(storage, "t", 0, uuid.UUID(int=1), LogConfig)
        partition.load(1_000)
        return partition

    batch = build_batch([(None, b"v")])
    first = opened()
    first.append(bytearray(batch), validate_produced_batch(batch), 1_000)
    first.close()
    faults.atomic_errno = errno.ENOSPC
    partition = opened()
    assert partition.epochs.unsaved and partition.leader_epoch == 1
    assert partition.read(0, 1 << 20, partition.high_watermark)  # reads go on
    with pytest.raises(StorageError):
        partition.append(bytearray(batch), validate_produced_batch(batch), 1_000)
    assert partition.log_end_offset == 1
    faults.atomic_errno = None
    assert partition.append(bytearray(batch), validate_produced_batch(batch), 1_000)[0] == 1
    assert not partition.epochs.unsaved
    assert storage.read_all("t-0/leader-epoch-checkpoint") == b"0\n2\n0 0\n1 1\n"
