# The coordinator runtime: the shell the transaction and the group coordinator share (Kafka's
# CoordinatorRuntime). For one internal topic (__transaction_state, __consumer_offsets) it owns
# which partitions are coordinated here and at which coordinator epoch (the partition's leader
# epoch), each one's lifecycle — loading (COORDINATOR_LOAD_IN_PROGRESS), loaded, unloaded
# (NOT_COORDINATOR) —, their background load (the newest snapshot, then the log after it,
# through the coordinator's own replay), the appends of the coordinator's records as the
# partition's leader, and the timers port the coordinator's logic arms its timers through.
# What a record means is the coordinator's: its Shard replays records into its state, says
# what a load restored, and forgets a partition's keys when the partition is unloaded.
#
# Invariants: a partition is marked loaded with no await since its replay ended (the replay has
# read every record appended meanwhile, coordinator/replay.py); a load is cancelled, and the
# partition's keys forgotten, before the partition is coordinated in a newer epoch or given up.
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from lockgate.coordinator.replay import RecordsVisitor
from lockgate.coordinator.snapshots import PartitionImage, restore
from lockgate.coordinator.txn.log import partition_for
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.topics.directory import TopicManager

# Appends a batch to a partition this broker leads (synchronously: callers must not await
# before it, to keep their order) and returns the future of its commit (durable, and in a
# cluster replicated to the ISR: replication/writer.py).
Write = Callable[[Partition, bytes], "asyncio.Future[None]"]


class Timer(Protocol):
    """An armed timer (asyncio's handles are ones)."""

    def cancel(self) -> None: ...

    def cancelled(self) -> bool: ...


class Timers(Protocol):
    """The port a coordinator's logic arms its timers through."""

    def call_soon(self, callback: Callable[..., object], *args: Any) -> Timer: ...

    def call_later(self, delay_s: float, callback: Callable[..., object], *args: Any) -> Timer: ...


