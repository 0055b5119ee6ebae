# Append as a partition's leader, then wait until the write is durable and, in a cluster,
# replicated: the one way produce, transaction markers and the coordinators' own records reach
# a log this broker leads (Kafka's ReplicaManager.appendRecords, and the PartitionWriter its
# coordinators write through). Two engines, chosen once by the composition root:
# - LocalWriter (a single node): this node leads every partition and is its whole ISR, so a
#   write is committed once the group commit made it durable (replication/group_commit.py).
# - ReplicatedWriter (a cluster): before an append the partition must be led here, and an
#   acks=all write needs min.insync.replicas in the ISR (NOT_LEADER_OR_FOLLOWER,
#   NOT_ENOUGH_REPLICAS, nothing appended); after it, an acks=all write also waits for the high
#   watermark, the ISR's minimum, to pass it (replication/manager.py).
# Invariant: every append happens synchronously in the caller's call, before any await, so
# pipelined requests and a coordinator's successive records reach the log in their order. What
# to wait for comes back as futures (the group commit's own, or the ISR waiter's), so the
# produce path allocates nothing and schedules nothing more than the waits themselves.
from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from lockgate.log.partition import Partition
from lockgate.log.validator import validate as validate_batch
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import BatchHeader, validate_produced_batch
from lockgate.replication.group_commit import GroupCommit

ACKS_ALL = -1
# How long markers and coordinator records wait for the ISR: Kafka appends them with the
# broker's request.timeout.ms (30 s by default), a key lockgate does not have. Produce waits
# for its request's own timeout instead.
REPLICATION_TIMEOUT_MS = 30_000

T = TypeVar("T")


class Replicas(Protocol):
    """The leader's side of replication the replicated engine calls (ReplicaManager)."""

    def check_append(self, partition: Partition, acks: int) -> None: ...

    def acknowledged(self, partition: Partition, required: int) -> asyncio.Future[ErrorCode]: ...

    async def replicated(self, partition: Partition, end: int, timeout_s: float) -> None: ...


@dataclass(slots=True)
class Waits(Generic[T]):
    """What the answers to a request's appends wait for: the flushes covering them, and with
    the replicated engine each acks=all append's ISR answer, next to the caller's slot `T` for
    it (the partition's answer)."""

    durable: list[asyncio.Future[None]] = field(default_factory=list)
    replicated: list[tuple[T, asyncio.Future[ErrorCode]]] = field(default_factory=list)


class PartitionWriter:
    """What both engines share; an engine says what an append needs beforehand (`check`),
    what an append of a produce waits for (`wait`), and when a record is committed
    (`_committed`)."""

    def __init__(self, group_commit: GroupCommit, clock: Callable[[], int]) -> None:
        self.group_commit = group_commit
        self.clock = clock  # milliseconds: the time coordinator records are appended at

    # -- what each engine decides ----------------------------------------------------------

    def check(self, partition: Partition, acks: int) -> None:
        """Raises KafkaProtocolError if this broker may not append there with `acks`."""
        raise NotImplementedError

    def wait(self, partition: Partition, acks: int, waits: Waits[T], slot: T) -> None:
        """Registers what an append that just ended the log (or a resent batch answered as a
        duplicate, which waits like one) is answered after; `slot` marks its answer."""
        raise NotImplementedError

    def _committed(
        self, partition: Partition, durable: asyncio.Future[None]
    ) -> asyncio.Future[None]:
        """The future of an acks=all record that the group commit makes durable as `durable`."""
        raise NotImplementedError

    # -- produce -----------------------------------------------------------------------------

    def validate(
        self, partition: Partition, acks: int, records: bytes | None, now_ms: int
    ) -> tuple[bytes, BatchHeader]:
        """The leader's checks and the log's (log/validator.py), in that order: the batch to
        append and its header, or KafkaProtocolError with the partition's answer."""
        self.check(partition, acks)
        return validate_batch(records, partition.config, now_ms)

    def append(
        self,
        partition: Partition,
        records: bytes,
        header: BatchHeader,
        now_ms: int,
        acks: int,
        waits: Waits[T],
        slot: T,
    ) -> tuple[int, int]:
        """Appends a validated batch; returns (base offset, log append time or -1) and adds
        its waits. Raises as Partition.append does (nothing appended then, nothing added)."""
        appended = partition.append(bytearray(records), header, now_ms)
        self.wait(partition, acks, waits, slot)
        return appended

    async def acknowledged(
        self, waits: Waits[T], timeout_ms: int, refuse: Callable[[T, ErrorCode], None]
    ) -> bool:
        """acks=all: first each ISR answer, `refuse` called with the slot of every one that is
        an error (REQUEST_TIMED_OUT past `timeout_ms`: the records stay on the leader's log);
        then the flushes. False if a flush failed: none of these appends may be acknowledged."""
        if waits.replicated:
            await _isr_answers(waits.replicated, timeout_ms, refuse)
        if not waits.durable:
            return True
        outcomes = await asyncio.gather(*waits.durable, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, OSError):
                raise outcome
        return not any(isinstance(outcome, OSError) for outcome in outcomes)

    # -- markers and coordinator records (acks=all) -------------------------------------------

    def write_marker(
        self,
        partition: Partition,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
        strict_epoch: bool,
    ) -> asyncio.Future[None]:
        """Writes a COMMIT/ABORT marker (Partition.write_marker's checks) and returns the
        future of its commit; raises before writing anything if it may not."""
        self.check(partition, ACKS_ALL)
        partition.write_marker(
            producer_id, producer_epoch, commit, coordinator_epoch, now_ms, strict_epoch
        )
        return self._committed(partition, self.group_commit.appended(partition))

    def write(
        self, partition: Partition, batch: bytes, internal: bool = False
    ) -> asyncio.Future[None]:
        """Appends a coordinator's batch at the clock's time and returns the future of its
        commit (it raises KafkaProtocolError for a write that never commits: leadership lost,
        the ISR below min.insync.replicas, REQUEST_TIMED_OUT; OSError for a failed flush)."""
        self.check(partition, ACKS_ALL)
        header = validate_produced_batch(batch)
        partition.append(bytearray(batch), header, self.clock(), internal=internal)
        return self._committed(partition, self.group_commit.appended(partition))


