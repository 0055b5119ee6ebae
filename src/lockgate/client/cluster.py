# client/cluster.py — what the client knows about the cluster: bootstrap addresses, brokers,
# topics with their partitions' leaders and leader epochs, and one connection per broker id.
#
# Metadata is a snapshot replaced as a whole on every refresh: readers never see a half-updated
# view. Connections are opened lazily, one per broker id, and replaced when they break; a lock
# per broker id keeps two callers from opening two. Bootstrap addresses are only used until a
# Metadata answer names the brokers (and again if every known broker is unreachable).
#
# ClusterClient is what the Producer, Consumer and Admin share: the Cluster made from their
# connection options (or the one they were handed), started and closed only when made.
from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self

from lockgate.client.connection import DEFAULT_CLIENT_ID, BrokerConnection
from lockgate.client.errors import (
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
    error_for,
)
from lockgate.client.security import ClientSecurity
from lockgate.protocol.api import ApiKey

log = logging.getLogger(__name__)

NO_LEADER = -1
NO_LEADER_EPOCH = -1
DEFAULT_PORT = 9092
DEFAULT_RETRY_BACKOFF_MS = 100
# FindCoordinator answers that a wait cures
COORDINATOR_PENDING = frozenset(
    {ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress}
)


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader_id: int
    leader_epoch: int  # -1 when the broker's Metadata version predates leader epochs (v7)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error_code: ErrorCode = ErrorCode.none

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None  # None before Metadata v10
    internal: bool
    partitions: tuple[PartitionInfo, ...]  # sorted by partition index
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None

    def partition(self, index: int) -> PartitionInfo:
        if 0 <= index < len(self.partitions) and self.partitions[index].partition == index:
            return self.partitions[index]
        raise UnknownTopicOrPartitionError(f"{self.name} has no partition {index}")


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: Mapping[int, BrokerAddress] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """ "host:port[,host:port]" (or a list of them) → [(host, port)]. IPv6 hosts go in
    brackets ("[::1]:9092"); a missing port means 9092; a PLAINTEXT:// prefix is accepted."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses: list[tuple[str, int]] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest.removeprefix(":")
        elif item.count(":") == 1:
            host, port_text = item.split(":")
        else:
            host, port_text = item, ""
        try:
            port = int(port_text) if port_text else DEFAULT_PORT
        except ValueError:
            raise ValueError(f"bad port in bootstrap address {raw.strip()!r}") from None
        if not host or not 0 < port < 65536:
            raise ValueError(f"bad bootstrap address {raw.strip()!r}")
        addresses.append((host, port))
    if not addresses:
        raise ValueError("no bootstrap address given")
    return addresses


class Started:
    """`async with`: start() on entering, close() on leaving."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class Cluster(Started):
    """Bootstrap, metadata and connections shared by the admin, producer and consumer."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str | None = DEFAULT_CLIENT_ID,
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = 1_000,
        metadata_retries: int = 20,
        metadata_max_age_ms: int = 300_000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security  # every connection (bootstrap and brokers) uses it
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.metadata_retries = metadata_retries
        self.metadata_max_age_ms = metadata_max_age_ms
        self._refresher: asyncio.Task[None] | None = None
        self.metadata = ClusterMetadata()
        self._connections: dict[int, BrokerConnection] = {}
        self._connect_locks: dict[int, asyncio.Lock] = {}
        self._bootstrap_connection: BrokerConnection | None = None
        self._bootstrap_lock = asyncio.Lock()
        self._metadata_from: int | None = None  # the broker the last Metadata went to
        # KIP-320: topic → (topic id, partition → the highest leader epoch seen); kept when a
        # topic's metadata is invalidated, so that a lagging broker's answer is still caught.
        self._leader_epochs: dict[str, tuple[uuid.UUID, dict[int, int]]] = {}
        self._closed = False

    async def start(self) -> None:
        """Connects to a bootstrap server and learns the brokers (no topics yet), then keeps
        the metadata of the topics in use fresh every metadata_max_age_ms."""
        await self.refresh_metadata(())
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._refresh_periodically())

    def backoff_s(self, attempt: int) -> float:
        """Seconds to wait before retry number `attempt` (0-based): exponential from
        retry_backoff_ms up to retry_backoff_max_ms, ±20% jitter so that many clients
        retrying after one failure do not retry in step (as KIP-580 does)."""
        base: float = min(self.retry_backoff_max_ms, self.retry_backoff_ms * 2 ** min(attempt, 30))
        return base * random.uniform(0.8, 1.2) / 1000

    async def _refresh_periodically(self) -> None:
        # Leaders move and partitions are added without any error reaching this client;
        # the jitter spreads the refreshes of many clients started together.
        while not self._closed:
            await asyncio.sleep(self.metadata_max_age_ms * random.uniform(0.9, 1.0) / 1000)
            try:
                await self.refresh_metadata(list(self.metadata.topics))
            except KafkaError as exc:
                log.info("periodic metadata refresh failed (next one as planned): %s", exc)

    # ------------------------------------------------------------------------------------------
    # Connections

    async def connection(self, node_id: int) -> BrokerConnection:
        """The connection to a broker by id, opened (or reopened) on demand."""
        self._check_open()
        existing = self._connections.get(node_id)
        if existing is not None and existing.connected:
            return existing
        lock = self._connect_locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            existing = self._connections.get(node_id)
            if existing is not None and existing.connected:
                return existing
            broker = self.metadata.brokers.get(node_id)
            if broker is None:
                await self.refresh_metadata(())
                broker = self.metadata.brokers.get(node_id)
                if broker is None:
                    raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
            connection = self._new_connection(broker.host, broker.port, node_id)
            await connection.connect()
            self._connections[node_id] = connection
            return connection

    async def any_connection(self, avoid: Collection[int] = ()) -> BrokerConnection:
        """Some live connection: a known broker's, else a bootstrap server's. A broker in
        `avoid` only when no other one can be reached."""
        self._check_open()
        for node_id, connection in self._connections.items():
            if connection.connected and node_id not in avoid:
                return connection
        for node_id in _shuffled(self.metadata.brokers):
            if node_id in avoid:
                continue
            with contextlib.suppress(KafkaConnectionError, KafkaTimeoutError):
                return await self.connection(node_id)
        if avoid:
            return await self.any_connection()
        return await self._bootstrap()

    async def controller_connection(self) -> BrokerConnection:
        """The controller's connection, for topic changes. KRaft clusters report a random
        broker as controller and forward; any broker does then."""
        controller = self.metadata.controller_id
        if controller in self.metadata.brokers:
            return await self.connection(controller)
        return await self.any_connection()

    async def find_coordinator(self, key_type: int, key: str) -> int:
        """The broker id coordinating a group (key type 0) or transactional id (1). A
        coordinator not available yet (its internal topic being created, its partition
        without a leader or loading) is asked again with backoff for up to request_timeout_ms,
        as Kafka's clients do; then, or for any other error, the answer's error is raised.
        Each attempt asks a broker not asked yet while there is one: a broker cut off from the
        cluster (its coordinator role just moved away) knows no coordinator and would say so
        for as long as it stays cut, while the others know the new one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout_ms / 1000
        asked: set[int] = set()
        for attempt in itertools.count():
            try:
                return await self._find_coordinator_once(key_type, key, asked)
            except KafkaError as exc:
                pause = self.backoff_s(attempt)
                if exc.code not in COORDINATOR_PENDING or loop.time() + pause > deadline:
                    raise
                log.debug("coordinator for %r: %s; asking again", key, exc)
                await asyncio.sleep(pause)
        raise AssertionError("itertools.count() does not end")

    async def _find_coordinator_once(
        self, key_type: int, key: str, asked: set[int] | None = None
    ) -> int:
        """One FindCoordinator, to a broker outside `asked` when one can be reached; the
        broker asked is added to `asked` (emptied again once every known broker is in it)."""
        connection = await self.any_connection(() if asked is None else asked)
        if asked is not None and connection.node_id is not None:
            asked.add(connection.node_id)
            if asked.issuperset(self.metadata.brokers):
                asked.clear()
        response = await connection.request(
            ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type, "coordinator_keys": [key]}
        )
        if hasattr(response, "coordinators"):  # v4+: batched
            answers = [c for c in response.coordinators if c.key == key]
            if not answers:
                raise error_for(ErrorCode.coordinator_not_available, "FindCoordinator left it out")
            answer = answers[0]
        else:
            answer = response
        if answer.error_code != ErrorCode.none:
            raise error_for(answer.error_code, answer.error_message, f"coordinator for {key!r}")
        node_id = int(answer.node_id)
        if node_id not in self.metadata.brokers:
            await self.refresh_metadata(())
        return node_id

    async def _bootstrap(self) -> BrokerConnection:
        async with self._bootstrap_lock:
            current = self._bootstrap_connection
            if current is not None and current.connected:
                return current
            failures: list[str] = []
            for host, port in self.bootstrap:
                connection = self._new_connection(host, port, None)
                try:
                    await connection.connect()
                except (KafkaConnectionError, KafkaTimeoutError) as exc:
                    failures.append(exc.message)
                    continue
                self._bootstrap_connection = connection
                return connection
            raise KafkaConnectionError("no bootstrap server reachable: " + "; ".join(failures))

    def _new_connection(self, host: str, port: int, node_id: int | None) -> BrokerConnection:
        return BrokerConnection(
            host,
            port,
            node_id=node_id,
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            connect_timeout_ms=self.connect_timeout_ms,
            security=self.security,
        )

    # ------------------------------------------------------------------------------------------
    # Metadata

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, *, allow_auto_topic_creation: bool = False
    ) -> ClusterMetadata:
        """Asks for metadata: `topics` None = every topic, () = brokers only. Known topics that
        were not asked about are kept from the previous snapshot."""
        wanted = None if topics is None else sorted(set(topics))
        # Another connected broker than the last one asked, if any: a broker cut off from the
        # cluster answers its last view for as long as it stays cut (leaders it no longer
        # is), and a client asking it every time would never learn the new leaders. (No new
        # connection for this: one to a frozen broker would hold the refresh up.)
        others = [c for n, c in self._connections.items() if n != self._metadata_from]
        connection = next((c for c in others if c.connected), None) or await self.any_connection()
        self._metadata_from = connection.node_id
        version = connection.version_for(ApiKey.METADATA)
        requested: list[dict[str, Any]] | None
        if wanted is None or (not wanted and version == 0):
            # v0 cannot ask for no topics: its empty list means all of them, like null later.
            requested = [] if version == 0 else None
        else:
            requested = [{"name": name, "topic_id": None} for name in wanted]
        response = await connection.request(
            ApiKey.METADATA,
            {
                "topics": requested,
                "allow_auto_topic_creation": allow_auto_topic_creation,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
            version=version,
        )
        top_error = getattr(response, "error_code", ErrorCode.none)
        if top_error != ErrorCode.none:
            raise error_for(top_error, getattr(response, "error_message", None), "Metadata")
        self.metadata = self._merge(response, replace_all=wanted is None)
        return self.metadata

    def _merge(self, response: Any, *, replace_all: bool) -> ClusterMetadata:
        brokers = {
            int(b.node_id): BrokerAddress(int(b.node_id), b.host, int(b.port), b.rack)
            for b in response.brokers
        }
        # Topics answered with an error are kept too: the caller that asked reads the error
        # from the snapshot, and `_usable` makes the next lookup ask again.
        topics: dict[str, TopicInfo] = {} if replace_all else dict(self.metadata.topics)
        for topic in response.topics:
            if topic.name is not None:
                topics[topic.name] = self._not_older(_topic_info(topic))
        return ClusterMetadata(
            cluster_id=getattr(response, "cluster_id", None),
            controller_id=int(getattr(response, "controller_id", -1)),
            brokers=brokers,
            topics=topics,
        )

    def _not_older(self, info: TopicInfo) -> TopicInfo:
        """KIP-320: a broker that has not yet seen the last election names an older leader. A
        partition answered with a leader epoch below the highest seen keeps what this client
        knew, or has no leader (so the next lookup asks again) if that was forgotten. A topic
        recreated under its name (a new topic id) starts afresh; without topic ids (Metadata
        < v10) or leader epochs (< v7) every answer is taken as it is."""
        if info.topic_id is None or info.error_code != ErrorCode.none:
            return info
        seen = self._leader_epochs.get(info.name)
        if seen is None or seen[0] != info.topic_id:
            seen = self._leader_epochs[info.name] = (info.topic_id, {})
        epochs = seen[1]
        known = self.metadata.topics.get(info.name)
        if known is not None and known.topic_id != info.topic_id:
            known = None
        partitions = []
        for answered in info.partitions:
            last = epochs.get(answered.partition, NO_LEADER_EPOCH)
            if answered.leader_epoch < 0 or answered.leader_epoch >= last:
                epochs[answered.partition] = max(last, answered.leader_epoch)
                partitions.append(answered)
                continue
            log.info(
                "ignoring %s-%d's leader %d of epoch %d: epoch %d was seen already",
                info.name,
                answered.partition,
                answered.leader_id,
                answered.leader_epoch,
                last,
            )
            kept = (
                next((p for p in known.partitions if p.partition == answered.partition), None)
                if known is not None
                else None
            )
            if kept is None or kept.leader_epoch != last:
                kept = replace(answered, leader_id=NO_LEADER)
            partitions.append(kept)
        return replace(info, partitions=tuple(partitions))

    async def topic(
        self, name: str, *, refresh: bool = False, allow_auto_topic_creation: bool = False
    ) -> TopicInfo:
        """A topic whose every partition has a leader, refreshing metadata (with backoff, a
        bounded number of times) while the broker answers a retriable error such as
        LEADER_NOT_AVAILABLE for a topic being created. Raises the named error otherwise."""
        info = None if refresh else self.metadata.topics.get(name)
        if info is not None and _usable(info):
            return info
        last: KafkaError | None = None
        for attempt in range(self.metadata_retries):
            if attempt:
                await asyncio.sleep(self.backoff_s(attempt - 1))
            metadata = await self.refresh_metadata(
                [name], allow_auto_topic_creation=allow_auto_topic_creation
            )
            info = metadata.topics.get(name)
            if info is None:
                last = UnknownTopicOrPartitionError(name)
                continue
            if info.error_code != ErrorCode.none:
                last = error_for(info.error_code, info.error_message, f"topic {name}")
                # A missing topic that may be auto-created deserves the retries too.
                if not last.retriable or (
                    info.error_code == ErrorCode.unknown_topic_or_partition
                    and not allow_auto_topic_creation
                ):
                    raise last
                continue
            if _usable(info):
                return info
            last = LeaderNotAvailableError(f"topic {name} has partitions without a leader")
        assert last is not None
        raise last

    async def partition(
        self, topic_partition: TopicPartition, *, refresh: bool = False
    ) -> PartitionInfo:
        """The partition's current leader and leader epoch."""
        info = await self.topic(topic_partition.topic, refresh=refresh)
        return info.partition(topic_partition.partition)

    async def leader_connection(
        self, topic_partition: TopicPartition, *, refresh: bool = False
    ) -> tuple[BrokerConnection, PartitionInfo]:
        partition = await self.partition(topic_partition, refresh=refresh)
        return await self.connection(partition.leader_id), partition

    def invalidate(self, topic: str) -> None:
        """Forgets a topic's metadata (after NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH...),
        so that the next lookup asks the cluster again."""
        topics = dict(self.metadata.topics)
        if topics.pop(topic, None) is not None:
            self.metadata = ClusterMetadata(
                self.metadata.cluster_id, self.metadata.controller_id, self.metadata.brokers, topics
            )

    # ------------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaConnectionError("the client is closed")

    async def close(self) -> None:
        self._closed = True
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
            self._refresher = None
        connections = list(self._connections.values())
        if self._bootstrap_connection is not None:
            connections.append(self._bootstrap_connection)
        self._connections.clear()
        self._bootstrap_connection = None
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)


