"""Tiered storage on a partition's replicas (tiered/manager.py in cluster mode): a follower
re-reads the manifests and holds local retention without writing or deleting anything in the
object store; a leader re-reads them whenever it leads in a new leader epoch, so it copies on
from where another leader's manifests end; a copy whose leadership ended writes no manifest;
and a follower that skips the history below its leader's local log start takes the leader
epochs and the producer state there from the object store. Two Partition objects on
MemoryEngine (one per broker), one MemoryObjectStore."""

from __future__ import annotations

import itertools
import uuid

from lockgate.config.log import LogConfig
from lockgate.log.partition import Partition
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.storage.memory import MemoryEngine
from lockgate.storage.object_store import MemoryObjectStore, ObjectInfo
from lockgate.tiered.layout import MANIFEST, partition_prefix
from lockgate.tiered.listing import scan
from lockgate.tiered.manager import RemoteLogManager

NOW = 1_000_000
TOPIC_ID = uuid.UUID(int=9)
PREFIX = partition_prefix("events", TOPIC_ID, 0)
# a segment per 3-record batch, one local segment kept past the copied ones
TIERED = LogConfig(remote_storage=True, retention_ms=-1, local_retention_ms=-1,
                   local_retention_bytes=1, segment_bytes=100)  # fmt: skip
PRODUCER_ID = 4000


class CountingStore(MemoryObjectStore):
    """Counts the reads, writes and deletes that reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = self.puts = self.deletes = 0

    async def get(self, key: str) -> bytes:
        self.gets += 1
        return await super().get(key)

    async def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        await super().put(key, data)

    async def delete(self, keys: object) -> None:
        self.deletes += 1
        await super().delete(keys)  # type: ignore[arg-type]


def replica(leader: bool, epoch: int = 0) -> Partition:
    partition = Partition(MemoryEngine(), "events", 0, TOPIC_ID, lambda: TIERED)
    partition.load(NOW, new_epoch=leader, epoch=epoch if leader else None)
    partition.is_leader = leader
    return partition


def produce(leader: Partition, batches: int, sequence: int = 0) -> int:
    """`batches` idempotent 3-record batches of one producer; the next sequence."""
    for _ in range(batches):
        batch = build_batch([(None, b"v%d" % (sequence + j)) for j in range(3)],
                            timestamp_ms=NOW, producer_id=PRODUCER_ID, producer_epoch=0,
                            base_sequence=sequence)  # fmt: skip
        leader.append(bytearray(batch), validate_produced_batch(batch), NOW)
        sequence += 3
    leader.advance_high_watermark(leader.log_end_offset)
    return sequence


def replicate(leader: Partition, follower: Partition) -> None:
    """What the follower's fetches would bring: the leader's batches from its log end."""
    while follower.log_end_offset < leader.log_end_offset:  # (a read stays in one segment)
        data = leader.read(follower.log_end_offset, 1 << 20, leader.log_end_offset)
        follower.append_replicated(data, NOW)
    follower.advance_high_watermark(leader.high_watermark)


def lead(partition: Partition, epoch: int) -> None:
    """The controller's word: `partition` leads from now on, in `epoch`."""
    partition.is_leader = True
    partition.leader_epoch = epoch
    partition.epochs.begin_epoch(epoch, partition.log_end_offset)


def follow(partition: Partition, epoch: int) -> None:
    partition.is_leader = False
    partition.leader_epoch = epoch


async def ranges(store: MemoryObjectStore) -> list[tuple[int, int]]:
    found, _orphans = await scan(store, PREFIX)
    return sorted((s.base_offset, s.end_offset) for s in found)


def contiguous(spans: list[tuple[int, int]]) -> bool:
    return all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))


