"""The partition side of transactions: transactional batches open a transaction, COMMIT/ABORT
markers end it, the last stable offset, the aborted-transaction index, the epoch checks of
markers (strict under transaction version 2), and all of it after a restart or a crash."""

from __future__ import annotations

import uuid

import pytest

from lockgate.config.log import LogConfig
from lockgate.log.partition import Partition
from lockgate.log.txn_index import AbortedTxn
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    TRANSACTIONAL_BIT,
    build_batch,
    control_type,
    validate_produced_batch,
)
from lockgate.storage.memory import MemoryEngine

TXN = 77  # a transactional producer
OTHER_TXN = 88
IDEMPOTENT = 5
COORDINATOR_EPOCH = 3
KAFKA_TXN_INDEX_ENTRY = 34  # version i16, producer id i64, first i64, last i64, LSO i64


def make_partition(storage: MemoryEngine, config: LogConfig | None = None) -> Partition:
    partition = Partition(storage, "t", 0, uuid.UUID(int=1), lambda: config or LogConfig())
    partition.load(1_000)
    return partition


def append(
    partition: Partition,
    producer_id: int,
    epoch: int,
    sequence: int,
    count: int = 3,
    transactional: bool = True,
) -> int:
    """Appends and lets the high watermark follow (as after a durable write); returns the
    batch's base offset."""
    batch = build_batch(
        [(None, b"v%d" % i) for i in range(count)],
        attributes=TRANSACTIONAL_BIT if transactional else 0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    base, _ = partition.append(bytearray(batch), validate_produced_batch(batch), 2_000)
    partition.advance_high_watermark(partition.log_end_offset)
    return base


def marker(
    partition: Partition, producer_id: int, epoch: int, commit: bool, strict: bool = False
) -> int:
    offset = partition.write_marker(producer_id, epoch, commit, COORDINATOR_EPOCH, 3_000, strict)
    partition.advance_high_watermark(partition.log_end_offset)
    return offset


def refused(code: ErrorCode) -> pytest.RaisesExc[KafkaProtocolError]:
    return pytest.raises(KafkaProtocolError, check=lambda exc: exc.code == code)


def control_type_at(partition: Partition, offset: int) -> int:
    for segment, position, header in partition.batches_from(offset):
        if header.base_offset == offset:
            assert header.is_control and header.is_transactional
            return control_type(segment.log.read(position, header.size))
    raise AssertionError(f"no batch at {offset}")


# -- opening and ending a transaction --


def test_transactional_batches_open_a_transaction_that_holds_the_last_stable_offset() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, IDEMPOTENT, 0, 0, transactional=False)  # 0..2
    assert partition.last_stable_offset == partition.high_watermark == 3
    first = append(partition, TXN, 1, 0)  # 3..5
    assert first == 3
    assert partition.open_txns == {TXN: 3}
    assert partition.last_stable_offset == 3
    append(partition, TXN, 1, 3)  # 6..8: the same transaction
    append(partition, OTHER_TXN, 0, 0)  # 9..11: another one, opened later
    assert partition.open_txns == {TXN: 3, OTHER_TXN: 9}
    assert partition.high_watermark == 12
    assert partition.last_stable_offset == 3


def test_last_stable_offset_never_passes_the_high_watermark() -> None:
    partition = make_partition(MemoryEngine())
    batch = build_batch([(None, b"x")], producer_id=IDEMPOTENT, producer_epoch=0, base_sequence=0)
    partition.append(bytearray(batch), validate_produced_batch(batch), 2_000)  # not yet durable
    assert partition.high_watermark == 0 and partition.last_stable_offset == 0
    append(partition, TXN, 1, 0)
    assert partition.open_txns == {TXN: 1}
    assert partition.last_stable_offset == 1


