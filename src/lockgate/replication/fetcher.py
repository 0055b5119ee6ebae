# A follower's fetching from one leader broker, for every partition this broker follows there:
# first OffsetForLeaderEpoch to find where its log and the leader's part (KIP-101, KIP-279's
# rounds; replication/follower.py decides the cut), then Fetch with this broker's replica id
# from its log end, appending the leader's batches as they are. The Fetch offset tells the
# leader what the follower has; the answer's high watermark becomes the follower's.
#
# A tiered partition's leader answers a fetch below its local log start with
# OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405): the follower does not fetch that history. It asks
# the leader for its local log start (ListOffsets EARLIEST_LOCAL), takes the leader epochs and
# the producer state there from the object store (TieredHistory, which the composition root
# fills with the tiered manager), empties its log to start there and fetches on.
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import KafkaError
from lockgate.client.security import ClientSecurity
from lockgate.cluster.metadata import MetadataStore
from lockgate.config.properties import BrokerConfig
from lockgate.log.partition import KeptHistory, Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.replication.follower import AskAgain, after_leader_answer
from lockgate.replication.group_commit import GroupCommit
from lockgate.storage.object_store import ObjectStoreError

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # replica id in the body, leader epochs, no topic ids needed
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 8  # the first with EARLIEST_LOCAL (KIP-405)
EARLIEST_LOCAL = -4
REQUEST_TIMEOUT_MS = 30_000
UNDEFINED_EPOCH = -1

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """How this broker's followers fetch (replica.fetch.*), and how their connections to a
    leader are secured (as this broker's inter-broker settings say; None: plaintext)."""

    backoff_ms: int
    max_wait_ms: int
    max_bytes: int
    security: ClientSecurity | None

    @classmethod
    def from_config(cls, config: BrokerConfig, security: ClientSecurity | None) -> FetchSettings:
        return cls(
            config.integer("replica.fetch.backoff.ms"),
            config.integer("replica.fetch.wait.max.ms"),
            config.integer("replica.fetch.max.bytes"),
            security,
        )


class TieredHistory(Protocol):
    """What a follower needs of tiered storage when its leader has moved the offsets it
    would fetch to the object store (tiered/manager.py's RemoteLogManager)."""

    def holds(self, partition: Partition) -> bool:
        """Whether the partition is tiered here (its history can come from the store)."""
        ...

    async def history_before(self, partition: Partition, offset: int) -> tuple[int, KeptHistory]:
        """(where the log starts, what it keeps) for a leader's local log start `offset`;
        LookupError or ObjectStoreError when the store cannot tell yet."""
        ...


@dataclass(slots=True)
class _Replica:
    partition: Partition
    leader_epoch: int
    asked_epoch: int  # the epoch OffsetForLeaderEpoch asks about next
    truncated: bool = False  # the log agrees with the leader's: fetch from its end
    retry_at: float = 0.0
    # the leader answered OFFSET_MOVED_TO_TIERED_STORAGE: start at its local log start
    # before fetching again (its log start offset then, -1 unknown)
    below_local_start: bool = False
    leader_log_start: int = -1


