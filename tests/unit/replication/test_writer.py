"""The partition writer's two engines (replication/writer.py). Both append synchronously and
hand back the group commit's own futures. The local engine (a single node) checks nothing
before an append and commits a write once durable. The replicated engine asks the leader's
side of replication first (nothing is appended when it refuses); its acks=all writes also
wait for the ISR: produce's answer per partition (REQUEST_TIMED_OUT past the request's
timeout), a marker's or coordinator record's commit once durable and then replicated. The ISR
itself is a fake here; tests/unit/handlers/test_k27_write_txn_markers.py and
tests/unit/coordinator/test_coordinator_writes.py run the engine over a real ReplicaManager."""

from __future__ import annotations

import asyncio
import errno
import uuid

import pytest

from lockgate.config.log import LogConfig
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import CRC_OFFSET, build_batch
from lockgate.replication.group_commit import GroupCommit
from lockgate.replication.writer import (
    REPLICATION_TIMEOUT_MS,
    LocalWriter,
    PartitionWriter,
    ReplicatedWriter,
    Waits,
)
from lockgate.storage.memory import MemoryEngine, MemoryFaults

NOW = 1_700_000_000_000
CLOCK = NOW + 7
PRODUCER = 42
BATCH = build_batch([(b"k", b"v")], timestamp_ms=NOW)


def partition_on(engine: MemoryEngine, config: LogConfig | None = None) -> Partition:
    partition = Partition(engine, "t", 0, uuid.UUID(int=1), lambda: config or LogConfig())
    partition.load(NOW)
    return partition


def clock() -> int:
    return CLOCK


class FakeReplicas:
    """The leader's side of replication, driven by the test: a refusal before the append, and
    each ISR wait's answer set by hand."""

    def __init__(self) -> None:
        self.refusal = ErrorCode.none
        self.checked: list[int] = []  # the acks of each check
        self.waits: list[tuple[int, asyncio.Future[ErrorCode]]] = []  # (required end, answer)
        self.timeouts: list[float] = []

    def check_append(self, partition: Partition, acks: int) -> None:
        self.checked.append(acks)
        if self.refusal:
            raise KafkaProtocolError(self.refusal)

    def acknowledged(self, partition: Partition, required: int) -> asyncio.Future[ErrorCode]:
        waiter: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self.waits.append((required, waiter))
        return waiter

    async def replicated(self, partition: Partition, end: int, timeout_s: float) -> None:
        self.timeouts.append(timeout_s)
        answer = await self.acknowledged(partition, end)
        if answer:
            raise KafkaProtocolError(answer)


def never_refused(slot: str, answer: ErrorCode) -> None:
    raise AssertionError(f"{slot} refused: {answer.name}")


def produce(writer: PartitionWriter, partition: Partition, acks: int, waits: Waits[str]) -> int:
    records, header = writer.validate(partition, acks, BATCH, NOW)
    return writer.append(partition, records, header, NOW, acks, waits, "slot")[0]


# -- the local engine ---------------------------------------------------------------------------


@pytest.mark.parametrize("acks", [0, 1, -1])
async def test_a_local_append_waits_for_the_group_commit_only(acks: int) -> None:
    partition = partition_on(MemoryEngine(durable=True))
    commit = GroupCommit(durable=True)
    writer = LocalWriter(commit, clock)
    waits: Waits[str] = Waits()
    assert produce(writer, partition, acks, waits) == 0
    assert produce(writer, partition, acks, waits) == 1  # appended at once, in call order
    assert partition.log_end_offset == 2
    # the group commit's own future (one per flush), nothing of the writer's making
    assert waits.durable == [commit.appended(partition)] * 2 and waits.replicated == []
    assert await writer.acknowledged(waits, 1_000, never_refused)
    assert partition.high_watermark == 2


async def test_a_batch_the_validator_refuses_is_not_appended() -> None:
    partition = partition_on(MemoryEngine(), LogConfig(max_message_bytes=len(BATCH) - 1))
    writer = LocalWriter(GroupCommit(durable=False), clock)
    with pytest.raises(KafkaProtocolError) as refused:
        writer.validate(partition, -1, BATCH, NOW)
    assert refused.value.code == ErrorCode.message_too_large
    assert partition.log_end_offset == 0


async def test_a_failed_flush_is_not_acknowledged() -> None:
    faults = MemoryFaults()
    partition = partition_on(MemoryEngine(faults, durable=True))
    writer = LocalWriter(GroupCommit(durable=True), clock)
    faults.sync_errno = errno.EIO
    waits: Waits[str] = Waits()
    produce(writer, partition, -1, waits)
    assert not await writer.acknowledged(waits, 1_000, never_refused)
    assert partition.high_watermark == 0


async def test_nothing_to_wait_for_is_acknowledged() -> None:
    writer = LocalWriter(GroupCommit(durable=True), clock)
    nothing: Waits[str] = Waits()
    assert await writer.acknowledged(nothing, 1_000, never_refused)


async def test_a_local_marker_or_record_is_committed_once_durable() -> None:
    partition = partition_on(MemoryEngine(durable=True), LogConfig(log_append_time=True))
    commit = GroupCommit(durable=True)
    writer = LocalWriter(commit, clock)
    record = writer.write(partition, BATCH)
    assert record is commit.appended(partition)  # the flush's own future
    assert partition.active.max_timestamp == CLOCK  # appended at the writer's clock
    marker = writer.write_marker(partition, PRODUCER, 0, True, 1, NOW, strict_epoch=False)
    assert marker is commit.appended(partition)
    assert partition.log_end_offset == 2
    await asyncio.gather(record, marker)
    assert partition.high_watermark == 2