def test_commit_marker_closes_the_transaction() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 1, 0)  # 0..2
    append(partition, OTHER_TXN, 0, 0)  # 3..5
    offset = marker(partition, TXN, 1, commit=True)
    assert offset == 6
    assert control_type_at(partition, offset) == CONTROL_COMMIT
    assert partition.open_txns == {OTHER_TXN: 3}
    assert partition.last_stable_offset == 3
    marker(partition, OTHER_TXN, 0, commit=True)
    assert partition.open_txns == {}
    assert partition.last_stable_offset == partition.high_watermark == 8
    assert partition.aborted.entries == []


def test_abort_marker_records_the_aborted_transaction() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, IDEMPOTENT, 0, 0, transactional=False)  # 0..2
    append(partition, TXN, 1, 0)  # 3..5
    append(partition, IDEMPOTENT, 0, 3, transactional=False)  # 6..8
    append(partition, TXN, 1, 3)  # 9..11
    offset = marker(partition, TXN, 1, commit=False)
    assert offset == 12
    assert control_type_at(partition, offset) == CONTROL_ABORT
    assert partition.open_txns == {}
    assert partition.last_stable_offset == partition.high_watermark == 13
    [entry] = partition.aborted.entries
    assert (entry.producer_id, entry.first_offset, entry.last_offset) == (TXN, 3, 12)
    for start, end in [(0, 4), (3, 4), (5, 9), (12, 13), (0, 100)]:
        assert partition.aborted.overlapping(start, end) == [entry], (start, end)
    for start, end in [(0, 3), (13, 20)]:
        assert partition.aborted.overlapping(start, end) == [], (start, end)


def test_aborted_transactions_are_listed_in_marker_order() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 1, 0)  # 0..2
    append(partition, OTHER_TXN, 0, 0)  # 3..5
    marker(partition, OTHER_TXN, 0, commit=False)  # 6
    marker(partition, TXN, 1, commit=False)  # 7
    entries = partition.aborted.overlapping(0, 8)
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in entries] == [
        (OTHER_TXN, 3, 6),
        (TXN, 0, 7),
    ]
    assert [e.producer_id for e in partition.aborted.overlapping(7, 8)] == [TXN]


def test_marker_without_an_open_transaction_records_nothing() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 1, 0)
    marker(partition, TXN, 1, commit=True)
    marker(partition, TXN, 1, commit=False)  # e.g. a resent marker
    assert partition.aborted.entries == []
    assert partition.open_txns == {}


# -- epochs of markers --


@pytest.mark.parametrize("strict", [False, True], ids=["TV1", "TV2"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_marker_with_an_older_epoch_is_refused(strict: bool, commit: bool) -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 4, 0)
    end = partition.log_end_offset
    with refused(ErrorCode.invalid_producer_epoch):
        marker(partition, TXN, 3, commit, strict)
    assert partition.log_end_offset == end
    assert partition.open_txns == {TXN: 0}
    assert partition.aborted.entries == []


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_tv2_marker_must_carry_an_epoch_above_the_transactions_data(commit: bool) -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 4, 0)
    end = partition.log_end_offset
    with refused(ErrorCode.invalid_producer_epoch):
        marker(partition, TXN, 4, commit, strict=True)
    assert partition.log_end_offset == end and partition.open_txns == {TXN: 0}
    marker(partition, TXN, 5, commit, strict=True)
    assert partition.open_txns == {}
    assert len(partition.aborted.entries) == (0 if commit else 1)


def test_tv1_marker_with_the_transactions_epoch_is_accepted() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 4, 0)
    marker(partition, TXN, 4, commit=True, strict=False)
    assert partition.open_txns == {}
    append(partition, TXN, 4, 3)  # the producer carries on in the same epoch
    assert partition.open_txns == {TXN: 4}


@pytest.mark.parametrize("strict", [False, True], ids=["TV1-fence", "TV2"])
def test_after_a_bumped_marker_the_producer_restarts_at_sequence_zero(strict: bool) -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 4, 0)  # sequences 0..2
    marker(partition, TXN, 5, commit=False, strict=strict)
    with refused(ErrorCode.invalid_producer_epoch):
        append(partition, TXN, 4, 3)  # the old epoch is fenced
    with refused(ErrorCode.out_of_order_sequence_number):
        append(partition, TXN, 5, 3)
    assert append(partition, TXN, 5, 0) == 4
    assert partition.open_txns == {TXN: 4}


