"""Coordinator snapshots: a partition's image follows every append (latest committed value per
key, open transactions' records until their marker); a clean stop writes one per internal
partition and the next start replays nothing; a snapshot plus the log after it gives exactly
the state of a full replay; damaged, too old, past-the-end snapshots are ignored."""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import replace
from typing import Any

from lockgate.config.log import LogConfig
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.group.records import (
    CommittedOffset,
    GroupRecord,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from lockgate.coordinator.snapshots import PartitionImage, read_latest, write
from lockgate.coordinator.txn.log import encode_key, encode_value
from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.log.partition import Partition
from lockgate.protocol.records import (
    TRANSACTIONAL_BIT,
    build_batch,
    parse_header,
    validate_produced_batch,
)
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.internal import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

SETTINGS = {
    "listeners": "127.0.0.1:0",
    "lockgate.durability": "page-cache",
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "lockgate.coordinator.snapshot.interval.ms": "3600000",  # written by hand or at stop
}
NOW = 1_800_000_000_000


def append(
    partition: Partition, records: list[tuple[bytes | None, bytes | None]], **batch: Any
) -> None:
    data = build_batch(records, timestamp_ms=1, **batch)
    header = validate_produced_batch(data)
    partition.append(bytearray(data), header, 1, internal=header.producer_id >= 0)


def history(broker: Broker, start: int, count: int) -> None:
    """Transaction states, offset commits (plain and transactional, committed, aborted and
    left open) and deletions, written as the coordinators write them."""
    txn_log = broker.topics.get(TRANSACTION_STATE_TOPIC, 0)
    offsets = broker.topics.get(CONSUMER_OFFSETS_TOPIC, 0)
    assert txn_log is not None and offsets is not None
    for n in range(start, start + count):
        tid = f"id-{n % 7}"
        state = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)[n % 3]
        meta = TxnMetadata(tid, n % 7, n % 100, 60_000, state, frozenset({("t", n % 2)}), 1, 1)
        append(txn_log, [(encode_key(tid), encode_value(meta))])
        if n % 11 == 0:
            append(txn_log, [(encode_key(f"id-{n % 5}"), None)])  # an id expires
        key = offset_key(f"group-{n % 4}", "t", n % 3)
        append(offsets, [(key, offset_value(CommittedOffset(n, -1, "", 1)))])
        producer = 1_000 + n % 3
        txn_key = offset_key(f"group-{n % 4}", "u", n % 2)
        append(
            offsets,
            [(txn_key, offset_value(CommittedOffset(n, -1, "txn", 1)))],
            attributes=TRANSACTIONAL_BIT,
            producer_id=producer,
            producer_epoch=0,
        )
        if n % 3 != 2:  # producer 1002's transaction stays open
            offsets.write_marker(producer, 0, n % 3 == 0, 0, 1, False)
        if n % 13 == 0:
            append(offsets, [(offset_key(f"group-{n % 4}", "t", 0), None)])


def state(broker: Broker) -> tuple[Any, ...]:
    """Both coordinators' state (a transaction left preparing is completed at load, at the
    loading broker's time: that time is left out)."""
    groups = {g: dict(group.offsets) for g, group in broker.groups.groups.items() if group.offsets}
    txns = {t: replace(m, last_update_ms=0) for t, m in broker.transactions.txns.items()}
    return txns, groups, broker.groups.offsets.pending


async def started(engine: MemoryEngine, **changes: str) -> Broker:
    broker = Broker(BrokerConfig({**SETTINGS, **changes}), engine)
    await broker.start()
    while not (broker.transactions.loaded and broker.groups.loaded):
        await asyncio.sleep(0.001)
    return broker


def without_snapshots(engine: MemoryEngine) -> MemoryEngine:
    copy = MemoryEngine()
    copy.files = {
        p: bytearray(d) for p, d in engine.files.items() if not p.endswith(".coordinator")
    }
    copy.dirs = set(engine.dirs)
    return copy


def test_the_image_follows_commits_aborts_and_deletions() -> None:
    image = PartitionImage()
    partition = Partition(MemoryEngine(), "p", 0, uuid.UUID(int=1), LogConfig)
    partition.load(1)
    partition.append_listeners.append(image.apply)
    append(partition, [(b"a", b"1"), (b"b", b"1")])
    append(partition, [(b"a", b"2")], attributes=TRANSACTIONAL_BIT, producer_id=5, producer_epoch=0)
    append(partition, [(b"b", b"x")], attributes=TRANSACTIONAL_BIT, producer_id=6, producer_epoch=0)
    assert image.committed == {b"a": b"1", b"b": b"1"}
    partition.write_marker(5, 0, True, 0, 1, False)
    partition.write_marker(6, 0, False, 0, 1, False)
    append(partition, [(b"b", None)])
    append(partition, [(b"c", b"3")], attributes=TRANSACTIONAL_BIT, producer_id=7, producer_epoch=2)
    # a transactional batch of records without a key has nothing to replay: no entry (a
    # snapshot would hold an empty transaction of producer 8)
    append(partition, [(None, b"k")], attributes=TRANSACTIONAL_BIT, producer_id=8, producer_epoch=0)
    assert image.committed == {b"a": b"2"}
    assert image.pending == {7: (2, [(b"c", b"3")])}
    body = image.encode()
    headers = []
    position = 0
    while position < len(body):
        header = parse_header(body, position)
        headers.append((header.producer_id, header.is_transactional, header.record_count))
        position += header.size
    assert headers == [(-1, False, 1), (7, True, 1)]


