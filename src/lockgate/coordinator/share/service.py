# The share coordinator (KIP-932): the durable state of the share partitions whose keys hash to
# the __share_group_state partitions coordinated here (all of them on a single node, those led
# here in a cluster). Its CoordinatorRuntime (coordinator/runtime.py) owns those partitions,
# loads them in the background, answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a
# key whose partition is not (yet) served and appends the records; this class is its shard (the
# replay into rules.ShareStates, what a load and an unload do) and has one method per API, which
# runs the pure rule (rules.py), appends its records and, once they are durable, replays them:
# the state is always the replay of the log.
#
# Invariants: the operations on one share partition run one at a time, in arrival order (each
# rule sees the state its predecessor left: a snapshot computed beside an update in flight
# would undo it); a record is replayed by the operation that appended it only while its
# partition is still loaded in the same coordinator epoch (otherwise the next load reads it).
#
# The topic is not compacted (Kafka's configs: cleanup.policy=delete, retention.ms=-1): its
# ShareSnapshot records are its snapshots, and every share.coordinator.state.topic.prune.
# interval.ms the records below the oldest latest snapshot of a live share partition are
# deleted (DeleteRecords' log start offset). Share partitions not snapshotted for
# share.coordinator.cold.partition.snapshot.interval.ms get a fresh ShareSnapshot, so that the
# pruning point moves past them. Coordinator snapshot files (coordinator/snapshots.py) are not
# taken for this topic: their image keeps each key's latest record, which is right for
# compacted topics but would drop the ShareUpdates a load must apply in order; the pruning keeps
# a load as short (a snapshot record per share partition plus the updates after it).
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator import runtime, writes
from lockgate.coordinator.share.records import ShareKey, StateBatch
from lockgate.coordinator.share.results import ReadResult, StateResult, SummaryResult
from lockgate.coordinator.share.routing import coordinator_key
from lockgate.coordinator.share.rules import Outcome, Record, ShareStates, share_key
from lockgate.coordinator.share.topic import topic_configs
from lockgate.log.steps import run_yielding
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import BatchHeader, Decoded, build_batch
from lockgate.topics.directory import TopicManager
from lockgate.topics.internal import SHARE_GROUP_STATE_TOPIC

log = logging.getLogger(__name__)

A = TypeVar("A", StateResult, ReadResult, SummaryResult)

_MESSAGES = {
    ErrorCode.not_coordinator: "This is not the correct coordinator.",
    ErrorCode.coordinator_load_in_progress: (
        "The coordinator is loading and hence can't process requests."
    ),
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
}