def test_tv2_marker_is_refused_while_a_later_transaction_is_open() -> None:
    """A delayed marker of the previous transaction (epoch e+1) must not end the next one,
    whose data the producer writes with e+1."""
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 4, 0)
    marker(partition, TXN, 5, commit=True, strict=True)
    append(partition, TXN, 5, 0)  # the next transaction
    with refused(ErrorCode.invalid_producer_epoch):
        marker(partition, TXN, 5, commit=True, strict=True)
    assert partition.open_txns == {TXN: 4}


# -- mixing transactional and non-transactional writes --


def test_non_transactional_batch_inside_an_open_transaction_is_refused() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 4, 0)
    end = partition.log_end_offset
    with refused(ErrorCode.invalid_txn_state):
        append(partition, TXN, 4, 3, transactional=False)
    assert partition.log_end_offset == end
    marker(partition, TXN, 4, commit=True)
    assert append(partition, TXN, 4, 3, transactional=False) == end + 1  # after the marker


# -- restart and crash --


def build_history(partition: Partition) -> None:
    """Aborted, committed and still open transactions of three producers over several
    segments (a small segment size makes the log roll)."""
    append(partition, TXN, 4, 0)  # aborted under TV2 with a bumped marker
    append(partition, IDEMPOTENT, 0, 0, transactional=False)
    append(partition, OTHER_TXN, 0, 0)
    marker(partition, TXN, 5, commit=False, strict=True)
    marker(partition, OTHER_TXN, 0, commit=True)
    append(partition, OTHER_TXN, 0, 3)  # aborted under TV1
    marker(partition, OTHER_TXN, 0, commit=False)
    append(partition, TXN, 5, 0)  # still open
    append(partition, 99, 2, 0)  # still open


def observable(partition: Partition) -> dict[str, object]:
    return {
        "log end": partition.log_end_offset,
        "open": dict(partition.open_txns),
        "last stable": partition.last_stable_offset,
        "aborted": list(partition.aborted.entries),
        "overlapping": partition.aborted.overlapping(0, partition.log_end_offset),
        "producers": [
            (e.producer_id, e.epoch, e.first_sequence, e.last_sequence, e.last_offset,
             e.txn_first_offset)
            for e in partition.producers.entries()
        ],
    }  # fmt: skip


def snapshots(storage: MemoryEngine) -> list[str]:
    return sorted(n for n in storage.files if n.endswith(".snapshot"))


@pytest.mark.parametrize("restart", ["clean", "crash", "crash-torn-snapshot", "crash-no-snapshot"])
def test_transaction_state_survives_a_restart(restart: str) -> None:
    storage = MemoryEngine()
    config = LogConfig(segment_bytes=250)
    partition = make_partition(storage, config)
    build_history(partition)
    assert len(partition.segments) > 2
    before = observable(partition)
    open_before = dict(partition.open_txns)
    assert set(open_before) == {TXN, 99}
    assert len(partition.aborted.entries) == 2
    # the log rolled: snapshots exist, the older one before the last abort marker
    assert len(snapshots(storage)) == 2
    oldest = int(snapshots(storage)[0].split("/")[-1].split(".")[0])
    assert oldest < partition.aborted.entries[-1].last_offset
    if restart == "clean":  # with a snapshot of the latest state
        partition.close()
    elif restart == "crash":  # the newest snapshot is older than the log end: a replay after it
        pass
    elif restart == "crash-torn-snapshot":  # the newest is unreadable: the older one + replay
        storage.files[snapshots(storage)[-1]][-6:] = b"\xff" * 6
    else:  # the whole log is replayed
        for name in snapshots(storage):
            del storage.files[name]
    reloaded = make_partition(storage, config)
    assert observable(reloaded) == before

    # the restored state behaves as before
    with refused(ErrorCode.invalid_producer_epoch):
        append(reloaded, TXN, 4, 3)
    with refused(ErrorCode.invalid_txn_state):
        append(reloaded, 99, 2, 3, transactional=False)
    with refused(ErrorCode.invalid_producer_epoch):
        marker(reloaded, TXN, 5, commit=False, strict=True)
    aborted_at = marker(reloaded, TXN, 6, commit=False, strict=True)
    assert reloaded.aborted.entries[-1].last_offset == aborted_at
    assert reloaded.open_txns == {99: open_before[99]}
    assert reloaded.last_stable_offset == open_before[99]