class ClusterClient(Started):
    """The base of the Producer, Consumer and Admin: their cluster set-up and `async with`
    (start on entry, close on exit). A client given no `cluster` makes its own from its
    options and starts and closes it; a Cluster handed in is its giver's to start and close
    (several clients may share it)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None,
        cluster: Cluster | None,
        client_id: str | None,
        security: ClientSecurity | None,
        request_timeout_ms: int,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    ) -> None:
        if cluster is None:
            if bootstrap_servers is None:
                raise ValueError("give bootstrap_servers or a cluster")
            cluster = Cluster(
                bootstrap_servers,
                client_id=client_id,
                request_timeout_ms=request_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
                security=security,
            )
            self._owns_cluster = True
        else:
            self._owns_cluster = False
        self.cluster = cluster

    async def start(self) -> None:
        if self._owns_cluster:
            await self.cluster.start()

    async def close(self) -> None:
        if self._owns_cluster:
            await self.cluster.close()


def _topic_info(topic: Any) -> TopicInfo:
    partitions = tuple(
        sorted(
            (
                PartitionInfo(
                    topic=topic.name,
                    partition=int(p.partition_index),
                    leader_id=int(p.leader_id),
                    leader_epoch=int(getattr(p, "leader_epoch", NO_LEADER_EPOCH)),
                    replicas=tuple(int(r) for r in p.replica_nodes),
                    isr=tuple(int(r) for r in p.isr_nodes),
                    offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                    error_code=ErrorCode(p.error_code),
                )
                for p in topic.partitions
            ),
            key=lambda p: p.partition,
        )
    )
    topic_id = getattr(topic, "topic_id", None)
    return TopicInfo(
        name=topic.name,
        topic_id=None if topic_id is None or topic_id.int == 0 else topic_id,
        internal=bool(getattr(topic, "is_internal", False)),
        partitions=partitions,
        error_code=ErrorCode(topic.error_code),
    )


def _usable(info: TopicInfo) -> bool:
    return (
        info.error_code == ErrorCode.none
        and bool(info.partitions)
        and all(p.leader_id != NO_LEADER for p in info.partitions)
    )


def _shuffled(items: Iterable[int]) -> list[int]:
    out = list(items)
    random.shuffle(out)
    return out
