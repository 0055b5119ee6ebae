# A follower's fetching from one leader broker, for every partition this broker follows there:
# first OffsetForLeaderEpoch to find where its log and the leader's part (KIP-101, KIP-279's
# rounds; replication/follower.py decides the cut), then Fetch with this broker's replica id
# from its log end, appending the leader's batches as they are. The Fetch offset tells the
# leader what the follower has; the answer's high watermark becomes the follower's.
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import KafkaError
from lockgate.client.security import ClientSecurity
from lockgate.cluster.metadata import MetadataStore
from lockgate.config.properties import BrokerConfig
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.replication.follower import AskAgain, after_leader_answer
from lockgate.replication.group_commit import GroupCommit

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # replica id in the body, leader epochs, no topic ids needed
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
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


@dataclass(slots=True)
class _Replica:
    partition: Partition
    leader_epoch: int
    asked_epoch: int  # the epoch OffsetForLeaderEpoch asks about next
    truncated: bool = False  # the log agrees with the leader's: fetch from its end
    retry_at: float = 0.0


class ReplicaFetcher:
    def __init__(
        self,
        store: MetadataStore,
        leader_id: int,
        node_id: int,
        group_commit: GroupCommit,
        settings: FetchSettings,
        clock: Callable[[], int],
    ) -> None:
        self.store = store
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
                    ready = [r for r in self.replicas.values() if r.truncated and r.retry_at <= now]
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


def _observed(future: asyncio.Future[None]) -> None:
    """A follower's flush failure is logged by the group commit; nobody waits for it."""
    if not future.cancelled():
        future.exception()