def test_aborted_index_is_kept_in_kafkas_txnindex_files() -> None:
    storage = MemoryEngine()
    config = LogConfig(segment_bytes=250)
    partition = make_partition(storage, config)
    build_history(partition)
    files = {n: bytes(d) for n, d in storage.files.items() if n.endswith(".txnindex") and d}
    assert sum(len(d) for d in files.values()) == 2 * KAFKA_TXN_INDEX_ENTRY
    partition.close()
    for name in [n for n in storage.files if n.endswith(".snapshot")]:
        del storage.files[name]
    reloaded = make_partition(storage, config)
    assert {n: bytes(d) for n, d in storage.files.items() if n.endswith(".txnindex") and d} == (
        files
    )  # replaying the markers does not write the entries twice
    assert [
        AbortedTxn(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
        for e in reloaded.aborted.entries
    ] == partition.aborted.entries


# -- coordinator epochs of markers --


def coordinator_marker(partition: Partition, coordinator_epoch: int, epoch: int = 1) -> int:
    offset = partition.write_marker(TXN, epoch, True, coordinator_epoch, 3_000, False)
    partition.advance_high_watermark(partition.log_end_offset)
    return offset


def recorded_coordinator_epoch(partition: Partition) -> int:
    entry = partition.producers.get(TXN)
    assert entry is not None
    return entry.coordinator_epoch


def test_marker_from_an_older_coordinator_epoch_is_fenced() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 1, 0)
    coordinator_marker(partition, 4)
    append(partition, TXN, 1, 3)  # the next transaction
    end = partition.log_end_offset
    with refused(ErrorCode.transaction_coordinator_fenced):
        coordinator_marker(partition, 3)
    assert partition.log_end_offset == end and partition.open_txns == {TXN: 4}
    assert recorded_coordinator_epoch(partition) == 4
    coordinator_marker(partition, 4)  # the same coordinator again (a resent marker)
    append(partition, TXN, 1, 6)
    coordinator_marker(partition, 6)
    assert recorded_coordinator_epoch(partition) == 6 and partition.open_txns == {}


def test_an_older_producer_epoch_is_refused_before_the_coordinator_epoch() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 2, 0)
    coordinator_marker(partition, 4, epoch=2)
    with refused(ErrorCode.invalid_producer_epoch):
        coordinator_marker(partition, 3, epoch=1)  # both stale: Kafka checks the epoch first


def test_an_unknown_coordinator_epoch_is_accepted_and_keeps_the_recorded_one() -> None:
    partition = make_partition(MemoryEngine())
    append(partition, TXN, 1, 0)
    coordinator_marker(partition, 4)
    append(partition, TXN, 1, 3)
    coordinator_marker(partition, -1)  # an operator's abort with what DescribeProducers showed
    assert partition.open_txns == {} and recorded_coordinator_epoch(partition) == 4


@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "replay"])
def test_the_coordinator_epoch_fence_survives_a_restart(snapshot: bool) -> None:
    storage = MemoryEngine()
    partition = make_partition(storage)
    append(partition, TXN, 1, 0)
    coordinator_marker(partition, 4)
    partition.close()
    if not snapshot:  # the markers' own coordinator epochs are read back from the log
        for name in snapshots(storage):
            del storage.files[name]
    reloaded = make_partition(storage)
    assert recorded_coordinator_epoch(reloaded) == 4
    append(reloaded, TXN, 1, 3)
    with refused(ErrorCode.transaction_coordinator_fenced):
        coordinator_marker(reloaded, 3)
