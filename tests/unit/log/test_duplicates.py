"""A resend of an idempotent producer's earlier batch (not its latest, which producer state
keeps) is answered with the batch's original offset, looked up in the log
(log/duplicates.py), on both storage engines: with other producers' batches between, across
segments and restarts, transactional batches and markers, LogAppendTime; and
DUPLICATE_SEQUENCE_NUMBER once the batch is gone (DeleteRecords, retention), when the resend
is cut differently, or past the search bound."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from lockgate.config.log import LogConfig
from lockgate.log import duplicates
from lockgate.log.duplicates import find_earlier_batch
from lockgate.log.partition import Partition
from lockgate.log.producer_state import Duplicate
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import TRANSACTIONAL_BIT, build_batch, validate_produced_batch
from lockgate.storage.engine import StorageEngine
from lockgate.storage.memory import MemoryEngine

PID = 500  # the producer whose batches are resent
OTHERS = [501, 502, 503, 504, 505]  # producers writing between its batches
SMALL_INDEX = LogConfig(index_interval_bytes=200)  # an index entry every couple of batches


def open_log(storage: StorageEngine, config: LogConfig = SMALL_INDEX) -> Partition:
    partition = Partition(storage, "t", 0, uuid.UUID(int=1), lambda: config)
    partition.load(1_000)
    return partition


def batch(
    producer_id: int, sequence: int, count: int = 3, epoch: int = 0, transactional: bool = False
) -> bytes:
    return build_batch(
        [(None, b"%d-%d" % (producer_id, sequence + i)) for i in range(count)],
        attributes=TRANSACTIONAL_BIT if transactional else 0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        timestamp_ms=5_000,
    )


def append(partition: Partition, data: bytes, now_ms: int = 2_000) -> tuple[int, int]:
    """(base offset, log append time) as Produce answers them; the high watermark follows."""
    answer = partition.append(bytearray(data), validate_produced_batch(data), now_ms)
    partition.advance_high_watermark(partition.log_end_offset)
    return answer


def refused(code: ErrorCode) -> pytest.RaisesExc[KafkaProtocolError]:
    return pytest.raises(KafkaProtocolError, check=lambda exc: exc.code == code)


def interleaved(partition: Partition, batches: int, count: int = 3, epoch: int = 0) -> list[int]:
    """`batches` batches of PID (sequences 0, count, 2*count...), each followed by one batch
    of every other producer; returns PID's base offsets."""
    offsets = []
    for i in range(batches):
        offsets.append(append(partition, batch(PID, i * count, count, epoch))[0])
        for other in OTHERS:
            append(partition, batch(other, i * 2, 2))
    return offsets


@pytest.mark.parametrize("behind", [1, 2, 4, 100])
def test_a_resend_behind_the_latest_gets_its_original_offset(
    storage: StorageEngine, behind: int
) -> None:
    partition = open_log(storage)
    offsets = interleaved(partition, 101)
    end = partition.log_end_offset
    resent = 100 - behind
    assert append(partition, batch(PID, resent * 3)) == (offsets[resent], -1)
    assert partition.log_end_offset == end, "a resend appended nothing"
    # the other producers' earlier batches too, and the next batch still follows
    assert append(partition, batch(OTHERS[2], 0, 2))[0] == offsets[0] + 1 + 3 * 2
    assert append(partition, batch(PID, 303))[0] == end


def test_large_and_small_batches_between(storage: StorageEngine) -> None:
    """Headers are read through a window of a page: batches larger than it, and headers cut
    by its end, are read anew from their own position."""
    partition = open_log(storage, LogConfig())  # the default index interval
    next_sequence = dict.fromkeys(OTHERS, 0)
    offsets = []
    for i in range(12):
        offsets.append(append(partition, batch(PID, i * 3))[0])
        for j, other in enumerate(OTHERS):
            count = (1, 7, 40, 1, 3)[(i + j) % 5]  # 40 records of 200 B: larger than a page
            data = build_batch(
                [(None, b"x" * 200)] * count,
                producer_id=other,
                producer_epoch=0,
                base_sequence=next_sequence[other],
            )
            next_sequence[other] += count
            append(partition, data)
    assert partition.size_bytes > 20 * duplicates.READ_AHEAD
    for i in range(11):
        assert append(partition, batch(PID, i * 3))[0] == offsets[i]