async def test_a_corrupt_coordinator_batch_is_refused_unwritten() -> None:
    partition = partition_on(MemoryEngine())
    writer = LocalWriter(GroupCommit(durable=False), clock)
    damaged = bytearray(BATCH)
    damaged[CRC_OFFSET] ^= 0xFF
    with pytest.raises(KafkaProtocolError) as refused:
        writer.write(partition, bytes(damaged))
    assert refused.value.code == ErrorCode.corrupt_message
    assert partition.log_end_offset == 0


# -- the replicated engine ----------------------------------------------------------------------


def replicated() -> tuple[ReplicatedWriter, FakeReplicas, Partition]:
    replicas = FakeReplicas()
    writer = ReplicatedWriter(GroupCommit(durable=False), replicas, clock)
    return writer, replicas, partition_on(MemoryEngine())


async def test_the_leaders_refusal_comes_first_and_appends_nothing() -> None:
    writer, replicas, partition = replicated()
    replicas.refusal = ErrorCode.not_enough_replicas
    for attempt in (
        lambda: writer.validate(partition, -1, None, NOW),  # before the validator's checks
        lambda: writer.write(partition, BATCH),
        lambda: writer.write_marker(partition, PRODUCER, 0, True, 1, NOW, strict_epoch=False),
    ):
        with pytest.raises(KafkaProtocolError) as refused:
            attempt()
        assert refused.value.code == ErrorCode.not_enough_replicas
    assert replicas.checked == [-1, -1, -1]  # markers and coordinator records: acks=all
    assert partition.log_end_offset == 0


@pytest.mark.parametrize("acks", [0, 1])
async def test_a_produce_without_acks_all_waits_for_no_replica(acks: int) -> None:
    writer, replicas, partition = replicated()
    waits: Waits[str] = Waits()
    produce(writer, partition, acks, waits)
    assert replicas.checked == [acks]
    assert len(waits.durable) == 1 and waits.replicated == [] and replicas.waits == []


async def test_an_acks_all_produce_waits_for_the_isr_past_its_end() -> None:
    writer, replicas, partition = replicated()
    waits: Waits[str] = Waits()
    produce(writer, partition, -1, waits)
    produce(writer, partition, -1, waits)
    assert [required for required, _ in replicas.waits] == [1, 2]
    assert waits.replicated == [("slot", waiter) for _, waiter in replicas.waits]
    answered = asyncio.ensure_future(writer.acknowledged(waits, 5_000, never_refused))
    await asyncio.sleep(0.01)
    assert not answered.done()
    for _, waiter in replicas.waits:
        waiter.set_result(ErrorCode.none)
    assert await answered


async def test_each_isr_answer_goes_to_its_slot() -> None:
    writer, replicas, partition = replicated()
    waits: Waits[str] = Waits()
    for slot in ("shrank", "moved", "late", "fine"):
        records, header = writer.validate(partition, -1, BATCH, NOW)
        writer.append(partition, records, header, NOW, -1, waits, slot)
    (_, shrank), (_, moved), (_, late), (_, fine) = replicas.waits
    shrank.set_result(ErrorCode.not_enough_replicas_after_append)
    moved.set_exception(KafkaProtocolError(ErrorCode.not_leader_or_follower))
    fine.set_result(ErrorCode.none)
    refused: dict[str, ErrorCode] = {}
    assert await writer.acknowledged(waits, 50, refused.__setitem__)  # the flushes succeeded
    assert refused == {
        "shrank": ErrorCode.not_enough_replicas_after_append,
        "moved": ErrorCode.not_leader_or_follower,
        "late": ErrorCode.request_timed_out,  # the records stay on the log
    }
    assert late.cancelled() and partition.log_end_offset == 4


async def test_a_duplicate_waits_like_an_append() -> None:
    writer, replicas, partition = replicated()
    produce(writer, partition, -1, Waits())
    waits: Waits[str] = Waits()
    writer.wait(partition, -1, waits, "duplicate")
    assert len(waits.durable) == 1
    assert waits.replicated == [("duplicate", replicas.waits[-1][1])]
    assert replicas.waits[-1][0] == partition.log_end_offset


@pytest.mark.parametrize("kind", ["marker", "record"])
async def test_a_replicated_write_commits_once_durable_then_in_the_isr(kind: str) -> None:
    writer, replicas, partition = replicated()
    if kind == "marker":
        committed = writer.write_marker(partition, PRODUCER, 0, True, 1, NOW, strict_epoch=False)
    else:
        committed = writer.write(partition, BATCH)
    assert partition.log_end_offset == 1  # written before any await
    await asyncio.sleep(0.01)
    assert not committed.done()
    assert [required for required, _ in replicas.waits] == [1]
    assert replicas.timeouts == [REPLICATION_TIMEOUT_MS / 1000]
    replicas.waits[0][1].set_result(ErrorCode.none)
    await asyncio.wait_for(committed, 5)


async def test_a_replicated_write_the_isr_refuses_fails_with_its_error() -> None:
    writer, replicas, partition = replicated()
    committed = writer.write(partition, BATCH)
    await asyncio.sleep(0.01)
    replicas.waits[0][1].set_result(ErrorCode.not_enough_replicas_after_append)
    with pytest.raises(KafkaProtocolError) as failed:
        await asyncio.wait_for(committed, 5)
    assert failed.value.code == ErrorCode.not_enough_replicas_after_append


async def test_a_replicated_write_whose_flush_fails_waits_for_no_replica() -> None:
    faults = MemoryFaults()
    replicas = FakeReplicas()
    writer = ReplicatedWriter(GroupCommit(durable=True), replicas, clock)
    partition = partition_on(MemoryEngine(faults, durable=True))
    faults.sync_errno = errno.EIO
    committed = writer.write(partition, BATCH)
    with pytest.raises(OSError):
        await asyncio.wait_for(committed, 5)
    assert replicas.waits == []
