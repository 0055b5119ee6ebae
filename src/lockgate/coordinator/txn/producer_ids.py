# Producer id allocation: ids are handed out from blocks reserved in the metadata store, so no
# id is ever given twice, across restarts and crashes (a crash only skips the rest of the
# current block). Two engines, because the first id must be at hand at once on a single node:
# there the reservation is a synchronous write of the local store's counter when a block runs
# out; a cluster broker reserves its blocks over the network ahead of need (KIP-730).
from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from lockgate.cluster.metadata import MetadataStore
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000


class _Blocks(Protocol):
    def reserve_producer_ids(self, size: int) -> int:
        """Moves the persisted counter on by `size`; returns where it was (OSError: not)."""
        ...


class ProducerIdManager:
    """A single node's producer ids, from blocks of the local metadata store's counter."""

    def __init__(self, blocks: _Blocks) -> None:
        self.blocks = blocks
        # nothing of the persisted block is trusted after a restart: the first id is a new one's
        self._next = 0
        self._block_end = 0

    def allocate(self) -> int:
        """The next producer id. When a new block cannot be persisted (a full disk), raises
        COORDINATOR_LOAD_IN_PROGRESS, Kafka's answer while no block is available: every client
        retries it, and the next try succeeds once the disk has room."""
        if self._next >= self._block_end:
            try:
                start = self.blocks.reserve_producer_ids(BLOCK_SIZE)
            except OSError as exc:
                log.error("cannot persist the next producer id block: %s", exc)
                raise KafkaProtocolError(
                    ErrorCode.coordinator_load_in_progress, "no producer id block available"
                ) from exc
            self._next, self._block_end = start, start + BLOCK_SIZE
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
