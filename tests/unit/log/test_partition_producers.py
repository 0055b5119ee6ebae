"""Producer state inside a partition: dedup on append, snapshots, replay after a crash."""

from __future__ import annotations

import uuid

import pytest

from lockgate.config.log import LogConfig
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.storage.memory import MemoryEngine

PID = 77


def make_partition(storage: MemoryEngine, config: LogConfig | None = None) -> Partition:
    partition = Partition(storage, "t", 0, uuid.UUID(int=1), lambda: config or LogConfig())
    partition.load(1_000)
    return partition


def append(partition: Partition, sequence: int, count: int = 3, epoch: int = 0) -> tuple[int, int]:
    batch = build_batch(
        [(None, b"v%d" % i) for i in range(count)],
        producer_id=PID,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    return partition.append(bytearray(batch), validate_produced_batch(batch), 2_000)


def test_exact_retry_returns_original_offset_without_appending() -> None:
    partition = make_partition(MemoryEngine())
    assert append(partition, 0)[0] == 0
    assert append(partition, 3)[0] == 3
    assert append(partition, 3)[0] == 3
    assert partition.log_end_offset == 6


def test_older_batch_gets_its_offset_older_sequence_is_duplicate_gap_is_rejected() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, 0)
    append(partition, 3)
    assert append(partition, 0)[0] == 0  # found in the log (test_duplicates.py has the rest)
    for sequence, count, code in (
        (1, 2, ErrorCode.duplicate_sequence_number),  # no batch of the log starts there
        (9, 3, ErrorCode.out_of_order_sequence_number),
    ):
        with pytest.raises(KafkaProtocolError) as raised:
            append(partition, sequence, count)
        assert raised.value.code == code
    assert partition.log_end_offset == 6


@pytest.mark.parametrize("with_snapshot", [True, False])
def test_dedup_survives_restart(with_snapshot: bool) -> None:
    storage = MemoryEngine()
    partition = make_partition(storage)
    append(partition, 0)
    append(partition, 3)
    if with_snapshot:
        partition.close()
    else:  # a crash: no snapshot of the latest state, the log is replayed
        for name in [n for n in storage.files if n.endswith(".snapshot")]:
            del storage.files[name]
    reloaded = make_partition(storage)
    assert append(reloaded, 3)[0] == 3
    assert reloaded.log_end_offset == 6
    assert append(reloaded, 6)[0] == 6


def test_snapshot_at_roll_keeps_state_after_retention_deletes_the_segment() -> None:
    storage = MemoryEngine()
    config = LogConfig(segment_bytes=200, retention_bytes=0)
    partition = make_partition(storage, config)
    append(partition, 0)
    append(partition, 3)  # rolls: the first segment is sealed and a snapshot written
    partition.advance_high_watermark(partition.log_end_offset)
    assert partition.apply_retention(3_000) >= 1
    assert partition.log_start_offset > 0
    partition.close()
    reloaded = make_partition(storage, config)
    with pytest.raises(KafkaProtocolError) as raised:
        append(reloaded, 0)
    assert raised.value.code == ErrorCode.duplicate_sequence_number
