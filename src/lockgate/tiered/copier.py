# Copying a leader's rolled segments to the object store (KIP-405's copy task), in offset order
# from where the remote log ends: the log, its offset, time and transaction indexes and the
# producer snapshot at its end, uploaded side by side, then the manifest, written last (the
# commit point, layout.py).
#
# Invariants: the active segment is never copied, nor a segment that reaches past the last
# stable offset (or the high watermark); a copy is made only while this broker leads the
# partition at the epoch the pass began with, and its manifest only while it still does (a
# copy abandoned on the way has its data files deleted); every upload settles before a
# failure is handled, so none still runs when the failed copy's objects are deleted.
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from lockgate.log.partition import Partition
from lockgate.log.segment import Segment, segment_name
from lockgate.storage.engine import StorageEngine
from lockgate.storage.object_store import ObjectStore, ObjectStoreError
from lockgate.tiered.layout import (
    INDEX,
    LOG,
    MANIFEST,
    PRODUCER_SNAPSHOT,
    TIME_INDEX,
    TXN_INDEX,
    RemoteSegment,
)
from lockgate.tiered.remote_log import RemoteLog
from lockgate.tiered.stats import TieredStats

log = logging.getLogger(__name__)


class SegmentCopier:
    def __init__(
        self,
        store: ObjectStore,
        storage: StorageEngine,
        node_id: int,
        clock: Callable[[], int],
        stats: TieredStats,
    ) -> None:
        self.store = store
        self.storage = storage
        self.node_id = node_id
        self.clock = clock
        self.stats = stats

    async def copy_rolled(
        self,
        partition: Partition,
        remote: RemoteLog,
        failed: Callable[[list[str]], Awaitable[None]],
    ) -> AsyncIterator[RemoteSegment]:
        """Each segment copied, in offset order (the caller adds it to `remote` before the
        next one is looked at); `failed` gets the objects of a copy that failed (to delete)
        before the error goes up."""
        upper = min(partition.high_watermark, partition.last_stable_offset)
        epoch = partition.leader_epoch
        for segment in list(partition.segments[:-1]):  # the active segment never goes
            if not leads(partition, epoch):
                return  # deposed meanwhile: the next leader copies from its manifests
            end = remote.end_offset
            if end is not None and segment.base_offset < end:
                continue
            if segment.is_empty or segment.next_offset > upper:
                return
            if segment not in partition.segments:  # deleted meanwhile (DeleteRecords)
                continue
            copied = await self._copy_segment(partition, segment, failed)
            if copied is None:
                return
            yield copied

    async def _copy_segment(
        self,
        partition: Partition,
        segment: Segment,
        failed: Callable[[list[str]], Awaitable[None]],
    ) -> RemoteSegment | None:
        """The segment copied, or None when this broker's leadership ended during the copy
        (no manifest is written then, and its data files are deleted)."""
        directory = partition.directory
        stem = f"{directory}/{segment_name(segment.base_offset)}"
        snapshot = f"{directory}/{segment_name(segment.next_offset)}.snapshot"
        sources = {LOG: stem + ".log", INDEX: stem + ".index", TIME_INDEX: stem + ".timeindex",
                   TXN_INDEX: segment.txn_index_path, PRODUCER_SNAPSHOT: snapshot}  # fmt: skip
        files = tuple(s for s, path in sources.items() if s == LOG or self.storage.exists(path))
        copied = RemoteSegment(
            topic=partition.topic,
            topic_id=partition.topic_id,
            partition=partition.index,
            segment_id=uuid.uuid4(),
            base_offset=segment.base_offset,
            end_offset=segment.next_offset - 1,
            size=segment.size,
            max_timestamp=segment.max_timestamp,
            epochs=epochs_within(partition, segment.base_offset, segment.next_offset),
            broker_id=self.node_id,
            leader_epoch=partition.leader_epoch,
            created_ms=self.clock(),
            files=files,
        )
        try:
            uploads = [self._upload(copied.key(s), sources[s]) for s in files]
            for result in await asyncio.gather(*uploads, return_exceptions=True):
                if isinstance(result, BaseException):
                    raise result
            if not leads(partition, copied.leader_epoch):
                log.info("%s-%d: leadership ended during the copy of segment %d: abandoned",
                         partition.topic, partition.index, copied.base_offset)  # fmt: skip
                await self.store.delete([copied.key(s) for s in files])
                return None
            await self.store.put(copied.key(MANIFEST), copied.encode())
        except (ObjectStoreError, OSError):
            self.stats.copy_errors += 1
            await failed(copied.object_keys())
            raise
        self.stats.copied_segments += 1
        self.stats.copied_bytes += copied.size
        log.info("%s-%d: copied segment %d..%d (%d bytes) to the object store", partition.topic,
                 partition.index, copied.base_offset, copied.end_offset, copied.size)  # fmt: skip
        return copied

    async def _upload(self, key: str, path: str) -> None:
        local = self.storage.local_path(path)
        if local is not None:  # the store's client reads the file itself, part by part
            await self.store.put_file(key, Path(local))
            return
        data = self.storage.read_all(path)
        if data is None:
            raise OSError(f"{path} is gone")
        await self.store.put(key, data)


def leads(partition: Partition, epoch: int) -> bool:
    return partition.is_leader and partition.leader_epoch == epoch and not partition.closed


def epochs_within(partition: Partition, start: int, end: int) -> tuple[tuple[int, int], ...]:
    """The leader epochs that wrote [start, end): (epoch, first offset in the range)."""
    epochs = partition.epochs
    found: list[tuple[int, int]] = []
    for epoch, first in zip(epochs.epochs, epochs.start_offsets, strict=True):
        if first >= end:
            break
        if first <= start:
            found = [(epoch, start)]  # a later epoch that began at or before the start wins
        else:
            found.append((epoch, first))
    return tuple(found)
