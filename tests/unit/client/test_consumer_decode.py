# Decoding a partition's Fetch records: position filtering, partial trailing batches, CRC
# checks, control batches and read_committed filtering of aborted transactions.
from __future__ import annotations

import pytest

from lockgate.client.batches import OutgoingRecord, ProducerIdentity, build_producer_batch
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import FetchedPartition, TimestampType, decode_fetched
from lockgate.client.errors import CorruptRecordError
from lockgate.protocol.records import assign_offset, build_control_batch

TP = TopicPartition("t", 0)


def _at(batch: bytes, base_offset: int, leader_epoch: int = 4) -> bytes:
    data = bytearray(batch)
    assign_offset(data, base_offset, leader_epoch)
    return bytes(data)


def _data(values: list[bytes], producer_id: int = -1, *, codec: int = 0) -> bytes:
    identity = ProducerIdentity(producer_id, 0, transactional=True) if producer_id >= 0 else None
    records: list[OutgoingRecord] = [(None, v, (), 1000 + i) for i, v in enumerate(values)]
    if identity is None:
        return build_producer_batch(records, codec=codec)
    return build_producer_batch(records, codec=codec, identity=identity, base_sequence=0)


def _marker(producer_id: int, commit: bool) -> bytes:
    return build_control_batch(producer_id, 0, commit, coordinator_epoch=0, timestamp_ms=2000)


# offsets: 0-1 plain, 2-3 txn of 7 (aborted), 4 txn of 8, 5 ABORT(7), 6 COMMIT(8),
# 7 txn of 7 (a later transaction), 8 COMMIT(7)
LOG = b"".join(
    [
        _at(_data([b"a", b"b"]), 0),
        _at(_data([b"aborted-1", b"aborted-2"], 7), 2),
        _at(_data([b"committed"], 8, codec=1), 4),
        _at(_marker(7, commit=False), 5),
        _at(_marker(8, commit=True), 6),
        _at(_data([b"later"], 7), 7),
        _at(_marker(7, commit=True), 8),
    ]
)
ABORTED = [(2, 7)]


def _values(result: FetchedPartition) -> list[tuple[int, bytes | None]]:
    return [(m.offset, m.value) for m in result.messages]


def test_read_uncommitted_returns_every_data_record_and_skips_markers() -> None:
    result = decode_fetched(TP, LOG, 0, None)
    assert _values(result) == [
        (0, b"a"),
        (1, b"b"),
        (2, b"aborted-1"),
        (3, b"aborted-2"),
        (4, b"committed"),
        (7, b"later"),
    ]
    assert result.next_position == 9
    first = result.messages[0]
    assert (first.topic, first.partition, first.leader_epoch) == ("t", 0, 4)
    assert (first.timestamp, first.timestamp_type) == (1000, TimestampType.CREATE_TIME)


def test_read_committed_drops_aborted_transactions_until_their_marker() -> None:
    result = decode_fetched(TP, LOG, 0, ABORTED)
    assert _values(result) == [(0, b"a"), (1, b"b"), (4, b"committed"), (7, b"later")]
    assert result.next_position == 9


def test_records_before_the_position_are_skipped_inside_a_batch() -> None:
    result = decode_fetched(TP, LOG, 1, ABORTED)
    assert _values(result)[0] == (1, b"b")
    result = decode_fetched(TP, LOG, 5, ABORTED)
    assert _values(result) == [(7, b"later")]


def test_a_position_past_everything_returns_nothing_and_keeps_the_position() -> None:
    result = decode_fetched(TP, LOG, 9, None)
    assert result.messages == [] and result.next_position is None


def test_a_cut_trailing_batch_is_left_for_the_next_fetch() -> None:
    first = _at(_data([b"a", b"b"]), 0)
    second = _at(_data([b"c"]), 2)
    result = decode_fetched(TP, first + second[:-3], 0, None)
    assert _values(result) == [(0, b"a"), (1, b"b")]
    assert result.next_position == 2
    assert decode_fetched(TP, second[:30], 2, None).next_position is None


def test_a_batch_that_fails_its_crc_is_reported() -> None:
    batch = bytearray(_at(_data([b"hello"]), 0))
    batch[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_fetched(TP, bytes(batch), 0, None)
    # with checks off the (still parseable) records come through
    assert len(decode_fetched(TP, bytes(batch), 0, None, check_crcs=False).messages) == 1


def test_only_the_aborting_producer_is_filtered() -> None:
    log = b"".join(
        [
            _at(_data([b"x"], 7), 0),
            _at(_data([b"y"], 9), 1),
            _at(_marker(7, commit=False), 2),
            _at(_marker(9, commit=True), 3),
        ]
    )
    assert _values(decode_fetched(TP, log, 0, [(0, 7)])) == [(1, b"y")]