async def test_a_clean_stop_writes_snapshots_and_the_next_start_replays_nothing() -> None:
    engine = MemoryEngine()
    broker = await started(engine)
    history(broker, 0, 300)
    await broker.stop()
    assert sum(p.endswith(".coordinator") for p in engine.files) == 2
    full = await started(without_snapshots(engine))
    again = await started(engine)
    assert again.transactions.runtime.replayed_batches == 0
    assert again.groups.runtime.replayed_batches == 0
    assert state(again) == state(full) and state(full)[0] and state(full)[1]
    await again.stop()
    await full.stop()


async def test_a_snapshot_plus_the_log_after_it_is_a_full_replay() -> None:
    engine = MemoryEngine()
    broker = await started(engine)
    history(broker, 0, 200)
    broker.snapshots.write_all()  # as the periodic writer would
    history(broker, 200, 150)
    # a crash: no stop, so no newer snapshot; the next broker reads the same files
    resumed = await started(engine)
    assert 0 < resumed.groups.runtime.replayed_batches < 150 * 3
    assert 0 < resumed.transactions.runtime.replayed_batches < 150 * 2
    full = await started(without_snapshots(engine))
    assert full.groups.runtime.replayed_batches > 350
    assert state(resumed) == state(full)
    assert state(resumed)[2]  # producer 1002's transactional offsets are still pending
    await resumed.stop()
    await full.stop()


async def test_unusable_snapshots_are_ignored() -> None:
    engine = MemoryEngine()
    broker = await started(engine)
    history(broker, 0, 50)
    await broker.stop()
    partition = Partition(engine, TRANSACTION_STATE_TOPIC, 0, uuid.UUID(int=1), LogConfig)
    partition.load(1)
    [path] = [p for p in engine.files if p.startswith(f"{TRANSACTION_STATE_TOPIC}-0/")
              and p.endswith(".coordinator")]  # fmt: skip
    good = bytes(engine.files[path])
    end = partition.log_end_offset
    day = LogConfig().delete_retention_ms
    taken = int.from_bytes(good[14:22], "big")
    assert read_latest(partition, taken + day, day) is not None
    # older than delete.retention.ms but at the log end (an idle partition): still good
    assert read_latest(partition, taken + day + 1, day) is not None
    append(partition, [(b"k", b"v")])
    assert read_latest(partition, taken + day + 1, day) is None  # too old: compaction may
    engine.files[path] = bytearray(good)  # have removed tombstones after it
    engine.files[path][-1] ^= 1
    assert read_latest(partition, taken, day) is None  # damaged
    assert path not in engine.files  # and removed
    write(engine, partition, end + 5, taken, good[26:])
    assert read_latest(partition, taken, day) is None  # past the log end (a cut tail)


async def test_a_periodic_round_copies_each_image_just_before_its_own_write() -> None:
    """The round takes each partition's log end and image copy together, one partition after
    the other (not all copies first: a copy holds the event loop): what is appended while an
    earlier partition's snapshot is written is in a later partition's snapshot."""
    engine = MemoryEngine()
    broker = await started(engine)
    history(broker, 0, 40)
    snapshots = broker.snapshots
    first_started, release = threading.Event(), threading.Event()
    write_one = snapshots._write

    def held_write(partition: Partition, offset: int, image: PartitionImage) -> None:
        if not first_started.is_set():
            first_started.set()
            release.wait(10)
        write_one(partition, offset, image)

    snapshots._write = held_write  # type: ignore[method-assign]
    writing = asyncio.create_task(snapshots.write_due())
    assert await asyncio.to_thread(first_started.wait, 10)
    history(broker, 40, 20)  # both partitions, while the first one's snapshot is written
    release.set()
    await writing
    ends = {}
    for name in (TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC):
        partition = broker.topics.get(name, 0)
        assert partition is not None
        [written] = [int(p.split("/")[-1].split(".")[0]) for p in engine.files
                     if p.startswith(f"{name}-0/") and p.endswith(".coordinator")]  # fmt: skip
        ends[name] = (written, partition.log_end_offset)
    assert sorted(written == end for written, end in ends.values()) == [False, True], ends
    resumed = await started(engine)  # (a crash: no stop) from those snapshots
    full = await started(without_snapshots(engine))
    assert state(resumed) == state(full)
    await resumed.stop()
    await full.stop()


async def test_a_group_tombstone_leaves_the_groups_offsets_in_a_replay_as_in_a_snapshot() -> None:
    """As Kafka, where offsets are records apart from the group's: a classic group's tombstone
    ends the group, not its offsets (a snapshot, which holds the latest record of each key,
    replays the offset and no tombstone: a full replay must come to the same)."""
    engine = MemoryEngine()
    broker = await started(engine)
    offsets = broker.topics.get(CONSUMER_OFFSETS_TOPIC, 0)
    assert offsets is not None
    group = GroupRecord("consumer", 3, "range", None, 1, ())
    append(offsets, [(group_key("g"), group_value(group))])
    append(offsets, [(offset_key("g", "t", 0), offset_value(CommittedOffset(7, -1, "", 1)))])
    append(offsets, [(group_key("g"), None)])
    await broker.stop()
    resumed = await started(engine)
    full = await started(without_snapshots(engine))
    assert state(resumed) == state(full)
    assert list(state(full)[1]["g"]) == [("t", 0)]
    for each in (resumed, full):
        assert each.groups.groups["g"].generation == 0  # the classic group itself is gone
        await each.stop()
