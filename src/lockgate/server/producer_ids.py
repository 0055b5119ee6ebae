# Producer id allocation: ids are handed out from blocks whose end is persisted before the
# first id of the block is used, so no id is ever given twice, across restarts and crashes
# (a crash only skips the rest of the current block).
from __future__ import annotations

from lockgate.storage.engine import StorageEngine

BLOCK_SIZE = 1000
_PATH = "producer-id-block"


class ProducerIdManager:
    def __init__(self, storage: StorageEngine) -> None:
        self.storage = storage
        raw = storage.read_all(_PATH)
        self._block_end = int(raw.decode().strip()) if raw else 0
        self._next = self._block_end  # nothing of the persisted block is trusted after a restart

    def allocate(self) -> int:
        if self._next >= self._block_end:
            new_end = self._next + BLOCK_SIZE
            self.storage.write_atomic(_PATH, f"{new_end}\n".encode())
            self._block_end = new_end
        producer_id = self._next
        self._next += 1
        return producer_id