class LoopTimers:
    """Timers on the running event loop (looked up at each call: the root builds this before
    the loop runs)."""

    def call_soon(self, callback: Callable[..., object], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_soon(callback, *args)

    def call_later(self, delay_s: float, callback: Callable[..., object], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay_s, callback, *args)


# A deadline that fires this much after its time found the event loop unable to run
# meanwhile: what arrived in that time (a member's heartbeat) is not read yet.
HELD_MS = 50


class Deadline:
    """A member's session deadline that a held event loop does not turn against the member.
    Fired more than HELD_MS late, it waits once more, as long as it was late (at most its
    own delay), so that requests which arrived meanwhile are read first; a heartbeat among
    them cancels it and arms a new one, as it would have before the deadline."""

    def __init__(
        self,
        timers: Timers,
        clock: Callable[[], int],
        delay_s: float,
        callback: Callable[..., object],
        *args: Any,
    ) -> None:
        self._timers, self._clock, self._callback, self._args = timers, clock, callback, args
        self._delay_ms = delay_s * 1000
        self._due_ms = clock() + self._delay_ms
        self.late_ms: float | None = None  # how late it fired first: the timer's own lateness
        self._timer = timers.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        if self.late_ms is None:
            self.late_ms = self._clock() - self._due_ms
            if self.late_ms > HELD_MS:
                grace_s = min(self.late_ms, self._delay_ms) / 1000
                self._timer = self._timers.call_later(grace_s, self._fire)
                return
        self._callback(*self._args)

    def cancel(self) -> None:
        self._timer.cancel()

    def cancelled(self) -> bool:
        return self._timer.cancelled()


async def pause(timers: Timers, delay_s: float) -> None:
    """Waits `delay_s` through the timers port: a coordinator's retries wait on its timers,
    as its sessions and rebalances do."""
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    timer = timers.call_later(delay_s, wake)
    try:
        await woken
    finally:
        timer.cancel()


class Snapshots(Protocol):
    """Keeps a loaded partition's image up to date for its snapshots (snapshots.Snapshotter)."""

    def follow(self, partition: Partition, image: PartitionImage, at: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a shard restored from one partition's load: its keys (ids, groups), and the work
    it resumed (None: the coordinator resumes none)."""

    keys: int
    resumed: int | None = None


@dataclass(frozen=True, slots=True)
class Replay:
    """One load of a partition by a shard: `visit` replays each batch (the snapshot's, then
    the log's) into the coordinator's state; `loaded` is called once the partition is marked
    loaded, with no await since the last batch."""

    visit: RecordsVisitor
    loaded: Callable[[], Loaded]


class Shard(Protocol):
    """A coordinator's own logic, as the runtime asks it about its partitions."""

    def size(self) -> int:
        """How many keys (ids, groups) the coordinator holds, all partitions together."""
        ...

    def attach(self, index: int) -> None:
        """The partition is coordinated here from now on (before its load)."""

    def replay(self, index: int) -> Replay:
        """A fresh load of the partition."""
        ...

    def unload(self, index: int) -> int:
        """Forgets the partition's keys (their requests get NOT_COORDINATOR); how many."""
        ...


@dataclass(frozen=True, slots=True)
class Voice:
    """How a coordinator's runtime speaks in the log: to `logger`, as the `name` coordinator
    ("transaction") counting its keys as `noun` ("ids"); a partition's load at `start_level`
    on a single node's start, at `leadership_level` when this broker comes to lead it."""

    logger: logging.Logger
    name: str
    noun: str
    start_level: int
    leadership_level: int


@dataclass(frozen=True, slots=True)
class _PartitionLoad:
    snapshot: bool
    batches: int
    resumed: int | None


class CoordinatorRuntime:
    def __init__(
        self,
        topic: str,
        topics: TopicManager,
        num_partitions: int,
        shard: Shard,
        write: Write,
        clock: Callable[[], int],
        on_loaded: Callable[[float], None],
        snapshots: Snapshots | None,
        timers: Timers,
        voice: Voice,
        topic_configs: Mapping[str, str] | None = None,
    ) -> None:
        """`topic` is the internal topic, held in `topics` (created here on a single node);
        `shard` the coordinator's logic; `write` appends a batch as the partition's leader;
        `on_loaded` is told how long a partition took to load; `snapshots` follows the loaded
        partitions on a single node (None in a cluster: snapshots are a single node's, for
        now); `timers` is the port the coordinator's logic arms timers through; `voice` how
        its lines are logged; `topic_configs` the topic's configs where it is created here
        (None: the internal topics' compacted defaults)."""
        self.topic = topic
        self.topics = topics
        self.num_partitions = num_partitions
        self.timers = timers
        self._shard = shard
        self.write = write
        self._clock = clock
        self._on_loaded = on_loaded
        self._snapshots = snapshots
        self._voice = voice
        self._topic_configs = dict(topic_configs or {})
        # partitions coordinated here → coordinator epoch (the partition's leader epoch):
        # every partition on a single node, those led here in a cluster
        self.owned: dict[int, int] = {}
        self.loaded_partitions: set[int] = set()
        self._loads: dict[int, asyncio.Task[Any]] = {}
        self.replayed_batches = 0  # by the last load, after the snapshots

    # -- ownership and availability -----------------------------------------------------------

    @property
    def loaded(self) -> bool:
        """Every partition coordinated here is loaded."""
        return self.loaded_partitions.issuperset(self.owned)

    def partition_for(self, key: str) -> int:
        """The partition of a key (a transactional id, a group id)."""
        return partition_for(key, self.num_partitions)

    def epoch(self, key: str) -> int:
        """The coordinator epoch of the key's partition (-1: not coordinated here)."""
        return self.owned.get(self.partition_for(key), -1)

    def serving(self, key: str) -> ErrorCode:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS for the key's partition, if so."""
        index = self.partition_for(key)
        if index not in self.owned:
            return ErrorCode.not_coordinator
        if index not in self.loaded_partitions:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    def partition_at(self, index: int) -> Partition:
        partition = self.topics.get(self.topic, index)
        if partition is None:  # the internal topic's log could not be opened
            raise KafkaProtocolError(
                ErrorCode.coordinator_not_available, f"{self.topic}-{index} is not open"
            )
        return partition

    def append(self, key: str, batch: bytes) -> asyncio.Future[None]:
        """Appends a batch (synchronously: callers must not await before this) to the key's
        partition; returns the future of its commit (replication/writer.py). Raises
        KafkaProtocolError if the partition is no longer coordinated here (lost while the
        caller awaited something) or this broker cannot append there."""
        index = self.partition_for(key)
        if index not in self.owned:
            raise KafkaProtocolError(ErrorCode.not_coordinator)
        return self.write(self.partition_at(index), batch)

    # -- lifecycle ------------------------------------------------------------------------------

    def ensure_topic(self) -> None:
        """A single node: creates the topic if needed and coordinates every partition."""
        topics = self.topics
        if self.topic not in topics.topics:
            topics.create(self.topic, self.num_partitions, 1, self._topic_configs, internal=True)
        self.num_partitions = topics.topics[self.topic].partitions
        for index in range(self.num_partitions):
            self.owned[index] = self.partition_at(index).leader_epoch
            self._shard.attach(index)

    async def load(self) -> None:
        """A single node's start: loads every partition, one at a time without holding the
        event loop. A partition's keys are served as soon as it is loaded
        (COORDINATOR_LOAD_IN_PROGRESS before)."""
        started = time.monotonic()
        voice = self._voice
        loads = [await self._load(index, voice.start_level) for index in sorted(self.owned)]
        self.replayed_batches = sum(each.batches for each in loads)
        resumes = [each.resumed for each in loads if each.resumed is not None]
        resumed = sum(resumes) if resumes else None
        voice.logger.info("%s coordinator loaded %d %s from %d snapshots and %d batches in "
                          "%.2fs%s", voice.name, self._shard.size(), voice.noun,
                          sum(each.snapshot for each in loads), self.replayed_batches,
                          time.monotonic() - started, _resuming(resumed))  # fmt: skip

    def on_leadership(self, index: int, epoch: int | None) -> None:
        """Cluster mode: this broker leads partition `index` in `epoch` and coordinates its
        keys (loaded in the background), or (None) no longer does."""
        task = self._loads.pop(index, None)
        if task is not None:
            task.cancel()
        self.unload(index)
        if epoch is None:
            return
        self.num_partitions = self.topics.topics[self.topic].partitions
        self._shard.attach(index)
        self.owned[index] = epoch
        self._loads[index] = asyncio.get_running_loop().create_task(
            self._load(index, self._voice.leadership_level)
        )

    def unload(self, index: int) -> None:
        """Gives a partition up: its keys are forgotten and their requests get
        NOT_COORDINATOR; what they left unfinished is the next coordinator's to resume."""
        self.owned.pop(index, None)
        self.loaded_partitions.discard(index)
        gone = self._shard.unload(index)
        if gone:
            self._voice.logger.info("no longer coordinating %s-%d: %d %s unloaded", self.topic,
                                    index, gone, self._voice.noun)  # fmt: skip

    async def _load(self, index: int, level: int) -> _PartitionLoad:
        """Replays one partition through the shard and marks it loaded (logged at `level`: a
        single node loads every partition at start, a cluster broker one as it comes to
        lead it)."""
        started = time.monotonic()
        partition = self.partition_at(index)
        image = PartitionImage()
        replay = self._shard.replay(index)
        restored = await restore(partition, replay.visit, image, self._clock())
        if self._snapshots is not None:  # (snapshots are a single node's, for now)
            self._snapshots.follow(partition, image, restored.snapshot_offset)
        self.loaded_partitions.add(index)
        loaded = replay.loaded()
        self._on_loaded(time.monotonic() - started)
        self._voice.logger.log(level,
                               "%s-%d loaded in epoch %d: %d %s from %s and %d batches in %.2fs%s",
                               self.topic, index, self.owned.get(index, -1), loaded.keys,
                               self._voice.noun,
                               "a snapshot" if restored.snapshot_offset >= 0 else "no snapshot",
                               restored.replayed, time.monotonic() - started,
                               _resuming(loaded.resumed))  # fmt: skip
        return _PartitionLoad(restored.snapshot_offset >= 0, restored.replayed, loaded.resumed)


def _resuming(resumed: int | None) -> str:
    """The end of a load's log line: the work it resumed, if the coordinator resumes any."""
    return "" if resumed is None else f"; resuming {resumed}"