class ReplicaFetcher:
    def __init__(
        self,
        store: MetadataStore,
        leader_id: int,
        node_id: int,
        group_commit: GroupCommit,
        settings: FetchSettings,
        clock: Callable[[], int],
        tiered: TieredHistory | None = None,
    ) -> None:
        self.store = store
        self.tiered = tiered  # None: tiered storage is off on this broker
        self.leader_id = leader_id
        self.node_id = node_id  # this broker: the replica id of its requests
        self.group_commit = group_commit  # flushes what is appended (nobody waits for it)
        self.security = settings.security
        self.clock = clock
        self.replicas: dict[Key, _Replica] = {}
        self.backoff_s = settings.backoff_ms / 1000
        self.max_wait_ms = settings.max_wait_ms
        self.max_bytes = settings.max_bytes
        self._connection: BrokerConnection | None = None
        self._task: asyncio.Task[None] | None = None

    def add(self, partition: Partition, leader_epoch: int) -> None:
        latest = partition.epochs.latest_epoch
        self.replicas[(partition.topic, partition.index)] = _Replica(
            partition, leader_epoch, latest, truncated=latest == UNDEFINED_EPOCH
        )
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"fetch-from-{self.leader_id}")

    def remove(self, key: Key) -> None:
        self.replicas.pop(key, None)

    async def stop(self) -> None:
        self.replicas.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._close()

    async def _close(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.close()

    async def _run(self) -> None:
        failures = 0
        try:
            while self.replicas:
                try:
                    connection = await self._connect()
                    unsettled = [r for r in self.replicas.values() if not r.truncated]
                    if unsettled:
                        await self._truncate(connection, unsettled)
                    now = time.monotonic()
                    due = [r for r in self.replicas.values() if r.truncated and r.retry_at <= now]
                    moved = [r for r in due if r.below_local_start]
                    if moved:
                        await self._start_at_local_start(connection, moved)
                    ready = [r for r in due if not r.below_local_start]
                    if ready:
                        await self._fetch(connection, ready)
                    else:
                        await asyncio.sleep(self.backoff_s / 4)
                    failures = 0
                except (KafkaError, OSError, TimeoutError) as exc:
                    if failures == 0:
                        log.warning("fetching from broker %d failed (%s); retrying every %.1f s",
                                    self.leader_id, exc, self.backoff_s)  # fmt: skip
                    failures += 1
                    await self._close()
                    await asyncio.sleep(self.backoff_s)
        finally:
            await self._close()

    async def _connect(self) -> BrokerConnection:
        if self._connection is not None and self._connection.connected:
            return self._connection
        await self._close()
        leader = self.store.view.brokers.get(self.leader_id)
        if leader is None:
            raise KafkaError(f"broker {self.leader_id} is not registered")
        connection = BrokerConnection(
            leader.host,
            leader.port,
            node_id=self.leader_id,
            client_id=f"lockgate-replica-{self.node_id}",
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            security=self.security,  # the leader's inter-broker listener
        )
        await connection.connect()
        self._connection = connection
        return connection

    def _back_off(self, replica: _Replica, code: ErrorCode, settle_again: bool) -> None:
        partition = replica.partition
        log.info("%s-%d: the leader (broker %d) answered %s; retrying in %.1f s",
                 partition.topic, partition.index, self.leader_id, code.name,
                 self.backoff_s)  # fmt: skip
        replica.retry_at = time.monotonic() + self.backoff_s
        if settle_again:
            replica.truncated = False
            replica.asked_epoch = partition.epochs.latest_epoch

    # -- OffsetForLeaderEpoch -------------------------------------------------------------------

    async def _truncate(self, connection: BrokerConnection, replicas: list[_Replica]) -> None:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in replicas:
            by_topic.setdefault(r.partition.topic, []).append(
                {"partition": r.partition.index, "current_leader_epoch": r.leader_epoch,
                 "leader_epoch": r.asked_epoch}
            )  # fmt: skip
        response = await connection.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            {
                "replica_id": self.node_id,
                "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
            },
            version=OFFSET_FOR_LEADER_EPOCH_VERSION,
        )
        now_ms = self.clock()
        for topic in response.topics:
            for answer in topic.partitions:
                replica = self.replicas.get((topic.topic, int(answer.partition)))
                if replica is None or replica not in replicas:
                    continue  # its role changed meanwhile
                code = ErrorCode(answer.error_code)
                if code:
                    self._back_off(replica, code, settle_again=False)
                    continue
                self._settle(replica, int(answer.leader_epoch), int(answer.end_offset), now_ms)

    def _settle(self, replica: _Replica, epoch: int, end_offset: int, now_ms: int) -> None:
        partition = replica.partition
        decision = after_leader_answer(
            replica.asked_epoch,
            epoch,
            end_offset,
            partition.log_end_offset,
            lambda e: partition.epochs.end_offset_for(e, partition.log_end_offset),
            partition.high_watermark,
        )
        partition.truncate_to(decision.offset, now_ms)
        if isinstance(decision, AskAgain):
            replica.asked_epoch = decision.epoch
        else:
            replica.truncated = True

    # -- Fetch ------------------------------------------------------------------------------------

    async def _fetch(self, connection: BrokerConnection, replicas: list[_Replica]) -> None:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in replicas:
            p = r.partition
            by_topic.setdefault(p.topic, []).append(
                {"partition": p.index, "current_leader_epoch": r.leader_epoch,
                 "fetch_offset": p.log_end_offset, "last_fetched_epoch": UNDEFINED_EPOCH,
                 "log_start_offset": p.log_start_offset, "partition_max_bytes": self.max_bytes}
            )  # fmt: skip
        response = await connection.request(
            ApiKey.FETCH,
            {
                "replica_id": self.node_id,
                "max_wait": self.max_wait_ms,
                "min_bytes": 1,
                "max_bytes": self.max_bytes * max(1, len(replicas)),
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
            version=FETCH_VERSION,
            timeout_ms=REQUEST_TIMEOUT_MS + self.max_wait_ms,
        )
        if response.error_code:
            raise KafkaError(f"Fetch from broker {self.leader_id}: error {response.error_code}")
        now_ms = self.clock()
        for topic in response.responses:
            for data in topic.partitions:
                replica = self.replicas.get((topic.topic, int(data.partition_index)))
                if replica is None or replica not in replicas or replica.partition.closed:
                    continue
                self._apply(replica, data, now_ms)

    def _apply(self, replica: _Replica, data: Any, now_ms: int) -> None:
        code = ErrorCode(data.error_code)
        partition = replica.partition
        leader_start = int(data.log_start_offset)
        if code == ErrorCode.offset_out_of_range and partition.log_end_offset < leader_start:
            self._start_at(replica, leader_start, now_ms)
            return
        if code == ErrorCode.offset_moved_to_tiered_storage and (
            self.tiered is not None and self.tiered.holds(partition)
        ):
            replica.below_local_start = True
            replica.leader_log_start = leader_start
            return
        if code:
            # an epoch mismatch or a moved leader: the metadata will tell; a range error
            # means the logs parted ways: settle again
            self._back_off(replica, code, settle_again=code == ErrorCode.offset_out_of_range)
            return
        try:
            if data.records:
                partition.append_replicated(bytes(data.records), now_ms)
                flushed = self.group_commit.appended(partition)
                flushed.add_done_callback(_observed)
        except KafkaProtocolError as exc:
            log.error("%s-%d: %s", partition.topic, partition.index, exc.message)
            self._back_off(replica, exc.code, settle_again=True)
            return
        except OSError as exc:
            log.error("%s-%d: replica append failed: %s", partition.topic, partition.index, exc)
            self._back_off(replica, ErrorCode.kafka_storage_error, settle_again=False)
            return
        partition.advance_high_watermark(int(data.high_watermark))
        if leader_start > partition.log_start_offset:
            # the leader's retention and DeleteRecords reach its followers, as in Kafka
            try:
                partition.delete_records(min(leader_start, partition.high_watermark), now_ms)
            except OSError as exc:
                log.warning("%s-%d: log start not moved to the leader's %d: %s",
                            partition.topic, partition.index, leader_start, exc)  # fmt: skip

    def _start_at(self, replica: _Replica, leader_start: int, now_ms: int) -> None:
        """This log ends before the leader's log start (it was away while the leader's
        retention or DeleteRecords passed it): it starts anew there and fetches at once."""
        partition = replica.partition
        try:
            partition.truncate_fully_and_start_at(leader_start, now_ms)
        except OSError as exc:
            log.error("%s-%d: could not start anew: %s", partition.topic, partition.index, exc)
        if partition.log_end_offset < leader_start:  # failed, or the cleaner is reading it
            self._back_off(replica, ErrorCode.offset_out_of_range, settle_again=False)

    # -- below the leader's local log start (tiered storage) --------------------------------

    async def _start_at_local_start(
        self, connection: BrokerConnection, replicas: list[_Replica]
    ) -> None:
        """ListOffsets EARLIEST_LOCAL to the leader, then each log starts anew there with its
        history from the object store (as Kafka's follower builds its remote log auxiliary
        state)."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in replicas:
            by_topic.setdefault(r.partition.topic, []).append(
                {"partition_index": r.partition.index, "current_leader_epoch": r.leader_epoch,
                 "timestamp": EARLIEST_LOCAL}
            )  # fmt: skip
        response = await connection.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": self.node_id,
                "isolation_level": 0,
                "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()],
            },
            version=LIST_OFFSETS_VERSION,
        )
        for topic in response.topics:
            for answer in topic.partitions:
                key = (str(topic.name), int(answer.partition_index))
                replica = self.replicas.get(key)
                if replica is None or replica not in replicas or replica.partition.closed:
                    continue
                code = ErrorCode(answer.error_code)
                if code:
                    self._back_off(replica, code, settle_again=False)
                    continue
                await self._rebuild(key, replica, int(answer.offset))

    async def _rebuild(self, key: Key, replica: _Replica, local_start: int) -> None:
        partition = replica.partition
        assert self.tiered is not None
        if local_start <= partition.log_end_offset:
            replica.below_local_start = False  # the leader's local start moved: fetch again
            return
        try:
            start, kept = await self.tiered.history_before(partition, local_start)
        except (LookupError, ObjectStoreError) as exc:
            log.warning("%s-%d: the history below the leader's local log start %d is not read "
                        "from the object store yet (%s); retrying in %.1f s", partition.topic,
                        partition.index, local_start, exc, self.backoff_s)  # fmt: skip
            replica.retry_at = time.monotonic() + self.backoff_s
            return
        if self.replicas.get(key) is not replica or partition.closed:
            return  # its role changed meanwhile
        if replica.leader_log_start >= 0:  # the leader's log start, as Kafka's follower takes
            kept = dataclasses.replace(kept, log_start=replica.leader_log_start)
        try:
            partition.truncate_fully_and_start_at(start, self.clock(), kept)
        except OSError as exc:
            log.error("%s-%d: could not start anew: %s", partition.topic, partition.index, exc)
        if partition.log_end_offset < start:  # failed, or the cleaner is reading it
            replica.retry_at = time.monotonic() + self.backoff_s
            return
        replica.below_local_start = False
        log.info("%s-%d: starts at offset %d (the leader's local log start %d), with the "
                 "history before it in the object store", partition.topic, partition.index,
                 start, local_start)  # fmt: skip


def _observed(future: asyncio.Future[None]) -> None:
    """A follower's flush failure is logged by the group commit; nobody waits for it."""
    if not future.cancelled():
        future.exception()
