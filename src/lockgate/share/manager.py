# The share-partition leader's I/O shell (Kafka's SharePartitionManager): the share partitions
# this broker has loaded, keyed by (group, topic id, partition), around the pure state machine
# of partition.py. It loads a share partition from the persister on its first fetch (resolving
# an uninitialized start offset with share.auto.offset.reset), reads the log for acquisitions,
# writes every change through the persister (acknowledgements answered only once durable),
# arms one lock-expiry timer per share partition on the timers port, wakes long-polling
# fetches when records become available, and ends share sessions (sessions.py) whose
# connection closed.
#
# Persister errors as clients see them (Kafka's fetchPersisterError): NOT_COORDINATOR /
# COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS -> COORDINATOR_NOT_AVAILABLE;
# GROUP_ID_NOT_FOUND and UNKNOWN_TOPIC_OR_PARTITION as they are; FENCED_LEADER_EPOCH /
# FENCED_STATE_EPOCH -> NOT_LEADER_OR_FOLLOWER, and the share partition is dropped (loaded
# again by the next fetch); anything else UNKNOWN_SERVER_ERROR.
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockgate.config.group_configs import GROUP_CONFIGS, clamped, default_value, iso_duration_ms
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import BatchHeader, parse_header
from lockgate.share.partition import (
    BATCH_OPTIMIZED,
    AbortedRange,
    AckBatch,
    AcknowledgeError,
    AcquiredRange,
    Limits,
    LogBatch,
    SharePartition,
    StateWrite,
)
from lockgate.share.sessions import ShareSession, ShareSessionCache

if TYPE_CHECKING:
    from lockgate.config.group_configs import GroupConfigs
    from lockgate.config.properties import BrokerConfig
    from lockgate.coordinator.runtime import Timer, Timers
    from lockgate.coordinator.share.persister import Persister
    from lockgate.log.partition import Partition
    from lockgate.log.txn_index import AbortedTxn

log = logging.getLogger(__name__)

_FIRST_READ = 64 * 1024

ShareKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)

_PASSING = {
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
}
_FENCED = {ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch}
_AS_THEY_ARE = {ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition}


def client_error(code: int) -> ErrorCode:
    """A persister error as the share-partition leader's clients see it."""
    if code in _PASSING:
        return ErrorCode.coordinator_not_available
    if code in _FENCED:
        return ErrorCode.not_leader_or_follower
    if code in _AS_THEY_ARE:
        return ErrorCode(code)
    return ErrorCode.unknown_server_error


class PersistError(Exception):
    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@dataclass(slots=True)
class Fetched:
    """One partition's share fetch: the whole log batches spanning its acquired ranges."""

    records: bytes
    acquired: tuple[AcquiredRange, ...]


@dataclass(slots=True)
class _Loaded:
    partition: SharePartition
    leader_epoch: int
    timer: Timer | None = None
    timer_at: int | None = None


class _LogReader:
    """The log batches of a share fetch, read as acquisition asks for them: in chunks that
    double from _FIRST_READ up to `max_bytes` in all. Acquisition stops at its record cap, so
    a fetch of 500 records over a long backlog reads tens of KiB, not the 50 MiB the request
    allows (and parses a few headers, not thousands)."""

    def __init__(self, source: ReadSource, start: int, upper: int, max_bytes: int) -> None:
        self.source = source
        self.next_offset = start
        self.upper = upper
        self.bytes_left = max_bytes
        self.read: list[tuple[memoryview, int, BatchHeader]] = []  # (chunk, position, header)

    def batches(self) -> Iterator[LogBatch]:
        size = _FIRST_READ
        while self.next_offset < self.upper and self.bytes_left > 0:
            data = self.source(self.next_offset, min(size, self.bytes_left), self.upper)
            # a first batch larger than the bytes left is read whole only by the first read
            # (KIP-74's progress rule), as a single read of max_bytes would have it
            if not data or (self.read and len(data) > self.bytes_left):
                return
            chunk = memoryview(data)
            self.bytes_left -= len(chunk)
            size *= 2
            position = 0
            while position < len(chunk):
                h = parse_header(chunk, position)
                self.read.append((chunk, position, h))
                position += h.size
                self.next_offset = h.last_offset + 1
                yield LogBatch(
                    h.base_offset, h.last_offset, h.producer_id, h.is_transactional, h.is_control
                )

    def spanning(self, first: int, last: int) -> bytes:
        """The whole batches read that hold offsets in [first, last], as one run of bytes."""
        return b"".join(
            chunk[position : position + h.size]
            for chunk, position, h in self.read
            if h.last_offset >= first and h.base_offset <= last
        )


