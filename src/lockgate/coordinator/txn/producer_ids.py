# Producer id allocation: ids are handed out from blocks whose end is persisted before the
# first id of the block is used, so no id is ever given twice, across restarts and crashes
# (a crash only skips the rest of the current block).
from __future__ import annotations

import asyncio
import logging

from lockgate.cluster.metadata import MetadataStore
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.storage.engine import StorageEngine

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000
_PATH = "producer-id-block"


class ProducerIdManager:
    def __init__(self, storage: StorageEngine) -> None:
        self.storage = storage
        raw = storage.read_all(_PATH)
        self._block_end = int(raw.decode().strip()) if raw else 0
        self._next = self._block_end  # nothing of the persisted block is trusted after a restart

    def allocate(self) -> int:
        """The next producer id. When a new block cannot be persisted (a full disk), raises
        COORDINATOR_LOAD_IN_PROGRESS, Kafka's answer while no block is available: every client
        retries it, and the next try succeeds once the disk has room."""
        if self._next >= self._block_end:
            new_end = self._next + BLOCK_SIZE
            try:
                self.storage.write_atomic(_PATH, f"{new_end}\n".encode())
            except OSError as exc:
                log.error("cannot persist the next producer id block: %s", exc)
                raise KafkaProtocolError(
                    ErrorCode.coordinator_load_in_progress, "no producer id block available"
                ) from exc
            self._block_end = new_end
        producer_id = self._next
        self._next += 1
        return producer_id


class ClusterProducerIds:
    """Cluster mode: blocks of ids reserved from one counter in the metadata store (by
    compare-and-swap, so no two brokers get the same block), the next block fetched in the
    background once 90% of the current one is used, as Kafka's KIP-730 does. Without a block
    at hand the answer is COORDINATOR_LOAD_IN_PROGRESS, which clients retry."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._next = 0
        self._end = 0
        self._spare: tuple[int, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._prefetch()

    def allocate(self) -> int:
        if self._next >= self._end and self._spare is not None:
            (self._next, self._end), self._spare = self._spare, None
        if self._next >= self._end - BLOCK_SIZE // 10:
            self._prefetch()
        if self._next >= self._end:
            raise KafkaProtocolError(
                ErrorCode.coordinator_load_in_progress, "no producer id block available yet"
            )
        producer_id = self._next
        self._next += 1
        return producer_id

    def _prefetch(self) -> None:
        if self._task is None and self._spare is None:
            self._task = asyncio.get_running_loop().create_task(self._fetch())

    async def _fetch(self) -> None:
        try:
            start = await self.store.allocate_producer_ids(BLOCK_SIZE)
            self._spare = (start, start + BLOCK_SIZE)
        except Exception as exc:  # etcd away: the next allocation asks again
            log.warning("no producer id block from the metadata store: %s", exc)
        finally:
            self._task = None