def test_every_unacknowledged_batch_of_five_in_flight(storage: StorageEngine) -> None:
    """What a client resends after a cut connection: its five batches in flight, in order."""
    partition = open_log(storage, LogConfig())  # the default index interval
    offsets = interleaved(partition, 12)
    for i in range(7, 12):
        assert append(partition, batch(PID, i * 3))[0] == offsets[i]
    assert partition.log_end_offset == offsets[-1] + 3 + 2 * len(OTHERS)


def test_a_resend_found_in_an_older_segment_and_after_a_restart(storage: StorageEngine) -> None:
    config = LogConfig(segment_bytes=700, index_interval_bytes=200)
    partition = open_log(storage, config)
    offsets = interleaved(partition, 30)
    assert len(partition.segments) > 10
    holding = [s for s in partition.segments if s.base_offset <= offsets[26] < s.next_offset]
    assert holding[0] is not partition.active, "the batch sought must lie in a sealed segment"
    assert append(partition, batch(PID, 26 * 3))[0] == offsets[26]
    partition.close()
    reopened = open_log(storage, config)  # indexes read back from storage
    for i in (25, 27, 28):
        assert append(reopened, batch(PID, i * 3))[0] == offsets[i]


def test_a_batch_below_the_log_start_is_gone(storage: StorageEngine) -> None:
    partition = open_log(storage)
    offsets = interleaved(partition, 10)
    partition.delete_records(offsets[6], 3_000)  # before batch 6: batches 0-5 are gone
    assert append(partition, batch(PID, 6 * 3))[0] == offsets[6]
    with refused(ErrorCode.duplicate_sequence_number):
        append(partition, batch(PID, 5 * 3))
    partition.delete_records(offsets[7] + 1, 3_000)  # inside batch 7: part of it is gone
    with refused(ErrorCode.duplicate_sequence_number):
        append(partition, batch(PID, 7 * 3))
    assert append(partition, batch(PID, 8 * 3))[0] == offsets[8]


def test_a_batch_deleted_by_retention_is_gone(storage: StorageEngine) -> None:
    config = LogConfig(segment_bytes=700, index_interval_bytes=200, retention_bytes=2_000)
    partition = open_log(storage, config)
    offsets = interleaved(partition, 30)
    assert partition.apply_retention(3_000) > 0
    start = partition.log_start_offset
    gone = max(i for i, offset in enumerate(offsets) if offset < start)
    kept = gone + 1
    with refused(ErrorCode.duplicate_sequence_number):
        append(partition, batch(PID, gone * 3))
    assert append(partition, batch(PID, kept * 3))[0] == offsets[kept]


def test_another_epoch_batch_with_the_same_sequences_is_not_the_one(
    storage: StorageEngine,
) -> None:
    """An idempotent producer bumps its epoch and starts again at 0: a resend carrying the new
    epoch gets the new epoch's batch; one carrying the old epoch is fenced."""
    partition = open_log(storage)
    old = interleaved(partition, 4)
    new = interleaved(partition, 4, epoch=1)
    assert append(partition, batch(PID, 0, epoch=1))[0] == new[0] != old[0]
    assert append(partition, batch(PID, 6, epoch=1))[0] == new[2]
    with refused(ErrorCode.invalid_producer_epoch):
        append(partition, batch(PID, 0, epoch=0))


def test_a_batch_of_an_older_epoch_is_never_answered(storage: StorageEngine) -> None:
    """Had compaction removed the new epoch's first batches, the search would reach the old
    epoch's with the same sequences: they are not the batch resent."""
    partition = open_log(storage)
    offsets = interleaved(partition, 3)
    entry = partition.producers.get(PID)
    assert entry is not None
    args = (partition.segments, partition.log_start_offset)
    assert find_earlier_batch(*args, entry, 0, 2) == Duplicate(offsets[0], -1)
    bumped = replace(entry, epoch=1)  # as if epoch 1's batches 0-2 and 3-5 were cleaned away
    assert find_earlier_batch(*args, bumped, 0, 2) is None


