"""ListOffsets' special timestamps at the partition level, numbered as Kafka's
ListOffsetsRequest (-5 latest-tiered, -6 earliest-pending-upload) and answered as a Kafka broker
without remote storage answers them."""

from __future__ import annotations

import uuid

from lockgate.config.log import LogConfig
from lockgate.handlers.k02_list_offsets import (
    EARLIEST,
    EARLIEST_LOCAL,
    EARLIEST_PENDING_UPLOAD,
    LATEST,
    LATEST_TIERED,
    MAX_TIMESTAMP,
    lookup,
)
from lockgate.log.partition import Partition
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.storage.memory import MemoryEngine

NOW = 1_000_000


def partition_with_records() -> Partition:
    partition = Partition(MemoryEngine(), "topic", 0, uuid.UUID(int=1), LogConfig)
    partition.load(NOW)
    for timestamp in (1_000, 3_000, 2_000):
        batch = build_batch([(None, b"a"), (None, b"b")], timestamp_ms=timestamp)
        partition.append(bytearray(batch), validate_produced_batch(batch), NOW)
    partition.advance_high_watermark(partition.log_end_offset)
    partition.delete_records(1, NOW)
    return partition


def test_numbering_is_kafkas() -> None:
    assert (LATEST, EARLIEST, MAX_TIMESTAMP) == (-1, -2, -3)
    assert (EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD) == (-4, -5, -6)


def test_special_timestamps_without_tiered_storage() -> None:
    partition = partition_with_records()
    assert lookup(partition, LATEST, 0) == (6, -1)
    assert lookup(partition, EARLIEST, 0) == (1, -1)
    # every record is local: earliest-local is the log start; nothing is ever to be
    # uploaded: Kafka 4.4 answers earliest-pending-upload with offset -1
    assert lookup(partition, EARLIEST_LOCAL, 0) == (1, -1)
    assert lookup(partition, EARLIEST_PENDING_UPLOAD, 0) == (-1, -1)
    # nothing was ever tiered: Kafka answers offset -1 when remote storage is off
    assert lookup(partition, LATEST_TIERED, 0) == (-1, -1)
    assert lookup(partition, MAX_TIMESTAMP, 0) == (2, 3_000)