class LocalWriter(PartitionWriter):
    """A single node: it leads every partition with itself as the ISR, so there is nothing to
    check before an append and a write is committed once durable."""

    def check(self, partition: Partition, acks: int) -> None:
        return None

    def validate(
        self, partition: Partition, acks: int, records: bytes | None, now_ms: int
    ) -> tuple[bytes, BatchHeader]:
        # the log's checks alone: spares produce's hot path a call per batch to `check`
        return validate_batch(records, partition.config, now_ms)

    def wait(self, partition: Partition, acks: int, waits: Waits[T], slot: T) -> None:
        waits.durable.append(self.group_commit.appended(partition))

    def _committed(
        self, partition: Partition, durable: asyncio.Future[None]
    ) -> asyncio.Future[None]:
        return durable


class ReplicatedWriter(PartitionWriter):
    """A cluster: the partition must be led here (with enough of an ISR for acks=all), and an
    acks=all write is committed once durable here and in the ISR's logs."""

    def __init__(
        self, group_commit: GroupCommit, replicas: Replicas, clock: Callable[[], int]
    ) -> None:
        super().__init__(group_commit, clock)
        self.replicas = replicas

    def check(self, partition: Partition, acks: int) -> None:
        self.replicas.check_append(partition, acks)

    def wait(self, partition: Partition, acks: int, waits: Waits[T], slot: T) -> None:
        waits.durable.append(self.group_commit.appended(partition))
        if acks == ACKS_ALL:
            end = partition.log_end_offset
            waits.replicated.append((slot, self.replicas.acknowledged(partition, end)))

    def _committed(
        self, partition: Partition, durable: asyncio.Future[None]
    ) -> asyncio.Future[None]:
        end = partition.log_end_offset
        return asyncio.ensure_future(self._replicated(partition, end, durable))

    async def _replicated(
        self, partition: Partition, end: int, durable: asyncio.Future[None]
    ) -> None:
        await durable
        await self.replicas.replicated(partition, end, REPLICATION_TIMEOUT_MS / 1000)


async def _isr_answers(
    waits: list[tuple[T, asyncio.Future[ErrorCode]]],
    timeout_ms: int,
    refuse: Callable[[T, ErrorCode], None],
) -> None:
    futures = [waiter for _slot, waiter in waits]
    _done, late = await asyncio.wait(futures, timeout=max(timeout_ms, 0) / 1000)
    for slot, waiter in waits:
        if waiter in late:
            waiter.cancel()
            answer: ErrorCode = ErrorCode.request_timed_out
        elif isinstance(exc := waiter.exception(), KafkaProtocolError):
            answer = exc.code
        else:
            answer = waiter.result()
        if answer:
            refuse(slot, answer)
