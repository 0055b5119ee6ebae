"""The producer id allocator: blocks persisted before use; a full disk is a retriable answer."""

from __future__ import annotations

import errno

import pytest

from lockgate.cluster.local import LocalMetadataStore
from lockgate.coordinator.txn.producer_ids import BLOCK_SIZE, ProducerIdManager
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.storage.memory import MemoryEngine


def manager(storage: MemoryEngine) -> ProducerIdManager:
    """A single node's allocator, as the broker opens it at start."""
    return ProducerIdManager(LocalMetadataStore(storage, 0))


def test_ids_are_never_reused_across_restarts() -> None:
    storage = MemoryEngine()
    first = manager(storage)
    given = [first.allocate() for _ in range(3)]
    again = manager(storage).allocate()
    assert given == [0, 1, 2]
    assert again == BLOCK_SIZE  # the rest of the first block is skipped, never reused


def test_a_block_that_cannot_be_persisted_is_coordinator_load_in_progress() -> None:
    storage = MemoryEngine()
    allocator = manager(storage)
    storage.faults.atomic_errno = errno.ENOSPC
    with pytest.raises(KafkaProtocolError) as raised:
        allocator.allocate()
    assert raised.value.code == ErrorCode.coordinator_load_in_progress
    storage.faults.atomic_errno = None  # space came back: the retry gets the block
    assert allocator.allocate() == 0
    assert manager(storage).allocate() == BLOCK_SIZE
