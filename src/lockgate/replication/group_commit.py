# Group commit: one fsync pass in a worker thread covers every append waiting at that moment.
#
# Each append marks its partition dirty and (in durable mode) the high watermark only advances
# once the flush that covered the append has finished, so consumers never see data that a
# crash could take back. Waiters that arrive during a flush are covered by the next one.
#
# A failed fsync is final (as in Kafka, whose log directory goes offline): after it the
# kernel may have dropped the dirty pages and a retried fsync can report success for data
# that is gone ("fsyncgate"). So the high watermark never moves again, the flush's waiters
# and every later one get the error (KAFKA_STORAGE_ERROR), until a restart recovers the log.
# That includes ENOSPC reported by fsync: a write that already returned may have lost its
# pages, unlike ENOSPC on write, which the storage engine undoes and the next append retries.
from __future__ import annotations

import asyncio
import logging
import time

from lockgate.log.partition import Partition
from lockgate.log.stats import LATENCY_BUCKETS, SIZE_BUCKETS, Histogram
from lockgate.storage.engine import AppendFile

log = logging.getLogger(__name__)


class GroupCommit:
    def __init__(self, durable: bool) -> None:
        self.durable = durable
        self._dirty: dict[Partition, None] = {}
        self._waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.flushes = 0
        self.failure: OSError | None = None  # the fsync error that ended acknowledgements
        # per successful pass, for the metrics: its time and the partitions it covered
        self.flush_latency = Histogram(LATENCY_BUCKETS)
        self.flush_partitions = Histogram(SIZE_BUCKETS)

    def appended(self, partition: Partition) -> asyncio.Future[None]:
        """Registers an append; the future resolves when it is durable (and visible)."""
        if not self.durable:
            partition.flushed_to(partition.log_end_offset)
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future
        if self.failure is not None:
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(self.failure)
            return failed
        self._dirty[partition] = None
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        waiter = self._waiter
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return waiter

    async def _run(self) -> None:
        try:
            while self._waiter is not None:
                waiter, self._waiter = self._waiter, None
                dirty, self._dirty = list(self._dirty), {}
                targets = [(p, p.log_end_offset, p.take_unsynced()) for p in dirty]
                files = [f for _, _, unsynced in targets for f in unsynced]
                if self.failure is None:
                    started = time.monotonic()
                    try:
                        await asyncio.to_thread(_sync_all, files)
                    except OSError as exc:
                        self.failure = exc
                        log.critical(
                            "fsync failed: %s; no append is acknowledged from now on (high "
                            "watermarks stay where they are) until a restart",
                            exc,
                        )
                if self.failure is not None:
                    waiter.set_exception(self.failure)
                    continue
                self.flushes += 1
                self.flush_latency.observe(time.monotonic() - started)
                self.flush_partitions.observe(len(targets))
                for partition, end, _ in targets:
                    partition.flushed_to(end)
                waiter.set_result(None)
        finally:
            self._task = None

    async def drain(self) -> None:
        """Waits for every pending flush (shutdown)."""
        while self._task is not None:
            await asyncio.shield(self._task)


def _sync_all(files: list[AppendFile]) -> None:
    for file in files:
        file.sync()