async def test_a_follower_holds_local_retention_and_writes_nothing() -> None:
    store = CountingStore()
    leader, follower = replica(leader=True), replica(leader=False)
    produce(leader, 6)
    replicate(leader, follower)
    assert len(follower.segments) == 6
    leader_manager = RemoteLogManager(store, leader.storage, 1, lambda: NOW)
    await leader_manager.run([leader])
    # the leader's copy of the next segment in flight: data files, no manifest yet
    in_flight = PREFIX + f"{15:020d}-{uuid.uuid4()}.log"
    await store.put(in_flight, b"half")
    objects, puts, deletes = dict(store.objects), store.puts, store.deletes

    manager = RemoteLogManager(store, follower.storage, 2, lambda: NOW)
    await manager.run([follower])
    assert [s.base_offset for s in follower.segments] == [15]  # as on the leader
    assert (follower.remote_start, follower.remote_end) == (0, 15)
    assert follower.log_start_offset == 0 and follower.local_log_start_offset == 15
    assert store.objects == objects and (store.puts, store.deletes) == (puts, deletes)
    assert manager.stats.copied_segments == 0

    # the next pass lists the prefix again but reads only the manifests it has not seen
    gets = store.gets
    await manager.run([follower])
    assert store.gets == gets
    produce(leader, 2, sequence=18)
    replicate(leader, follower)
    await leader_manager.run([leader])  # (in the same leadership: no new listing of orphans)
    gets = store.gets
    await manager.run([follower])
    assert store.gets == gets + 2 and follower.remote_end == 21
    assert [s.base_offset for s in follower.segments] == [21]
    assert in_flight in store.objects  # only a leader cleans up


async def test_a_follower_keeps_what_is_not_remote_yet() -> None:
    store = MemoryObjectStore()
    leader, follower = replica(leader=True), replica(leader=False)
    produce(leader, 6)
    replicate(leader, follower)
    manager = RemoteLogManager(store, follower.storage, 2, lambda: NOW)
    await manager.run([follower])  # nothing copied yet: nothing goes
    assert len(follower.segments) == 6 and follower.remote_start is None
    await RemoteLogManager(store, leader.storage, 1, lambda: NOW).run([leader])
    follower.high_watermark = 7  # the follower has not heard of a later high watermark yet
    await manager.run([follower])
    assert follower.local_log_start_offset == 6  # not past its own high watermark


async def test_a_new_leader_copies_on_from_the_previous_leaders_manifests() -> None:
    store = MemoryObjectStore()
    first, second = replica(leader=True), replica(leader=False)
    produce(first, 4)
    replicate(first, second)
    first_manager = RemoteLogManager(store, first.storage, 1, lambda: NOW)
    second_manager = RemoteLogManager(store, second.storage, 2, lambda: NOW)
    await second_manager.run([second])  # a follower's read: nothing copied yet
    await first_manager.run([first])
    assert await ranges(store) == [(0, 2), (3, 5), (6, 8)]

    # the first leader is gone; the second leads in epoch 1 and copies on at 9, no overlap
    follow(first, 1)
    lead(second, 1)
    sequence = produce(second, 3, sequence=12)
    replicate(second, first)  # the first broker is back, as a follower
    await second_manager.run([second])
    assert await ranges(store) == [(0, 2), (3, 5), (6, 8), (9, 11), (12, 14), (15, 17)]

    # the first broker leads again (epoch 2): it reads the manifests again, though it read
    # them as leader before, and copies on at 18
    follow(second, 2)
    lead(first, 2)
    produce(first, 2, sequence=sequence)
    await first_manager.run([first])
    spans = await ranges(store)
    assert spans[-2:] == [(18, 20), (21, 23)] and contiguous(spans) and spans[0] == (0, 2)
    found, orphans = await scan(store, PREFIX)
    assert orphans == [] and max(s.leader_epoch for s in found) == 2


async def test_a_copy_whose_leadership_ends_writes_no_manifest() -> None:
    store = MemoryObjectStore()
    leader = replica(leader=True)
    produce(leader, 3)
    real_put_file = store.put_file
    real_put = store.put

    async def deposed_meanwhile(key: str, data: bytes) -> None:
        follow(leader, 1)  # the controller moved the leadership during the upload
        await real_put(key, data)

    store.put = deposed_meanwhile  # type: ignore[method-assign]
    assert real_put_file is not None
    manager = RemoteLogManager(store, leader.storage, 1, lambda: NOW)
    await manager.run([leader])
    assert not any(k.endswith(MANIFEST) for k in store.objects)
    assert store.objects == {}  # its data files deleted again
    assert len(leader.segments) == 3 and leader.remote_start is None


