"""Every producer-state rule of PROTOCOL.md / KAFKA-12207 at the state-machine level."""

from __future__ import annotations

import pytest

from lockgate.log.producer_state import (
    DUPLICATE_WINDOW,
    SEQUENCE_MODULUS,
    Duplicate,
    ProducerEntry,
    ProducerStateTable,
)
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError

PID = 1000


def table_with(epoch: int, first: int, last: int, last_offset: int = 50) -> ProducerStateTable:
    table = ProducerStateTable()
    table.record_append(PID, epoch, first, last, last_offset, 1234, -1)
    return table


def error_of(table: ProducerStateTable, epoch: int, first: int, last: int) -> ErrorCode:
    with pytest.raises(KafkaProtocolError) as raised:
        table.check(PID, epoch, first, last)
    return raised.value.code


def test_unknown_producer_starting_at_zero_is_accepted() -> None:
    assert ProducerStateTable().check(PID, 0, 0, 4) is None


def test_unknown_producer_mid_sequence_gets_unknown_producer_id() -> None:
    assert error_of(ProducerStateTable(), 0, 5, 9) == ErrorCode.unknown_producer_id


def test_next_batch_in_sequence_is_accepted() -> None:
    assert table_with(3, 0, 4).check(PID, 3, 5, 9) is None


def test_lower_epoch_is_fenced() -> None:
    assert error_of(table_with(3, 0, 4), 2, 5, 9) == ErrorCode.invalid_producer_epoch


def test_higher_epoch_must_start_at_zero() -> None:
    table = table_with(3, 0, 4)
    assert table.check(PID, 4, 0, 2) is None
    assert error_of(table, 4, 5, 9) == ErrorCode.out_of_order_sequence_number


def test_exact_retry_of_latest_batch_returns_original_offset() -> None:
    table = table_with(3, 5, 9, last_offset=59)
    assert table.check(PID, 3, 5, 9) == Duplicate(base_offset=55, timestamp=1234)


def test_older_sequence_within_window_is_duplicate() -> None:
    table = table_with(3, 2000, 2009)
    assert error_of(table, 3, 1990, 1999) == ErrorCode.duplicate_sequence_number
    # the same first sequence with another length is a duplicate too, not an exact retry
    assert error_of(table, 3, 2000, 2004) == ErrorCode.duplicate_sequence_number


def test_older_sequence_within_window_is_looked_up_in_the_log() -> None:
    """Only an older sequence within the window (not the latest batch's start) is looked up;
    what the lookup finds is the answer, else DUPLICATE_SEQUENCE_NUMBER."""
    table = table_with(3, 2000, 2009, last_offset=90)
    asked: list[tuple[int, int, int]] = []

    def lookup(latest: ProducerEntry, first: int, last: int) -> Duplicate | None:
        asked.append((latest.first_offset, first, last))
        return Duplicate(61, -1) if first == 1990 else None

    assert table.check(PID, 3, 1990, 1999, lookup) == Duplicate(61, -1)
    with pytest.raises(KafkaProtocolError) as raised:
        table.check(PID, 3, 1980, 1989, lookup)
    assert raised.value.code == ErrorCode.duplicate_sequence_number
    assert asked == [(81, 1990, 1999), (81, 1980, 1989)]
    # the exact retry, the latest batch's start cut otherwise, and sequences out of the
    # window are answered without a lookup
    assert table.check(PID, 3, 2000, 2009, lookup) == Duplicate(81, 1234)
    with pytest.raises(KafkaProtocolError) as raised:
        table.check(PID, 3, 2000, 2004, lookup)
    assert raised.value.code == ErrorCode.duplicate_sequence_number
    with pytest.raises(KafkaProtocolError) as raised:
        table.check(PID, 3, 2000 - DUPLICATE_WINDOW - 1, 1000, lookup)
    assert raised.value.code == ErrorCode.out_of_order_sequence_number
    assert len(asked) == 2


def test_window_edges() -> None:
    table = table_with(0, 5000, 5000)
    assert error_of(table, 0, 5000 - DUPLICATE_WINDOW, 5000 - DUPLICATE_WINDOW) == (
        ErrorCode.duplicate_sequence_number
    )
    too_old = 5000 - DUPLICATE_WINDOW - 1
    assert error_of(table, 0, too_old, too_old) == ErrorCode.out_of_order_sequence_number


def test_gap_is_out_of_order() -> None:
    assert error_of(table_with(0, 0, 4), 0, 7, 9) == ErrorCode.out_of_order_sequence_number


