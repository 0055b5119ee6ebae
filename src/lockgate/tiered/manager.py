# Tiered storage (KIP-405's RemoteLogManager). For every partition this broker leads whose topic has
# remote.storage.enable, each pass copies the rolled segments below the last stable offset to the
# object store (copier.py: in offset order, the manifest last), then deletes local segments past
# local.retention.ms/bytes that are safely remote, then deletes remote segments past the total
# retention.ms/bytes or below the log start offset (DeleteRecords). For every tiered partition it
# follows, a pass only re-reads the manifests and applies the same local retention, so a follower's
# disk holds what its leader's does. It also serves the reads below the local log start (reader.py),
# and gives a follower that is behind its leader's local log start the history it skips (leader
# epochs, producer state).
#
# Invariants: only a leader writes or deletes objects (a follower never does: the objects without a
# manifest it sees may be its leader's copy in flight); a local segment is deleted only once its
# manifest is in the object store; a remote segment is deleted manifest first; a leader re-reads the
# manifests under the partition's prefix (listing.py) whenever it starts a leadership (a new leader
# epoch), before it copies, so it resumes where the previous leader's manifests end, and deletes
# then the objects no manifest owns (leftovers of an interrupted copy or delete); a copy whose
# leadership ended meanwhile writes no manifest; passes over one partition never overlap (one lock
# each), and an object store failure leaves the partition as it was for the next pass to retry,
# apart from the objects of the failed copy or delete, which are deleted before anything else (at
# once, or by a later pass while the store still fails): a copy retried after a failed manifest PUT
# that the store did perform leaves no second manifest over the same offsets, and nothing is left
# without a manifest. A failure that goes on is logged once when it begins, then at most once a
# minute, and once when it ends (a pass runs every few hundred milliseconds). The store's client is
# async: nothing here blocks the event loop but the reads of small index files.
from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.log.partition import KeptHistory, Partition
from lockgate.log.producer_state import ProducerStateTable
from lockgate.log.txn_index import AbortedTxn
from lockgate.protocol.errors import ErrorCode
from lockgate.storage.engine import StorageEngine
from lockgate.storage.object_store import (
    ObjectStore,
    ObjectStoreError,
    S3ObjectStore,
    S3Settings,
)
from lockgate.tiered.copier import SegmentCopier
from lockgate.tiered.failures import FailureLog
from lockgate.tiered.layout import (
    MANIFEST,
    PRODUCER_SNAPSHOT,
    RemoteSegment,
    partition_prefix,
    stem_of,
    topic_prefix,
)
from lockgate.tiered.listing import scan
from lockgate.tiered.reader import RemoteReader
from lockgate.tiered.remote_log import RemoteLog
from lockgate.tiered.stats import TieredStats

log = logging.getLogger(__name__)

PartitionKey = tuple[str, int, uuid.UUID]


@dataclass(slots=True)
class _Tiered:
    """One partition's remote log as this broker knows it."""

    log: RemoteLog = field(default_factory=RemoteLog)
    loaded: bool = False  # the manifests were read at least once
    # the leader epoch this broker led in when it last read the manifests (None: it read them
    # as a follower): a leadership in another epoch reads them again before it copies
    read_as_leader: int | None = None
    # the manifests read so far, by key: written once and never changed, so a refresh only
    # reads those it has not seen
    manifests: dict[str, RemoteSegment] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # objects of interrupted copies or deletes (no manifest holds them, or their manifest is
    # not in `log`), deleted at the start of the next pass
    leftovers: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RemoteFetch:
    """A consumer's read of the tiered part: the error, the batches and (read_committed)
    the aborted transactions they overlap."""

    error: ErrorCode
    records: bytes = b""
    aborted: list[AbortedTxn] | None = None


