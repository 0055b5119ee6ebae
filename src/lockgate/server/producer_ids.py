# Producer id allocation: ids are handed out from blocks whose end is persisted before the
# first id of the block is used, so no id is ever given twice, across restarts and crashes
# (a crash only skips the rest of the current block).
from __future__ import annotations

import logging

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