async def test_a_follower_starts_at_the_leaders_local_start_with_its_history() -> None:
    store = MemoryObjectStore()
    leader = replica(leader=True)
    sequence = produce(leader, 3)
    lead(leader, 3)  # a later leadership wrote the rest
    sequence = produce(leader, 4, sequence=sequence)
    await RemoteLogManager(store, leader.storage, 1, lambda: NOW).run([leader])
    local_start = leader.local_log_start_offset
    assert (local_start, leader.log_start_offset) == (18, 0)

    follower = replica(leader=False)  # an empty replica (a new one, or its disk wiped)
    manager = RemoteLogManager(store, follower.storage, 2, lambda: NOW)
    start, kept = await manager.history_before(follower, local_start)
    assert start == 18
    assert kept.log_start == 0 and kept.epochs == ((0, 0), (3, 9))
    entry = kept.producers.get(PRODUCER_ID)
    assert entry is not None and entry.last_sequence == sequence - 4  # the batch before 18
    follower.truncate_fully_and_start_at(start, NOW, kept)
    assert (follower.log_start_offset, follower.local_log_start_offset) == (0, 18)
    assert follower.log_end_offset == 18
    history = list(zip(follower.epochs.epochs, follower.epochs.start_offsets, strict=True))
    assert history == [(0, 0), (3, 9)]
    replicate(leader, follower)
    assert follower.read(18, 1 << 20, 21) == leader.read(18, 1 << 20, 21)
    # as leader it would take the producer on where it is (no gap, no duplicate)
    follower_entry = follower.producers.get(PRODUCER_ID)
    leader_entry = leader.producers.get(PRODUCER_ID)
    assert follower_entry is not None and leader_entry is not None
    assert follower_entry.last_sequence == leader_entry.last_sequence
    # OffsetForLeaderEpoch answers from the rebuilt history
    assert follower.epochs.end_offset_for(0, follower.log_end_offset) == (0, 9)

    # a restart of the follower finds the same start and producer state
    restarted = Partition(follower.storage, "events", 0, TOPIC_ID, lambda: TIERED)
    restarted.load(NOW, new_epoch=False)
    assert restarted.local_log_start_offset == 18 and restarted.log_start_floor == 0
    again = restarted.producers.get(PRODUCER_ID)
    assert again is not None and again.last_sequence == leader_entry.last_sequence


async def test_a_local_start_inside_a_remote_segment_starts_after_it() -> None:
    store = MemoryObjectStore()
    leader = replica(leader=True)
    produce(leader, 4)
    await RemoteLogManager(store, leader.storage, 1, lambda: NOW).run([leader])
    follower = replica(leader=False)
    manager = RemoteLogManager(store, follower.storage, 2, lambda: NOW)
    # a leader whose own segments end elsewhere than the copied ones (it copied none)
    start, _kept = await manager.history_before(follower, 5)
    assert start == 6  # after the remote segment 3..5, where the leader still has data
    try:
        await manager.history_before(follower, 30)
    except LookupError:
        pass
    else:
        raise AssertionError("a start past the remote log must wait")


async def test_a_listing_that_leaves_out_a_manifest_deletes_none_of_its_data() -> None:
    store = MemoryObjectStore()
    leader = replica(leader=True)
    produce(leader, 3)
    await RemoteLogManager(store, leader.storage, 1, lambda: NOW).run([leader])
    hidden = next(k for k in store.objects if k.endswith(MANIFEST))
    real_list = store.list

    async def incomplete(prefix: str) -> list[ObjectInfo]:
        return [o for o in await real_list(prefix) if o.key != hidden]

    store.list = incomplete  # type: ignore[method-assign]
    objects = dict(store.objects)
    await RemoteLogManager(store, leader.storage, 1, lambda: NOW).run([leader])  # a new leader
    assert store.objects == objects  # its data files looked orphaned; the manifest is there