def test_a_resend_cut_differently_is_a_duplicate_without_offset(storage: StorageEngine) -> None:
    partition = open_log(storage)
    interleaved(partition, 6)  # PID: 0-2, 3-5, ..., 15-17
    end = partition.log_end_offset
    for first, count in (
        (3, 2),  # the batch at 3 ends at 5, not 4
        (4, 2),  # starts inside the batch at 3
        (0, 6),  # two batches at once
        (12, 6),  # reaches into the latest batch
        (15, 2),  # the latest batch's start, another end
    ):
        with refused(ErrorCode.duplicate_sequence_number):
            append(partition, batch(PID, first, count))
    with refused(ErrorCode.out_of_order_sequence_number):
        append(partition, batch(PID, 19))
    assert partition.log_end_offset == end


def test_transactional_batches_and_markers_between(storage: StorageEngine) -> None:
    partition = open_log(storage)
    offsets = []
    for i in range(4):
        offsets.append(append(partition, batch(PID, i * 3, transactional=True))[0])
        append(partition, batch(OTHERS[0], i * 2, 2, transactional=True))
    partition.write_marker(OTHERS[0], 0, True, 1, 3_000, False)
    assert append(partition, batch(PID, 3, transactional=True))[0] == offsets[1]
    partition.write_marker(PID, 0, False, 1, 3_000, False)  # aborted: the offsets stay
    assert append(partition, batch(PID, 0, transactional=True))[0] == offsets[0]
    assert append(partition, batch(PID, 6, transactional=True))[0] == offsets[2]


def test_log_append_time_is_the_original_one(storage: StorageEngine) -> None:
    partition = open_log(storage, LogConfig(log_append_time=True, index_interval_bytes=200))
    answers = [append(partition, batch(PID, i * 3), now_ms=10_000 + i) for i in range(5)]
    assert [time for _offset, time in answers] == [10_000, 10_001, 10_002, 10_003, 10_004]
    assert append(partition, batch(PID, 3), now_ms=20_000) == answers[1]


def test_the_search_stops_at_its_bound(storage: StorageEngine) -> None:
    """The bound counts headers read: past it, the answer is DUPLICATE_SEQUENCE_NUMBER however
    close the batch is."""
    partition = open_log(storage, LogConfig(index_interval_bytes=1 << 30))
    offsets = interleaved(partition, 3)
    entry = partition.producers.get(PID)
    assert entry is not None
    # one index entry (position 0): the search reads PID's batch 0, the others' and batch 1
    reads = 2 + len(OTHERS)
    for bound, found in ((reads - 1, None), (reads, Duplicate(offsets[1], -1))):
        args = (partition.segments, partition.log_start_offset, entry, 3, 5, bound)
        assert find_earlier_batch(*args) == found


def test_more_batches_between_than_the_bound_is_a_duplicate_without_offset(
    storage: StorageEngine,
) -> None:
    partition = open_log(storage, LogConfig())
    first = append(partition, batch(PID, 0))[0]
    for i in range(duplicates.MAX_HEADERS + 200):  # 200 more than one index entry covers
        append(partition, batch(OTHERS[i % len(OTHERS)], i // len(OTHERS), 1))
    append(partition, batch(PID, 3))
    with refused(ErrorCode.duplicate_sequence_number):
        append(partition, batch(PID, 0))
    # the bound, not the search, refused it
    entry = partition.producers.get(PID)
    assert entry is not None
    args = (partition.segments, partition.log_start_offset, entry, 0, 2)
    assert find_earlier_batch(*args, max_headers=2 * duplicates.MAX_HEADERS) == Duplicate(first, -1)


def test_a_storage_error_leaves_a_duplicate_without_offset() -> None:
    storage = MemoryEngine()
    partition = open_log(storage)
    interleaved(partition, 3)

    def failing_read(position: int, size: int) -> bytes:
        raise OSError(5, "I/O error")

    partition.active.log.read = failing_read  # type: ignore[method-assign]
    with refused(ErrorCode.duplicate_sequence_number):
        append(partition, batch(PID, 0))