# (offset, max bytes, upper offset) → whole batches from the offset
ReadSource = Callable[[int, int, int], bytes | memoryview]


@dataclass(frozen=True, slots=True)
class RemoteBatches:
    """What a share fetch below the local log start read from the object store beforehand:
    the batches, and (read_committed) the aborted transactions they overlap."""

    records: bytes
    aborted: Sequence[AbortedTxn] | None = None

    def source(self) -> ReadSource:
        """The batches as a read source, handed out by its first read only."""
        left = [self.records]

        def read(_offset: int, _size: int, _upper: int) -> bytes:
            return left.pop() if left else b""

        return read


class ShareManager:
    def __init__(
        self,
        config: BrokerConfig,
        group_configs: GroupConfigs,
        persister: Persister,
        timers: Timers,
        clock: Callable[[], int],
    ) -> None:
        self.config = config
        self.group_configs = group_configs
        self.persister = persister
        self.timers = timers
        self.clock = clock
        self.sessions = ShareSessionCache(config.integer("group.share.max.share.sessions"))
        self.partitions: dict[ShareKey, _Loaded] = {}
        self._loading: dict[ShareKey, asyncio.Future[_Loaded]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # long-polling fetches by the share partition they watch, woken when records of it
        # become available again (waking every waiting fetch at each acknowledgement cost a
        # turn of the loop per fetch on busy groups, for nothing)
        self._available_listeners: dict[ShareKey, set[Callable[[], None]]] = {}

    # -- configs ---------------------------------------------------------------------------

    def group_config(self, group: str, name: str) -> str:
        """The group's effective value of a share group config (its override within the
        broker's bounds, else the broker's value)."""
        override = self.group_configs.groups.get(group, {}).get(name)
        if override is not None:
            return clamped(name, override, self.config)
        return default_value(self.config, GROUP_CONFIGS[name])

    def limits(self, group: str) -> Limits:
        return Limits(
            delivery_count_limit=int(self.group_config(group, "share.delivery.count.limit")),
            record_lock_duration_ms=int(self.group_config(group, "share.record.lock.duration.ms")),
            max_record_locks=int(self.group_config(group, "share.partition.max.record.locks")),
            renew_enabled=self.group_config(group, "share.renew.acknowledge.enable") == "true",
        )

    def read_committed(self, group: str) -> bool:
        return self.group_config(group, "share.isolation.level") == "read_committed"

    # -- loading ---------------------------------------------------------------------------

    def cached(self, key: ShareKey) -> SharePartition | None:
        loaded = self.partitions.get(key)
        return None if loaded is None else loaded.partition

    async def load(self, key: ShareKey, log_partition: Partition) -> SharePartition:
        """The share partition, read from the persister on first use (PersistError); read
        again when the topic-partition's leader epoch moved since (this broker lost and
        regained the leadership: another leader may have changed the state meanwhile)."""
        loaded = self.partitions.get(key)
        if loaded is not None:
            if loaded.leader_epoch == max(0, log_partition.leader_epoch):
                return loaded.partition
            self.drop(key)
        waiting = self._loading.get(key)
        if waiting is None:
            waiting = asyncio.get_running_loop().create_future()
            self._loading[key] = waiting
            try:
                loaded = await self._read(key, log_partition)
            except BaseException as exc:
                waiting.set_exception(exc)
                waiting.exception()  # retrieved: the waiters (if any) get it too
                raise
            finally:
                self._loading.pop(key, None)
            self.partitions[key] = loaded
            waiting.set_result(loaded)
            return loaded.partition
        return (await asyncio.shield(waiting)).partition

    async def _read(self, key: ShareKey, log_partition: Partition) -> _Loaded:
        group, topic_id, index = key
        leader_epoch = max(0, log_partition.leader_epoch)
        result = await self.persister.read(group, topic_id, index, leader_epoch)
        if result.error:
            log.info("share partition %s: state not read: %s %s", key, result.error.name,
                     result.message or "")  # fmt: skip
            raise PersistError(client_error(result.error), result.message)
        start = result.start_offset
        resolved = start < 0
        if resolved:
            start = self._reset_offset(group, log_partition)
        start = max(start, log_partition.log_start_offset)
        partition = SharePartition.loaded(start, result.state_epoch, result.state_batches)
        loaded = _Loaded(partition, leader_epoch)
        if resolved:  # kept, so that a restart does not resolve "latest" again, further on
            written = await self.persister.write(
                group, topic_id, index, partition.state_epoch, leader_epoch,
                partition.start_offset, partition.delivery_complete_count(), (),
            )  # fmt: skip
            if written.error:
                raise PersistError(client_error(written.error), written.message)
        return loaded

    def _reset_offset(self, group: str, log_partition: Partition) -> int:
        """share.auto.offset.reset for a share partition first loaded with no start offset."""
        policy = self.group_config(group, "share.auto.offset.reset")
        if policy == "earliest":
            return log_partition.log_start_offset
        if policy.startswith("by_duration:"):
            duration = iso_duration_ms(policy[len("by_duration:") :]) or 0
            found = log_partition.offset_for_timestamp(self.clock() - duration)
            if found is not None:
                return found[0]
        return log_partition.high_watermark

    def forget(self, group: str, topic_id: uuid.UUID | None = None) -> int:
        """Drops the group's loaded share partitions (of one topic, or all): the next fetch
        reads their state again. For the group coordinator when it changes that state behind
        the leader's back (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups on
        an empty group); otherwise the leader would learn it only at its next write (fenced
        by the new state epoch). Returns how many were dropped."""
        return self._drop_where(lambda k: k[0] == group and topic_id in (None, k[1]))

    def topic_deleted(self, topic_id: uuid.UUID, name: str) -> int:
        """(A topic deletion listener) Drops every group's loaded share partitions of the
        deleted topic: nothing writes their state afterwards (the share coordinator deletes
        it); their acquisitions end with them. Returns how many were dropped."""
        dropped = self._drop_where(lambda k: k[1] == topic_id)
        if dropped:
            log.info("deleted topic %s: %d share partitions dropped", name, dropped)
        return dropped

    def _drop_where(self, chosen: Callable[[ShareKey], bool]) -> int:
        keys = [k for k in self.partitions if chosen(k)]
        for key in keys:
            self.drop(key)
        return len(keys)

    def drop(self, key: ShareKey) -> None:
        loaded = self.partitions.pop(key, None)
        if loaded is not None and loaded.timer is not None:
            loaded.timer.cancel()
        # not woken: a woken fetch could load the partition again (a deleted topic's too);
        # one waiting on the set ends at its own deadline
        self._available_listeners.pop(key, None)

    # -- fetch -----------------------------------------------------------------------------

    def fetch(
        self,
        key: ShareKey,
        member: str,
        log_partition: Partition,
        max_records: int,
        max_bytes: int,
        *,
        mode: int = BATCH_OPTIMIZED,
        batch_size: int = 0,
        remote: RemoteBatches | None = None,
    ) -> Fetched:
        """Acquires for `member` what the log has from the share partition's next fetch
        offset (synchronously: no other fetch interleaves), and the log batches to send.
        `remote`: below the local log start, what the caller read from the object store at
        `remote_offset` (batches, and their aborted transactions)."""
        loaded = self.partitions[key]
        partition = loaded.partition
        group = key[0]
        limits = self.limits(group)
        now = self.clock()
        if partition.start_offset < log_partition.log_start_offset:
            self._persist(key, partition.move_to_log_start(log_partition.log_start_offset))
        if max_records <= 0 or not partition.can_acquire(limits):
            return Fetched(b"", ())
        committed = self.read_committed(group)
        upper = log_partition.last_stable_offset if committed else log_partition.high_watermark
        start = partition.next_fetch_offset()
        if start >= upper:
            return Fetched(b"", ())
        aborted: Sequence[AbortedRange] = ()
        if committed:
            found = remote.aborted if remote is not None else None
            aborted = [
                AbortedRange(a.producer_id, a.first_offset, a.last_offset)
                for a in (found if found is not None else log_partition.aborted.overlapping(
                    start, upper))
            ]  # fmt: skip
        source = log_partition.read_view if remote is None else remote.source()
        read = _LogReader(source, start, upper, max_bytes)
        acquisition = partition.acquire(
            member, read.batches(), max_records, now, limits,
            mode=mode, batch_size=batch_size, read_from=start, aborted=aborted,
        )  # fmt: skip
        self._persist(key, acquisition.write)
        self._arm(key)
        if not acquisition.ranges:
            return Fetched(b"", ())
        first = acquisition.ranges[0].first_offset
        last = acquisition.ranges[-1].last_offset
        return Fetched(read.spanning(first, last), acquisition.ranges)

    def remote_offset(self, key: ShareKey, log_partition: Partition) -> int | None:
        """Where the share partition's next fetch reads when that is below the local log
        start (a tiered topic's history in the object store), else None."""
        loaded = self.partitions.get(key)
        if loaded is None:
            return None
        start = max(loaded.partition.next_fetch_offset(), log_partition.log_start_offset)
        return start if start < log_partition.local_log_start_offset else None

    # -- acknowledgement -------------------------------------------------------------------

    async def acknowledge(self, key: ShareKey, member: str, batches: Sequence[AckBatch]) -> None:
        """Applies `member`'s acknowledgement once its write is durable: AcknowledgeError or
        PersistError when refused (nothing applied); UNKNOWN_TOPIC_OR_PARTITION when the share
        partition is not loaded here."""
        loaded = self.partitions.get(key)
        if loaded is None:
            raise AcknowledgeError(
                ErrorCode.unknown_topic_or_partition, "The share partition is not loaded here."
            )
        partition = loaded.partition
        limits = self.limits(key[0])
        transition = partition.acknowledge(member, batches, self.clock(), limits)
        if transition.write is None:
            self._arm(key)
            return
        try:
            await self._write(key, loaded, transition.write)
        except BaseException:
            partition.rollback(transition, self.clock(), limits)
            self._arm(key)
            self._wake(key)
            raise
        partition.commit(transition)
        self._arm(key)
        self._wake(key)

    # -- release ---------------------------------------------------------------------------

    def release_session(self, session: ShareSession) -> None:
        """The member's records in the session's partitions are AVAILABLE again (written in
        the background: a release stands even if its write fails)."""
        limits_of: dict[str, Limits] = {}
        for (topic_id, index), _flag in session.partitions.items():
            key = (session.group_id, topic_id, index)
            loaded = self.partitions.get(key)
            if loaded is None:
                continue
            limits = limits_of.setdefault(key[0], self.limits(key[0]))
            self._persist(key, loaded.partition.release_member(session.member_id, limits))
            self._arm(key)
            self._wake(key)

    def connection_closed(self, connection: int) -> None:
        """A client's connection closed: its share sessions end and their records are released."""
        for session in self.sessions.of_connection(connection):
            self.sessions.remove(session)
            self.release_session(session)

    def _expire(self, key: ShareKey) -> None:
        loaded = self.partitions.get(key)
        if loaded is None:
            return
        loaded.timer = None
        loaded.timer_at = None
        write = loaded.partition.expire(self.clock(), self.limits(key[0]))
        self._persist(key, write)
        self._arm(key)
        if write is not None:
            self._wake(key)

    def _arm(self, key: ShareKey) -> None:
        """One timer per share partition, at its earliest lock deadline."""
        loaded = self.partitions.get(key)
        if loaded is None:
            return
        deadline = loaded.partition.next_deadline()
        if deadline == loaded.timer_at:
            return
        if loaded.timer is not None:
            loaded.timer.cancel()
            loaded.timer = None
        loaded.timer_at = deadline
        if deadline is not None:
            delay = max(0.0, (deadline - self.clock()) / 1000)
            loaded.timer = self.timers.call_later(delay, self._expire, key)

    def available_listeners(self, key: ShareKey) -> set[Callable[[], None]]:
        """Callbacks called once when records of the share partition become available again
        (released, expired, or acknowledged: the in-flight window moved)."""
        return self._available_listeners.setdefault(key, set())

    def _wake(self, key: ShareKey) -> None:
        listeners = self._available_listeners.pop(key, None)
        for listener in listeners or ():
            listener()

    # -- writes ----------------------------------------------------------------------------

    def _persist(self, key: ShareKey, write: StateWrite | None) -> None:
        """Writes a change that stands whatever the write's outcome (a release, a timeout,
        archived gaps): in the background, a failure logged."""
        loaded = self.partitions.get(key)
        if write is None or loaded is None:
            return

        async def run() -> None:
            try:
                await self._write(key, loaded, write)
            except PersistError as exc:
                log.warning("share partition %s: state write failed: %s", key, exc)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, key: ShareKey, loaded: _Loaded, write: StateWrite) -> None:
        group, topic_id, index = key
        result = await self.persister.write(
            group, topic_id, index, loaded.partition.state_epoch, loaded.leader_epoch,
            write.start_offset, write.delivery_complete_count, write.batches,
        )  # fmt: skip
        if result.error:
            code = client_error(result.error)
            if result.error in _FENCED and self.partitions.get(key) is loaded:
                self.drop(key)  # stale: loaded again by the next fetch
            raise PersistError(code, result.message)

    async def settle(self) -> None:
        """Waits for the background writes (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def stop(self) -> None:
        """Shutdown: the timers and the background writes end (what they would have written
        is a release or an expiry: after a restart those records are AVAILABLE anyway)."""
        for loaded in self.partitions.values():
            if loaded.timer is not None:
                loaded.timer.cancel()
        self.partitions.clear()
        for task in self._tasks:
            task.cancel()