def test_sequence_wraps_at_int32_max() -> None:
    last = SEQUENCE_MODULUS - 1
    table = table_with(0, last - 4, last)
    assert table.check(PID, 0, 0, 4) is None
    table.record_append(PID, 0, 0, 4, 100, 1, -1)
    # a retry from just before the wrap is within the window
    assert error_of(table, 0, last - 4, last) == ErrorCode.duplicate_sequence_number
    assert table.check(PID, 0, 5, 5) is None


def test_duplicate_window_counts_across_the_wrap() -> None:
    table = table_with(0, 10, 10)
    behind = (10 - DUPLICATE_WINDOW) % SEQUENCE_MODULUS
    assert error_of(table, 0, behind, behind) == ErrorCode.duplicate_sequence_number


def test_state_after_marker_without_data_expects_zero() -> None:
    table = ProducerStateTable()
    table.put(ProducerEntry(PID, 2, -1, -1, 10, 0, -1, 5))
    assert table.check(PID, 2, 0, 0) is None
    assert error_of(table, 2, 1, 1) == ErrorCode.out_of_order_sequence_number


def test_only_latest_batch_is_kept() -> None:
    table = ProducerStateTable()
    for batch in range(10):
        table.record_append(PID, 0, batch * 5, batch * 5 + 4, batch * 5 + 4, batch, -1)
    assert len(table) == 1
    entry = table.get(PID)
    assert entry is not None
    assert (entry.first_sequence, entry.last_sequence, entry.first_offset) == (45, 49, 45)


def test_entries_stay_sorted_and_removable() -> None:
    table = ProducerStateTable()
    for pid in (50, 10, 30, 20, 40):
        table.record_append(pid, 0, 0, 0, pid, 0, -1)
    assert list(table.ids) == [10, 20, 30, 40, 50]
    table.remove(30)
    assert table.get(30) is None
    assert [e.producer_id for e in table.entries()] == [10, 20, 40, 50]


def test_expiry_keeps_recent_and_transactional_producers() -> None:
    table = ProducerStateTable()
    table.record_append(1, 0, 0, 0, 0, 100, -1)
    table.record_append(2, 0, 0, 0, 1, 5000, -1)
    table.record_append(3, 0, 0, 0, 2, 100, 2)  # open transaction
    assert table.expire(1000) == 1
    assert table.get(1) is None and table.get(2) is not None and table.get(3) is not None


def test_snapshot_round_trip_and_damage_detection() -> None:
    table = ProducerStateTable()
    for pid in range(100):
        table.record_append(pid, pid % 7, 0, pid, pid * 10, pid, -1 if pid % 3 else pid)
    data = table.snapshot(4242)
    loaded = ProducerStateTable.from_snapshot(data)
    assert loaded is not None
    restored, offset = loaded
    assert offset == 4242
    assert restored.entries() == table.entries()
    damaged = bytearray(data)
    damaged[30] ^= 0xFF
    assert ProducerStateTable.from_snapshot(bytes(damaged)) is None
    assert ProducerStateTable.from_snapshot(data[:-5]) is None
    assert ProducerStateTable.from_snapshot(b"") is None


def table_with_coordinator_epoch(coordinator_epoch: int) -> ProducerStateTable:
    table = ProducerStateTable()
    table.put(ProducerEntry(PID, 3, -1, -1, 50, 1234, -1, coordinator_epoch))
    return table


def test_a_marker_from_an_older_coordinator_epoch_is_fenced() -> None:
    table = table_with_coordinator_epoch(4)
    with pytest.raises(KafkaProtocolError) as raised:
        table.check_coordinator_epoch(PID, 3)
    assert raised.value.code == ErrorCode.transaction_coordinator_fenced


@pytest.mark.parametrize("coordinator_epoch", [4, 5])
def test_a_marker_from_the_same_or_a_newer_coordinator_epoch_passes(
    coordinator_epoch: int,
) -> None:
    table_with_coordinator_epoch(4).check_coordinator_epoch(PID, coordinator_epoch)


def test_an_unknown_coordinator_epoch_or_producer_is_not_fenced() -> None:
    table_with_coordinator_epoch(4).check_coordinator_epoch(PID, -1)  # a tool's "unknown"
    ProducerStateTable().check_coordinator_epoch(PID, 0)  # no marker recorded yet
    table_with_coordinator_epoch(-1).check_coordinator_epoch(PID, 0)