class ShareCoordinator:
    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicManager,
        write: runtime.Write,
        clock: Callable[[], int],
        on_loaded: Callable[[float], None],
        timers: runtime.Timers,
        partition_count: Callable[[uuid.UUID], int | None],
        single_node: bool,
    ) -> None:
        """`topics` holds __share_group_state (created here on first use on a single node);
        `write` appends a batch as the partition's leader; `partition_count` is the partition
        count of a topic id (None: no such topic), the metadata every request is checked
        against."""
        self._single_node = single_node
        self._clock = clock
        self._partition_count = partition_count
        self.states = ShareStates(
            config.integer("share.coordinator.snapshot.update.records.per.snapshot")
        )
        self.prune_interval_ms = config.integer("share.coordinator.state.topic.prune.interval.ms")
        self.cold_interval_ms = config.integer(
            "share.coordinator.cold.partition.snapshot.interval.ms"
        )
        self.runtime = runtime.CoordinatorRuntime(
            SHARE_GROUP_STATE_TOPIC,
            topics,
            config.integer("share.coordinator.state.topic.num.partitions"),
            shard=self,
            write=write,
            clock=clock,
            on_loaded=on_loaded,
            snapshots=None,  # (see the header: the topic's own snapshot records serve)
            timers=timers,
            voice=runtime.Voice(log, "share", "share partitions", logging.DEBUG, logging.INFO),
            topic_configs=topic_configs(config),
        )
        self._config = config
        self._topics = topics
        # share partition → how many operations on it are running or waiting, and its lock
        self._locks: dict[ShareKey, tuple[int, asyncio.Lock]] = {}
        self._jobs: list[runtime.Timer] = []
        self._cleanups: set[asyncio.Task[int]] = set()  # deleted topics' tombstones
        self._opening: asyncio.Task[None] | None = None  # a single node's first use

    # -- a single node: the topic on first use -----------------------------------------------

    def open_existing(self) -> bool:
        """A single node's start: coordinates the topic if an earlier run created it (then
        the caller loads it); otherwise it is made on first use (`open`)."""
        if SHARE_GROUP_STATE_TOPIC not in self._topics.topics:
            return False
        self.runtime.ensure_topic()
        return True

    async def open(self) -> None:
        """A single node: creates the topic on the first lookup or share-state call (as
        Kafka does; most brokers never serve a share group) and coordinates it, the event
        loop served between the partitions' files; callers meanwhile wait for the same
        opening. In a cluster the topic comes from the locator and leadership."""
        if self.runtime.owned:
            return
        failed = (
            self._opening is not None
            and self._opening.done()
            and (self._opening.cancelled() or self._opening.exception() is not None)
        )
        if self._opening is None or failed:  # (a failed opening is tried again)
            self._opening = asyncio.get_running_loop().create_task(self._create())
        await asyncio.shield(self._opening)

    async def _create(self) -> None:
        if SHARE_GROUP_STATE_TOPIC not in self._topics.topics:
            partitions = self._config.integer("share.coordinator.state.topic.num.partitions")
            steps = self._topics.creating(SHARE_GROUP_STATE_TOPIC, partitions, 1,
                                          topic_configs(self._config), internal=True)  # fmt: skip
            await run_yielding(steps)
        self.runtime.ensure_topic()
        await self.runtime.load()

    # -- the shard -------------------------------------------------------------------------------

    def size(self) -> int:
        return len(self.states.offsets)

    def attach(self, index: int) -> None:
        """(Shard) Nothing to set up before a load."""

    def replay(self, index: int) -> runtime.Replay:
        def visit(header: BatchHeader, data: bytes, records: Decoded) -> None:
            if header.is_control:  # (the share coordinator writes no transactions)
                return
            for offset, _ts, key, value in records:
                if key is None:
                    continue
                try:
                    self.states.replay(index, offset, key, value)
                except (ValueError, UnicodeDecodeError) as exc:
                    log.error("skipping a damaged %s record at %d: %s",
                              SHARE_GROUP_STATE_TOPIC, offset, exc)  # fmt: skip

        def loaded() -> runtime.Loaded:
            return runtime.Loaded(
                sum(1 for key in self.states.offsets if self._index(key) == index)
            )

        return runtime.Replay(visit, loaded)

    def unload(self, index: int) -> int:
        return self.states.forget(index, lambda key: self._index(key) == index)

    def _index(self, key: ShareKey) -> int:
        return self.runtime.partition_for(coordinator_key(key))

    # -- the APIs (one share partition each; the persister's in-process engine) -----------------

    async def initialize(
        self, group_id: str, topic_id: uuid.UUID | None, partition: int, state_epoch: int,
        start_offset: int,
    ) -> StateResult:  # fmt: skip
        key = share_key(group_id, topic_id, partition)
        return await self._run(
            key, StateResult,
            lambda now: self.states.initialize(
                key, partition, state_epoch, start_offset, self._count(topic_id), now
            ),
        )  # fmt: skip

    async def read(
        self, group_id: str, topic_id: uuid.UUID | None, partition: int, leader_epoch: int
    ) -> ReadResult:
        key = share_key(group_id, topic_id, partition)
        return await self._run(
            key, ReadResult,
            lambda now: self.states.read(key, partition, leader_epoch, self._count(topic_id), now),
        )  # fmt: skip

    async def write(
        self, group_id: str, topic_id: uuid.UUID | None, partition: int, state_epoch: int,
        leader_epoch: int, start_offset: int, delivery_complete_count: int,
        state_batches: Sequence[StateBatch],
    ) -> StateResult:  # fmt: skip
        key = share_key(group_id, topic_id, partition)
        return await self._run(
            key, StateResult,
            lambda now: self.states.write(
                key, partition, state_epoch, leader_epoch, start_offset,
                delivery_complete_count, state_batches, self._count(topic_id), now,
            ),
        )  # fmt: skip

    async def delete(
        self, group_id: str, topic_id: uuid.UUID | None, partition: int
    ) -> StateResult:
        key = share_key(group_id, topic_id, partition)
        return await self._run(
            key, StateResult,
            lambda now: self.states.delete(key, partition, self._count(topic_id)),
        )  # fmt: skip

    async def read_summary(
        self, group_id: str, topic_id: uuid.UUID | None, partition: int, leader_epoch: int
    ) -> SummaryResult:
        key = share_key(group_id, topic_id, partition)
        return await self._run(
            key, SummaryResult,
            lambda now: self.states.read_summary(key, partition, self._count(topic_id)),
        )  # fmt: skip

    def _count(self, topic_id: uuid.UUID | None) -> int | None:
        return None if topic_id is None else self._partition_count(topic_id)

    async def _run(
        self, key: ShareKey | None, kind: type[A], rule: Callable[[int], Outcome[A]]
    ) -> A:
        """Runs one operation: after those before it on the share partition, while its state
        partition is loaded here; appends what the rule returns and answers once durable."""
        if key is None:  # a null topic id: the rule's INVALID_REQUEST, no state involved
            return rule(self._clock()).answer
        if self._single_node:
            await self.open()
        count, lock = self._locks.get(key) or (0, asyncio.Lock())
        self._locks[key] = (count + 1, lock)
        try:
            async with lock:
                return await self._locked(key, kind, rule)
        finally:
            count, _ = self._locks[key]
            if count == 1:
                del self._locks[key]
            else:
                self._locks[key] = (count - 1, lock)

    async def _locked(self, key: ShareKey, kind: type[A], rule: Callable[[int], Outcome[A]]) -> A:
        routing = coordinator_key(key)
        if unavailable := self.runtime.serving(routing):
            return kind(error=unavailable, message=_MESSAGES.get(unavailable))
        outcome = rule(self._clock())
        if not outcome.records:
            return outcome.answer
        failure = await self._append(self.runtime.partition_for(routing), routing,
                                     outcome.records)  # fmt: skip
        if failure is not None:
            return kind(error=failure, message=_MESSAGES.get(failure))
        return outcome.answer

    async def _append(
        self, index: int, routing: str, records: Sequence[Record]
    ) -> ErrorCode | None:
        """Appends records to state partition `index`, waits until durable and replays them;
        the error to answer if that fails."""
        epoch = self.runtime.owned.get(index)
        batch = build_batch(list(records), timestamp_ms=self._clock())
        try:
            base = self.runtime.partition_at(index).log_end_offset
            committed = self.runtime.append(routing, batch)
            await committed
        except writes.WriteFailure as exc:
            log.warning("%s-%d: a share state write failed: %s", SHARE_GROUP_STATE_TOPIC, index,
                        exc)  # fmt: skip
            return writes.write_error(exc)
        if self.runtime.owned.get(index) == epoch and index in self.runtime.loaded_partitions:
            for position, (key, value) in enumerate(records):
                self.states.replay(index, base + position, key, value)
        return None

    # -- deleted topics --------------------------------------------------------------------------

    def topic_deleted(self, topic_id: uuid.UUID, name: str) -> None:
        """(A topic deletion listener) Kafka's maybeCleanupShareState on the state partitions
        loaded here (the others are their coordinator's): a tombstone of every share partition
        of the topic that has state, each after the operations on it in flight (those are
        refused meanwhile: the topic is unknown). Written in the background; failures are
        logged, never tried again (as Kafka)."""
        loaded = self.runtime.loaded_partitions
        keys = {
            k for k in self.states.offsets if k.topic_id == topic_id and self._index(k) in loaded
        }
        keys.update(k for k in self._locks if k.topic_id == topic_id)
        if not keys:
            return
        task = asyncio.get_running_loop().create_task(self._delete_state(topic_id, name, keys))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _delete_state(self, topic_id: uuid.UUID, name: str, keys: set[ShareKey]) -> int:
        """The tombstones, one operation per share partition; how many were written."""
        written = 0

        def rule(key: ShareKey) -> Callable[[int], Outcome[StateResult]]:
            def tombstone(_now: int) -> Outcome[StateResult]:
                nonlocal written
                records = self.states.topics_deleted((topic_id,), (key,))
                written += len(records)
                return Outcome(StateResult(), records)

            return tombstone

        ordered = sorted(keys, key=lambda k: (k.group_id, k.partition))
        results = await asyncio.gather(*(self._run(k, StateResult, rule(k)) for k in ordered))
        for key, result in zip(ordered, results, strict=True):
            if result.error and result.error != ErrorCode.not_coordinator:  # (moved: not ours)
                log.error("deleted topic %s: the share state of group %s's partition %d not "
                          "deleted: %s", name, key.group_id, key.partition,
                          result.error.name)  # fmt: skip
        log.info("deleted topic %s: %d share state tombstones written", name, written)
        return written

    async def settled(self) -> None:
        """Waits for the deleted topics' tombstones under way."""
        while self._cleanups:
            await asyncio.gather(*self._cleanups)

    # -- housekeeping: cold snapshots and pruning --------------------------------------------

    def start(self) -> None:
        """Arms the periodic cold-partition snapshots and pruning (Kafka's timer jobs)."""
        if self.cold_interval_ms > 0:
            self._arm(self.cold_interval_ms, self.snapshot_cold_partitions)
        if self.prune_interval_ms > 0:
            self._arm(self.prune_interval_ms, self.prune)

    def stop(self) -> None:
        for job in self._jobs:
            job.cancel()
        self._jobs.clear()
        for task in self._cleanups:  # (what they did not write, the next start still has)
            task.cancel()

    def _arm(self, interval_ms: int, job: Callable[[], object]) -> None:
        def fire() -> None:
            result = job()
            if asyncio.iscoroutine(result):
                asyncio.get_running_loop().create_task(result)
            self._jobs.remove(timer)
            self._arm(interval_ms, job)

        timer = self.runtime.timers.call_later(interval_ms / 1000, fire)
        self._jobs.append(timer)

    async def snapshot_cold_partitions(self) -> int:
        """A fresh ShareSnapshot of every share partition not snapshotted for the cold
        interval, per loaded state partition (none where every one already was); how many."""
        written = 0

        def rule(key: ShareKey) -> Callable[[int], Outcome[StateResult]]:
            def cold(now: int) -> Outcome[StateResult]:
                nonlocal written
                records = self.states.cold_snapshot(key, self.cold_interval_ms, now)
                written += len(records)
                return Outcome(StateResult(), records)

            return cold

        for index in sorted(self.runtime.loaded_partitions):
            keys = [key for key in self.states.offsets if self._index(key) == index]
            if not self.states.cold_snapshots(keys, self.cold_interval_ms, self._clock()):
                continue
            for key in keys:  # one at a time, each after the operations on it in flight
                await self._run(key, StateResult, rule(key))
        return written

    def prune(self) -> dict[int, int]:
        """Deletes the redundant records of every loaded state partition (below the oldest
        latest ShareSnapshot of a live share partition, never past the high watermark);
        the new log start offsets of those it moved."""
        moved: dict[int, int] = {}
        for index in sorted(self.runtime.loaded_partitions):
            below = self.states.redundant_below(index)
            try:
                partition = self.runtime.partition_at(index)
            except KafkaProtocolError:
                continue
            if below is None:
                continue
            below = min(below, partition.high_watermark)
            if below <= partition.log_start_offset:
                continue
            try:
                moved[index] = partition.delete_records(below, self._clock())
            except (OSError, KafkaProtocolError) as exc:
                log.warning("%s-%d: cannot delete the records below %d: %s",
                            SHARE_GROUP_STATE_TOPIC, index, below, exc)  # fmt: skip
        return moved
