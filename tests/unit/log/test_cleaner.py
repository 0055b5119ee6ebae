"""Log compaction at the partition level: the latest record per key, tombstones and markers
with a KIP-534 delete horizon, aborted data, the producer's last batch, what may never be
cleaned (the active segment, past the last stable offset, younger than the compaction lag),
the dirty ratio and checkpoint, grouping, compression and a crash at every step of the swap.
Runs on both storage engines."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from lockgate.config.log import LogConfig
from lockgate.log import swap
from lockgate.log.cleaner import (
    CHECKPOINT_FILE,
    LogCleaner,
    execute,
    install,
    plan,
    read_checkpoint,
    still_planned,
)
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    COMPRESSION_CODECS,
    TRANSACTIONAL_BIT,
    build_batch,
    compress,
    encode_record,
    read_records,
    validate_produced_batch,
)
from lockgate.protocol.rewrite import DELETE_HORIZON_BIT
from lockgate.storage.engine import StorageEngine

DAY = 24 * 3600 * 1000
NOW = 10 * DAY
RETENTION = 1_000  # delete.retention.ms in these tests


def config(**changes: object) -> LogConfig:
    base: dict[str, object] = {
        "segment_bytes": 400,
        "compact": True,
        "delete_policy": False,
        "delete_retention_ms": RETENTION,
        "min_cleanable_dirty_ratio": 0.0,
        "retention_ms": -1,
    }
    base.update(changes)
    return LogConfig(**base)  # type: ignore[arg-type]


class Log:
    def __init__(self, storage: StorageEngine, settings: LogConfig | None = None) -> None:
        self.storage = storage
        self.config = settings or config()
        self.partition = self.reload()

    def reload(self) -> Partition:
        self.partition = Partition(self.storage, "kv", 0, uuid.UUID(int=1), lambda: self.config)
        self.partition.load(NOW)
        return self.partition

    def put(
        self,
        *pairs: tuple[bytes | None, bytes | None],
        producer: int = -1,
        sequence: int = -1,
        transactional: bool = False,
        codec: str = "none",
        timestamp: int = NOW - DAY,
    ) -> int:
        encoded = b"".join(encode_record(i, i, k, v) for i, (k, v) in enumerate(pairs))
        number = COMPRESSION_CODECS[codec]
        batch = build_batch(
            [],
            encoded=compress(number, encoded),
            record_count=len(pairs),
            attributes=number | (TRANSACTIONAL_BIT if transactional else 0),
            producer_id=producer,
            producer_epoch=0 if producer >= 0 else -1,
            base_sequence=sequence,
            timestamp_ms=timestamp,
            max_timestamp_ms=timestamp + len(pairs) - 1,
        )
        base, _ = self.partition.append(bytearray(batch), validate_produced_batch(batch), NOW)
        self.partition.advance_high_watermark(self.partition.log_end_offset)
        return base

    def marker(self, producer: int, commit: bool) -> int:
        offset = self.partition.write_marker(producer, 0, commit, 0, NOW, False)
        self.partition.advance_high_watermark(self.partition.log_end_offset)
        return offset

    def seal(self) -> None:
        """Rolls, so that everything written so far is cleanable."""
        self.partition.roll(NOW)

    def clean(self, now: int = NOW, map_entries: int = 1_000_000) -> None:
        checkpoint = read_checkpoint(self.partition)
        job = plan(self.partition, checkpoint, now, map_entries)
        assert job is not None
        result = execute(job)
        assert still_planned(result)
        install(result)

    def records(self) -> list[tuple[int, bytes | None, bytes | None]]:
        found = []
        for segment, position, header in self.partition.batches_from(0):
            if header.is_control:
                continue
            for record in read_records(segment.log.read(position, header.size)):
                found.append((record.offset, record.key, record.value))
        return found

    def headers(self) -> list[tuple[int, bool, int, int]]:
        """(base offset, control, record count, attributes) of every batch."""
        return [
            (h.base_offset, h.is_control, h.record_count, h.attributes)
            for _, _, h in self.partition.batches_from(0)
        ]


def test_keeps_the_latest_record_of_each_key_at_its_offset(storage: StorageEngine) -> None:
    log = Log(storage)
    for round_ in range(5):
        log.put((b"a", b"a%d" % round_), (b"b", b"b%d" % round_))
    log.put((b"c", b"c0"))
    log.seal()
    log.put((b"a", b"live"))  # in the active segment: never cleaned, not yet compared with
    log.clean()
    latest = [(8, b"a", b"a4"), (9, b"b", b"b4"), (10, b"c", b"c0"), (11, b"a", b"live")]
    assert log.records() == latest
    assert log.partition.log_start_offset == 0 and log.partition.log_end_offset == 12
    log.seal()
    log.clean()
    assert log.records() == latest[1:]
    assert log.reload().log_end_offset == 12
    assert log.records() == latest[1:]


def test_the_active_segment_and_data_past_the_last_stable_offset_stay(
    storage: StorageEngine,
) -> None:
    log = Log(storage)
    log.put((b"a", b"1"))
    log.put((b"a", b"2"), producer=7, sequence=0, transactional=True)  # open transaction
    log.seal()
    log.put((b"a", b"3"))
    log.seal()
    # the open transaction at offset 1 bounds the cleanable range: nothing can go
    assert plan(log.partition, 0, NOW, 100) is None
    log.marker(7, commit=True)
    log.seal()
    log.clean()
    assert [r[2] for r in log.records()] == [b"3"]


def test_segments_younger_than_the_compaction_lag_stay(storage: StorageEngine) -> None:
    log = Log(storage, config(min_compaction_lag_ms=DAY))
    log.put((b"a", b"old"), timestamp=NOW - 2 * DAY)
    log.seal()
    log.put((b"a", b"young"), timestamp=NOW - 1_000)
    log.seal()
    log.clean()
    # the young segment is not cleanable, so it is not in the map either: "old" stays
    assert [r[2] for r in log.records()] == [b"old", b"young"]
    log.clean(now=NOW + DAY)
    assert [r[2] for r in log.records()] == [b"young"]


def test_tombstones_get_a_delete_horizon_then_go(storage: StorageEngine) -> None:
    log = Log(storage)
    log.put((b"a", b"1"), (b"b", b"1"), timestamp=NOW - 5_000)
    log.put((b"a", None), timestamp=NOW - 4_000)
    log.seal()
    log.clean()
    assert log.records() == [(1, b"b", b"1"), (2, b"a", None)]
    tombstone = next(h for h in log.partition.batches_from(2) if h[2].base_offset == 2)[2]
    assert tombstone.attributes & DELETE_HORIZON_BIT
    assert tombstone.base_timestamp == NOW + RETENTION
    segment, position, header = next(iter(log.partition.batches_from(2)))
    # the record keeps its own timestamp: its delta is now relative to the horizon
    assert [r.timestamp for r in read_records(segment.log.read(position, header.size))] == [
        NOW - 4_000
    ]
    log.clean(now=NOW + RETENTION - 1)  # not yet
    assert (2, b"a", None) in log.records()
    log.clean(now=NOW + RETENTION)
    assert log.records() == [(1, b"b", b"1")]


def test_aborted_data_goes_and_its_marker_after_the_horizon(storage: StorageEngine) -> None:
    log = Log(storage)
    log.put((b"a", b"kept"))
    log.put((b"a", b"aborted"), producer=7, sequence=0, transactional=True)
    abort = log.marker(7, commit=False)
    log.put((b"x", b"after"), producer=8, sequence=0)
    log.seal()
    log.clean()
    # the aborted value is not the key's latest: the committed "kept" survives
    assert [(k, v) for _, k, v in log.records() if k != b"x"] == [(b"a", b"kept")]
    # the producer's last batch stays, emptied; the marker stays while aborted data was seen
    assert (1, False, 0, TRANSACTIONAL_BIT) in log.headers()
    assert any(h[0] == abort and h[1] for h in log.headers())
    assert [t.last_offset for t in log.partition.aborted.entries] == [abort]
    log.clean()  # the emptied batch is aborted data still: the marker stays as it is
    assert not next(h for h in log.headers() if h[0] == abort)[3] & DELETE_HORIZON_BIT
    log.put((b"y", b"1"), producer=7, sequence=1)  # 7's last batch is now another one
    log.seal()
    log.clean()  # the emptied batch goes; the marker stays as the pass met aborted data
    log.clean()  # no aborted data left: the marker gets its horizon
    marker = next(h for h in log.headers() if h[0] == abort)
    assert marker[3] & DELETE_HORIZON_BIT
    log.clean(now=NOW + RETENTION)
    assert not any(h[1] for h in log.headers())
    assert log.partition.aborted.entries == []
    assert log.reload().aborted.entries == []


def test_a_committed_marker_stays_while_its_data_does(storage: StorageEngine) -> None:
    log = Log(storage)
    log.put((b"a", b"1"), producer=7, sequence=0, transactional=True)
    commit = log.marker(7, commit=True)
    log.seal()
    log.clean(now=NOW + 10 * RETENTION)
    assert any(h[0] == commit for h in log.headers())
    log.put((b"a", b"2"), producer=7, sequence=1)
    log.seal()
    log.clean()  # the transaction's record is superseded and its batch goes
    log.clean()  # the marker is due a horizon now
    log.clean(now=NOW + RETENTION)
    assert not any(h[0] == commit for h in log.headers())
    assert [r[2] for r in log.records()] == [b"2"]


def test_the_producers_last_batch_keeps_its_sequence_across_a_replay(
    storage: StorageEngine,
) -> None:
    log = Log(storage)
    log.put((b"a", b"1"), producer=9, sequence=0)
    log.put((b"a", b"2"), producer=9, sequence=1)
    log.put((b"a", b"3"))  # someone else's newer value
    log.seal()
    log.clean()
    assert log.headers()[:2] == [(1, False, 0, 0), (2, False, 1, 0)]
    for name in storage.list_dir("kv-0"):
        if name.endswith(".snapshot"):  # a replay of the log alone must know producer 9
            storage.remove(f"kv-0/{name}")
    partition = log.reload()
    retry = build_batch([(b"a", b"2")], producer_id=9, producer_epoch=0, base_sequence=1)
    assert partition.append(bytearray(retry), validate_produced_batch(retry), NOW)[0] == 1
    gap = build_batch([(b"a", b"9")], producer_id=9, producer_epoch=0, base_sequence=5)
    with pytest.raises(KafkaProtocolError) as raised:
        partition.append(bytearray(gap), validate_produced_batch(gap), NOW)
    assert raised.value.code == ErrorCode.out_of_order_sequence_number


@pytest.mark.parametrize("codec", ["gzip", "zstd", "lz4", "snappy"])
def test_compressed_batches_are_rewritten_with_their_codec(
    storage: StorageEngine, codec: str
) -> None:
    log = Log(storage)
    log.put((b"a", b"1"), (b"b", b"1"), (b"c", b"1"), codec=codec)
    log.put((b"b", b"2"))
    log.seal()
    log.clean()
    assert log.records() == [(0, b"a", b"1"), (2, b"c", b"1"), (3, b"b", b"2")]
    first = log.partition.batches_from(0)[0][2]
    assert first.compression == COMPRESSION_CODECS[codec]
    assert first.last_offset_delta == 2 and first.record_count == 2


def test_the_dirty_ratio_and_checkpoint_choose_what_is_cleaned(storage: StorageEngine) -> None:
    log = Log(storage, config(min_cleanable_dirty_ratio=0.5))
    for i in range(20):
        log.put((b"k%d" % (i % 3), b"x" * 40))
    log.seal()
    cleaner = LogCleaner(lambda: [log.partition], lambda: NOW, 0.01, 1_000)
    assert asyncio.run(cleaner.clean_once()) is not None
    checkpoint = read_checkpoint(log.partition)
    assert checkpoint == log.partition.segments[-1].base_offset
    assert storage.read_all(f"kv-0/{CHECKPOINT_FILE}") == b"%d\n" % checkpoint
    assert len(log.records()) == 3
    assert asyncio.run(cleaner.clean_once()) is None  # nothing dirty
    log.put((b"k0", b"y"))
    log.seal()
    # one small new segment against the cleaned ones: below the ratio of 0.5
    fresh = LogCleaner(lambda: [log.partition], lambda: NOW, 0.01, 1_000)
    assert asyncio.run(fresh.clean_once()) is None


def test_small_segments_are_merged(storage: StorageEngine) -> None:
    log = Log(storage, config(segment_bytes=300))
    for i in range(40):
        log.put((b"k%d" % (i % 4), b"v%d" % i))
    log.seal()
    before = len(log.partition.segments)
    log.clean()  # groups by the sizes before cleaning (as Kafka): the next pass merges
    log.clean()
    assert len(log.partition.segments) == 2 < before
    assert sorted(v for _, _, v in log.records() if v) == [b"v36", b"v37", b"v38", b"v39"]
    assert log.reload().log_end_offset == 40


def test_a_full_offset_map_stops_at_a_segment_boundary(storage: StorageEngine) -> None:
    log = Log(storage, config(segment_bytes=150))
    for i in range(12):
        log.put((b"k%d" % i, b"v"))
    log.seal()
    log.clean(map_entries=2)
    checkpoint = read_checkpoint(log.partition)
    assert 0 < checkpoint < 12
    assert any(s.base_offset == checkpoint for s in log.partition.segments)


def test_retention_and_deleterecords_wait_while_cleaning(storage: StorageEngine) -> None:
    log = Log(storage, config(delete_policy=True, retention_ms=1))
    log.put((b"a", b"1"))
    log.seal()
    log.put((b"a", b"2"))
    log.seal()
    job = plan(log.partition, 0, NOW, 100)
    assert job is not None
    log.partition.cleaning = True
    result = execute(job)
    assert log.partition.apply_retention(NOW) == 0
    log.partition.delete_records(1, NOW)
    assert log.partition.segments[0].base_offset == 0  # deferred, but the start moved
    assert log.partition.log_start_offset == 1
    log.partition.cleaning = False
    log.partition.delete_segments_below_start(NOW)
    assert log.partition.segments[0].base_offset == 1
    assert not still_planned(result)  # planned segments are gone: no swap


def test_the_cleaner_skips_partitions_being_replayed(storage: StorageEngine) -> None:
    log = Log(storage)
    log.put((b"a", b"1"))
    log.put((b"a", b"2"))
    log.seal()
    cleaner = LogCleaner(lambda: [log.partition], lambda: NOW, 0.01, 10)
    log.partition.scans = 1
    assert asyncio.run(cleaner.clean_once()) is None
    log.partition.scans = 0
    assert asyncio.run(cleaner.clean_once()) is not None


@pytest.mark.parametrize("crash_after", ["written", "committed", "half-renamed"])
def test_a_crash_during_the_swap_leaves_the_old_or_the_new_log(
    storage: StorageEngine, crash_after: str
) -> None:
    log = Log(storage, config(segment_bytes=200))
    for i in range(12):
        log.put((b"k%d" % (i % 2), b"v%d" % i))
    log.seal()
    job = plan(log.partition, 0, NOW, 100)
    assert job is not None
    result = execute(job)
    groups = [
        (o.segment.base_offset if o.segment else -1, [s.base_offset for s in o.group])
        for o in result.outputs
    ]
    for segment in log.partition.segments:
        segment.close()  # the process dies: its handles go
    if crash_after != "written":
        text = "".join(f"{new} {' '.join(map(str, old))}\n" for new, old in groups)
        storage.write_atomic(f"kv-0/{swap.MANIFEST}", text.encode())
    if crash_after == "half-renamed":
        new, old = groups[0]
        for base in old[1:]:
            for path in log.partition.segments[0].paths():
                storage.remove(path.replace(f"{0:020d}", f"{base:020d}"))
        stem = f"kv-0/{new:020d}"
        storage.rename(stem + ".log" + swap.CLEANED, stem + ".log")
    log.reload()
    assert not any(n.endswith(swap.CLEANED) or n == swap.MANIFEST for n in storage.list_dir("kv-0"))
    values = [r[2] for r in log.records()]
    if crash_after == "written":
        assert len(values) == 12
    else:
        assert values == [b"v10", b"v11"]
    assert log.partition.log_end_offset == 12


def test_dirty_records_older_than_the_max_compaction_lag_are_cleaned_below_the_ratio(
    storage: StorageEngine,
) -> None:
    log = Log(storage, config(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=DAY))
    for i in range(20):
        log.put((b"k%d" % (i % 3), b"x" * 40))
    log.seal()
    cleaner = LogCleaner(lambda: [log.partition], lambda: NOW, 0.01, 1_000)
    assert asyncio.run(cleaner.clean_once()) is not None  # all dirty: ratio 1.0
    # a small dirty segment written now: below the ratio, and younger than the max lag
    log.put((b"k0", b"fresh"), timestamp=NOW)
    log.seal()
    assert asyncio.run(cleaner.clean_once()) is None
    # one whose first batch is older than the max lag is cleaned whatever the ratio
    log.put((b"k1", b"old"), timestamp=NOW - 2 * DAY)
    log.seal()
    assert asyncio.run(cleaner.clean_once()) is not None
    assert sorted(value or b"" for _, _, value in log.records()) == [b"fresh", b"old", b"x" * 40]


def test_without_a_max_compaction_lag_a_low_ratio_waits(storage: StorageEngine) -> None:
    log = Log(storage, config(min_cleanable_dirty_ratio=0.9))
    for i in range(20):
        log.put((b"k%d" % (i % 3), b"x" * 40))
    log.seal()
    cleaner = LogCleaner(lambda: [log.partition], lambda: NOW, 0.01, 1_000)
    assert asyncio.run(cleaner.clean_once()) is not None
    log.put((b"k1", b"old"), timestamp=NOW - 2 * DAY)
    log.seal()
    assert asyncio.run(cleaner.clean_once()) is None