class RemoteLogManager:
    def __init__(
        self,
        store: ObjectStore,
        storage: StorageEngine,
        node_id: int,
        clock: Callable[[], int],
    ) -> None:
        self.store = store
        self.storage = storage
        self.node_id = node_id
        self.clock = clock
        self.reader = RemoteReader(store)
        self.stats = TieredStats()
        self.copier = SegmentCopier(store, storage, node_id, clock, self.stats)
        self.failures = FailureLog(clock)
        self._partitions: dict[PartitionKey, _Tiered] = {}
        self._disabled: set[PartitionKey] = set()  # remote parts deleted since this start

    # -- the periodic pass -------------------------------------------------------------------

    async def run(self, partitions: Iterable[Partition]) -> None:
        """One pass over the tiered partitions this broker holds: those it leads are copied
        and retained, those it follows only retained."""
        for partition in list(partitions):
            if partition.closed:
                continue
            config = partition.config
            try:
                if config.remote_storage and partition.is_leader:
                    await self.run_partition(partition)
                elif config.remote_storage:
                    await self.follow_partition(partition)
                elif (
                    partition.is_leader
                    and config.remote_delete_on_disable
                    and _key(partition) not in self._disabled
                ):
                    await self._delete_remote_part(partition)
                elif _key(partition) in self._partitions:  # a follower's, turned off
                    self._partitions.pop(_key(partition))
                    partition.remote_start = partition.remote_end = None
            except (ObjectStoreError, OSError) as exc:
                self.failures.failed(PASS, partition, exc)
            else:
                self.failures.succeeded(PASS, partition)

    async def _delete_remote_part(self, partition: Partition) -> None:
        """remote.storage.enable turned off with remote.log.delete.on.disable: the partition's
        remote segments go (manifests first), its log starts at its local start again. Once
        per partition and start of this broker (a restart sweeps again what a crash left)."""
        key = _key(partition)
        prefix = partition_prefix(partition.topic, partition.topic_id, partition.index)
        objects = [o.key for o in await self.store.list(prefix)]
        await self.store.delete([k for k in objects if k.endswith(MANIFEST)])
        await self.store.delete([k for k in objects if not k.endswith(MANIFEST)])
        self._partitions.pop(key, None)
        partition.remote_start = partition.remote_end = None
        self._disabled.add(key)
        if objects:
            log.info("%s-%d: remote storage turned off: %d objects deleted", partition.topic,
                     partition.index, len(objects))  # fmt: skip

    async def run_partition(self, partition: Partition) -> None:
        self._disabled.discard(_key(partition))  # (turned on again: a later off sweeps again)
        tiered = await self.remote_log(partition)
        async with tiered.lock:
            await self._delete_leftovers(partition, tiered)
            if not partition.config.remote_copy_disabled:
                await self._copy(partition, tiered)
            end = tiered.log.end_offset
            if end is not None:
                partition.apply_local_retention(self.clock(), end)
            await self._expire(partition, tiered)
            _mirror(partition, tiered.log)

    async def follow_partition(self, partition: Partition) -> None:
        """A follower's pass: the manifests read again (its leader copies meanwhile), and
        local retention applied below what they cover, as on the leader. Nothing is written
        or deleted in the object store."""
        tiered = self._partitions.setdefault(_key(partition), _Tiered())
        async with tiered.lock:
            await self._load(partition, tiered, leading=False)
            end = tiered.log.end_offset
            if end is not None:
                partition.apply_local_retention(self.clock(), end)

    async def remote_log(self, partition: Partition) -> _Tiered:
        """The partition's remote log: read from its manifests the first time, and again
        when this broker leads it in a leader epoch it has not read them in (another leader
        may have copied meanwhile; the copier resumes where the manifests end)."""
        tiered = self._partitions.setdefault(_key(partition), _Tiered())
        if partition.is_leader:
            epoch = partition.leader_epoch
            if tiered.read_as_leader != epoch:
                async with tiered.lock:  # (after a copy in flight, whose manifest counts)
                    if tiered.read_as_leader != epoch and partition.is_leader:
                        await self._load(partition, tiered, leading=True)
                        tiered.read_as_leader = epoch
        elif not tiered.loaded:
            async with tiered.lock:
                if not tiered.loaded:
                    await self._load(partition, tiered, leading=False)
        return tiered

    async def _load(self, partition: Partition, tiered: _Tiered, leading: bool) -> None:
        """Reads the manifests into `tiered`. Only a leader deletes what it finds stale:
        superseded manifests, and the objects no manifest owns (for a follower these may be
        its leader's copy in flight)."""
        prefix = partition_prefix(partition.topic, partition.topic_id, partition.index)
        found, orphans = await scan(self.store, prefix, tiered.manifests)
        remote, superseded = RemoteLog.load(found)
        tiered.log, tiered.loaded = remote, True
        if not leading:
            tiered.read_as_leader = None
        _mirror(partition, remote)
        if leading:  # deleted at the start of the pass (_delete_leftovers)
            if orphans:
                orphans = await self._confirmed_orphans(orphans)
            stale = [k for s in superseded for k in s.object_keys()] + orphans
            for segment in superseded:
                tiered.manifests.pop(segment.key(MANIFEST), None)
            tiered.leftovers = list(dict.fromkeys(tiered.leftovers + stale))

    async def _delete_leftovers(self, partition: Partition, tiered: _Tiered) -> None:
        """Deletes the objects of interrupted copies and deletes, manifests first."""
        if not tiered.leftovers:
            return
        stale = list(tiered.leftovers)
        await self.store.delete([k for k in stale if k.endswith(MANIFEST)])
        await self.store.delete([k for k in stale if not k.endswith(MANIFEST)])
        done = set(stale)
        tiered.leftovers = [k for k in tiered.leftovers if k not in done]
        log.info("%s-%d: deleted %d objects of interrupted, failed or superseded copies",
                 partition.topic, partition.index, len(stale))  # fmt: skip

    async def _confirmed_orphans(self, orphans: list[str]) -> list[str]:
        """The orphans whose manifest is really absent: a listing taken while objects are
        written beside them may leave some out (S3Proxy's filesystem backend does; S3 lists
        consistently), and a segment's data must never go while its manifest exists."""
        stems = {stem_of(k) for k in orphans}
        present = {
            stem
            for stem in stems
            if stem is not None and await self.store.head(stem + MANIFEST) is not None
        }
        if present:
            log.warning("%d manifests missing from a listing exist: their data is kept",
                        len(present))  # fmt: skip
        return [k for k in orphans if stem_of(k) not in present]

    # -- copying -----------------------------------------------------------------------------

    async def _copy(self, partition: Partition, tiered: _Tiered) -> None:
        async def failed(keys: list[str]) -> None:
            # the manifest too: a PUT reported failed may have been done by the store, and a
            # manifest left behind would overlap the copy the next pass makes
            tiered.leftovers += keys
            with contextlib.suppress(ObjectStoreError):
                await self._delete_leftovers(partition, tiered)

        async for copied in self.copier.copy_rolled(partition, tiered.log, failed):
            tiered.log.add(copied)
            _mirror(partition, tiered.log)
            # the disk freed as each copy lands, not after a backlog's last one
            partition.apply_local_retention(self.clock(), copied.next_offset)

    # -- deleting ----------------------------------------------------------------------------

    async def _expire(self, partition: Partition, tiered: _Tiered) -> None:
        """Deletes remote segments past the total retention, or below the log start offset
        that DeleteRecords moved (local segments count towards retention.bytes too)."""
        config = partition.config
        now = self.clock()
        remote = tiered.log
        while remote.segments:
            oldest = remote.segments[0]
            below_start = oldest.next_offset <= partition.log_start_floor
            expired = (
                config.retention_ms >= 0
                and oldest.max_timestamp >= 0
                and now - oldest.max_timestamp > config.retention_ms
            )
            local_after = sum(
                s.size for s in partition.segments if s.base_offset >= (remote.end_offset or 0)
            )
            oversize = (
                config.retention_bytes >= 0
                and remote.size_bytes + local_after - oldest.size >= config.retention_bytes
            )
            if not (below_start or expired or oversize):
                return
            await self._delete_segment(partition, tiered, oldest)

    async def _delete_segment(
        self, partition: Partition, tiered: _Tiered, segment: RemoteSegment
    ) -> None:
        remote = tiered.log
        try:
            await self.store.delete([segment.key(MANIFEST)])
        except ObjectStoreError:
            self.stats.delete_errors += 1
            raise
        remote.remove(segment)
        self.reader.forget(segment)
        _mirror(partition, remote)
        tiered.leftovers += [segment.key(s) for s in segment.files]
        try:
            await self._delete_leftovers(partition, tiered)
        except ObjectStoreError:
            self.stats.delete_errors += 1  # (the data files go with the next pass's leftovers)
            raise
        self.stats.deleted_segments += 1
        log.info("%s-%d: deleted remote segment %d..%d", partition.topic, partition.index,
                 segment.base_offset, segment.end_offset)  # fmt: skip

    async def topic_deleted(self, topic: str, topic_id: uuid.UUID) -> int:
        """Deletes every object of a deleted topic (manifests first); how many."""
        for key in [k for k in self._partitions if k[0] == topic and k[2] == topic_id]:
            del self._partitions[key]
        objects = [o.key for o in await self.store.list(topic_prefix(topic, topic_id))]
        manifests = [k for k in objects if k.endswith(MANIFEST)]
        await self.store.delete(manifests)
        await self.store.delete([k for k in objects if not k.endswith(MANIFEST)])
        if objects:
            log.info("deleted topic %s: %d objects deleted from the object store", topic,
                     len(objects))  # fmt: skip
        return len(objects)

    def forget(self, partition: Partition) -> None:
        """This broker no longer leads the partition: its remote log is read again if it
        leads it again (another leader may have changed it meanwhile)."""
        self._partitions.pop(_key(partition), None)

    # -- reading -----------------------------------------------------------------------------

    def unknown(self, partition: Partition) -> bool:
        """A tiered partition whose remote log this broker has not read yet (its log start
        offset is not known until then)."""
        tiered = self._partitions.get(_key(partition))
        return partition.config.remote_storage and (tiered is None or not tiered.loaded)

    def serves(self, partition: Partition, offset: int) -> bool:
        """Whether a read at `offset` goes to the object store."""
        return (
            partition.remote_start is not None
            and partition.log_start_offset <= offset < partition.local_log_start_offset
        )

    async def fetch(
        self, partition: Partition, offset: int, max_bytes: int, read_committed: bool,
        wait_ms: int,
    ) -> RemoteFetch:  # fmt: skip
        """A consumer's Fetch below the local log start: the batches (up to the last stable
        offset for read_committed, else the high watermark) with their aborted transactions,
        OFFSET_OUT_OF_RANGE below the log start (known once the remote log is read, after a
        start or a new leadership), KAFKA_STORAGE_ERROR when the store fails, and no records
        (no error) when it does not answer within `wait_ms` (remote.fetch.max.wait.ms, as
        Kafka: the read is cancelled, the consumer asks again)."""

        async def read() -> RemoteFetch:
            await self.remote_log(partition)
            if offset < partition.log_start_offset:
                return RemoteFetch(ErrorCode.offset_out_of_range)
            upper = partition.last_stable_offset if read_committed else partition.high_watermark
            data, aborted = await self.read(partition, offset, max_bytes, upper, read_committed)
            return RemoteFetch(ErrorCode.none, data, aborted)

        try:
            return await asyncio.wait_for(read(), wait_ms / 1000)
        except TimeoutError:
            slow = TimeoutError(f"no answer within remote.fetch.max.wait.ms ({wait_ms} ms)")
            self.failures.failed(READ, partition, slow)
            return RemoteFetch(ErrorCode.none)
        except ObjectStoreError as exc:
            self.failures.failed(READ, partition, exc)  # (once, not once per fetch)
            return RemoteFetch(ErrorCode.kafka_storage_error)

    async def read(
        self, partition: Partition, offset: int, max_bytes: int, upper_offset: int,
        read_committed: bool,
    ) -> tuple[bytes, list[AbortedTxn] | None]:  # fmt: skip
        """Batches from the object store at `offset` (below the local log start), and for
        read_committed the aborted transactions they overlap."""
        tiered = await self.remote_log(partition)
        segment = tiered.log.segment_for(offset)
        self.stats.fetch_requests += 1
        if segment is None:
            return b"", [] if read_committed else None
        try:
            data = await self.reader.read(segment, offset, max_bytes, upper_offset)
            aborted = None
            if read_committed:
                end = min(upper_offset, segment.next_offset)  # (the read stays in the segment)
                aborted = await self._aborted(partition, tiered.log, segment, offset, end)
        except ObjectStoreError:
            self.stats.fetch_errors += 1
            raise
        self.failures.succeeded(READ, partition)
        self.stats.fetch_bytes += len(data)
        return data, aborted

    async def _aborted(
        self, partition: Partition, remote: RemoteLog, segment: RemoteSegment, start: int,
        end: int,
    ) -> list[AbortedTxn]:  # fmt: skip
        """The aborted transactions with data in [start, end) of `segment`: those of its
        transaction index and, as a transaction is indexed where its abort marker is, of the
        following remote segments' and then the local log's until the search is complete
        (reader.aborted). A segment still on disk is searched twice: once is kept."""
        found, complete = await self.reader.aborted(remote.segments_from(segment), start, end)
        if not complete:
            found += partition.aborted.overlapping(start, end)
        return list(dict.fromkeys(found))

    async def offset_for_timestamp(
        self, partition: Partition, timestamp: int
    ) -> tuple[int, int] | None:
        """ListOffsets by time over the remote part of the log (below the local log start):
        (offset, timestamp) of the first record at or after `timestamp`, or None (then the
        local log answers)."""
        tiered = await self.remote_log(partition)
        local_start = partition.local_log_start_offset
        start = partition.log_start_offset
        for segment in tiered.log.segments:
            if segment.base_offset >= local_start:
                break
            if segment.max_timestamp < timestamp or segment.end_offset < start:
                continue
            found = await self.reader.offset_for_timestamp(segment, timestamp, start)
            if found is not None:
                return found
        return None

    # -- a follower behind its leader's local log start ---------------------------------------

    def holds(self, partition: Partition) -> bool:
        """Whether a follower of `partition` can start from its history in the object store."""
        return partition.config.remote_storage

    async def history_before(self, partition: Partition, offset: int) -> tuple[int, KeptHistory]:
        """Where a follower that skips the history below its leader's local log start
        `offset` starts (as Kafka's: after the remote segment that holds offset - 1, so at
        `offset` or a little past it, where the leader still has the data), and what it
        keeps of that history: the leader epochs the manifests give, the producer state of
        the segment's snapshot, and the remote log start as its log start offset. The
        manifests are read again first. LookupError when no remote segment holds offset - 1
        (this broker's view is older than the leader's: it asks again after a back-off);
        ObjectStoreError when the store fails."""
        tiered = self._partitions.setdefault(_key(partition), _Tiered())
        async with tiered.lock:
            await self._load(partition, tiered, leading=False)
            remote = tiered.log
        target = offset - 1
        segment = next(
            (s for s in remote.segments if s.base_offset <= target <= s.end_offset), None
        )
        if segment is None or remote.start_offset is None:
            raise LookupError(f"no remote segment holds offset {target}")
        start = segment.next_offset
        epochs: list[tuple[int, int]] = []
        for held in remote.segments:
            if held.base_offset >= start:
                break
            for epoch, first in held.epochs:
                if not epochs or epoch > epochs[-1][0]:
                    epochs.append((epoch, first))
        producers = ProducerStateTable()
        loaded = None
        if PRODUCER_SNAPSHOT in segment.files:
            raw = await self.store.get(segment.key(PRODUCER_SNAPSHOT))
            loaded = ProducerStateTable.from_snapshot(raw)
        if loaded is not None and loaded[1] == start:
            producers = loaded[0]
        else:  # (the leader had dropped it before the copy)
            log.warning("%s-%d: remote segment %d..%d has no usable producer snapshot: the "
                        "producer state starts empty at %d", partition.topic, partition.index,
                        segment.base_offset, segment.end_offset, start)  # fmt: skip
        return start, KeptHistory(remote.start_offset, tuple(epochs), producers)

    def copy_lag(self, partition: Partition) -> tuple[int, int]:
        """(segments, bytes) rolled locally and not copied yet."""
        tiered = self._partitions.get(_key(partition))
        end = tiered.log.end_offset if tiered is not None else None
        waiting = [s for s in partition.segments[:-1] if end is None or s.base_offset >= end]
        return len(waiting), sum(s.size for s in waiting)

    def remote_size(self, partition: Partition) -> int:
        tiered = self._partitions.get(_key(partition))
        return tiered.log.size_bytes if tiered is not None else 0


