"""The producer id allocator: blocks persisted before use; a full disk is a retriable answer."""

from __future__ import annotations

import errno

import pytest

from lockgate.coordinator.txn.producer_ids import BLOCK_SIZE, ProducerIdManager
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.storage.memory import MemoryEngine


def test_ids_are_never_reused_across_restarts() -> None:
    storage = MemoryEngine()
    first = ProducerIdManager(storage)
    given = [first.allocate() for _ in range(3)]
    again = ProducerIdManager(storage).allocate()
    assert given == [0, 1, 2]
    assert again == BLOCK_SIZE  # the rest of the first block is skipped, never reused


def test_a_block_that_cannot_be_persisted_is_coordinator_load_in_progress() -> None:
    storage = MemoryEngine()
    storage.faults.atomic_errno = errno.ENOSPC
    manager = ProducerIdManager(storage)
    with pytest.raises(KafkaProtocolError) as raised:
        manager.allocate()
    assert raised.value.code == ErrorCode.coordinator_load_in_progress
    storage.faults.atomic_errno = None  # space came back: the retry gets the block
    assert manager.allocate() == 0
    assert ProducerIdManager(storage).allocate() == BLOCK_SIZE