PASS = "tiered storage pass"
READ = "remote read"


def tiered_manager(
    config: BrokerConfig, storage: StorageEngine, node_id: int, clock: Callable[[], int]
) -> RemoteLogManager | None:
    """The broker's manager when remote.log.storage.system.enable is true (its object store
    from the properties under remote.log.storage.manager.impl.prefix), else None."""
    if not config.flag("remote.log.storage.system.enable"):
        return None
    prefix = config.get("remote.log.storage.manager.impl.prefix")
    properties = {k[len(prefix) :]: v for k, v in config.values.items() if k.startswith(prefix)}
    try:
        settings = S3Settings.from_properties(properties)
    except ValueError as exc:
        raise ConfigError(f"remote.log.storage.system.enable: {prefix}{exc}") from None
    log.info("tiered storage on: %r", settings)  # (its repr never shows the secret)
    manager = RemoteLogManager(S3ObjectStore(settings), storage, node_id, clock)
    manager.reader.cache_bytes = config.integer("lockgate.remote.fetch.cache.bytes")
    return manager


def _mirror(partition: Partition, remote: RemoteLog) -> None:
    """What the partition's readers (Fetch, ListOffsets) need of its remote log."""
    partition.remote_start = remote.start_offset
    partition.remote_end = remote.end_offset


def _key(partition: Partition) -> PartitionKey:
    return (partition.topic, partition.index, partition.topic_id)
