# The broker: wires storage, topics, durability and the listener together, and owns the
# background tasks (retention, log cleaning). Everything runs on one event loop; only fsync
# and the cleaner's reading and writing leave it.
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid

from lockgate.client.security import ClientSecurity
from lockgate.cluster.controller_service import ControllerService
from lockgate.cluster.etcd import EtcdMetadataStore
from lockgate.cluster.latest_offsets import LatestOffsets
from lockgate.cluster.local import LocalMetadataStore
from lockgate.cluster.membership import ClusterMembership, Membership
from lockgate.cluster.metadata import BrokerRegistration, Endpoint
from lockgate.cluster.peers import PeerConnections
from lockgate.config.dynamic import open_dynamic_configs
from lockgate.config.group_configs import open_group_configs
from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.coordinator.group.service import GroupCoordinator
from lockgate.coordinator.locator import SHARE, CoordinatorLocator
from lockgate.coordinator.runtime import LoopTimers
from lockgate.coordinator.share.routed import RoutedPersister
from lockgate.coordinator.share.service import ShareCoordinator
from lockgate.coordinator.snapshots import Snapshotter
from lockgate.coordinator.txn.coordinator import TransactionCoordinator
from lockgate.coordinator.txn.markers import MarkerSender
from lockgate.coordinator.txn.producer_ids import ClusterProducerIds, ProducerIdManager
from lockgate.coordinator.txn.verifier import TxnVerifier
from lockgate.handlers import load_all
from lockgate.handlers.fetch_sessions import FetchSessionCache
from lockgate.handlers.services import Services
from lockgate.log.append_order import AppendOrder
from lockgate.log.cleaner import MAP_ENTRY_BYTES, LogCleaner
from lockgate.log.clock import now_ms
from lockgate.log.steps import run_yielding
from lockgate.replication.fetcher import FetchSettings
from lockgate.replication.group_commit import GroupCommit
from lockgate.replication.manager import NO_FOLLOWERS, ReplicaManager
from lockgate.replication.selector import replica_selector
from lockgate.replication.writer import LocalWriter, PartitionWriter, ReplicatedWriter
from lockgate.security.authorizer import Authorizer
from lockgate.security.credentials import open_credential_store
from lockgate.security.listeners import Listener, check_properties, inter_broker_listener
from lockgate.security.quota_store import open_quota_store
from lockgate.security.quotas import ClientQuotas
from lockgate.security.tls import TlsAcceptor, server_context
from lockgate.server.connection import Connection
from lockgate.server.connection_limits import ConnectionLimits, RequestMemory
from lockgate.server.heap import HeapKeeper
from lockgate.server.inter_broker import inter_broker_security
from lockgate.server.metrics import BrokerMetrics, ScrapeSources
from lockgate.share.manager import ShareManager
from lockgate.storage.disk import open_disk_engine
from lockgate.storage.engine import StorageEngine
from lockgate.tiered.manager import RemoteLogManager, tiered_manager
from lockgate.topics.admin import ClusterTopicAdmin, LocalTopicAdmin, TopicAdmin
from lockgate.topics.directory import TopicManager
from lockgate.topics.internal import (
    CONSUMER_OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
)

log = logging.getLogger(__name__)

# a share-state request to another broker's share coordinator (it answers once durable)
SHARE_STATE_TIMEOUT_MS = 30_000

CLEAN_SHUTDOWN_MARK = "clean-shutdown"
TLS_HANDSHAKE_TIMEOUT_S = 10.0
STREAM_LIMIT = 1 << 20


class Broker:
    def __init__(self, config: BrokerConfig, storage: StorageEngine | None = None) -> None:
        load_all()
        self.config = config
        # every property and listener is checked (and TLS contexts built) before anything
        # starts, the data directory included
        self.listeners = check_properties(config)
        # KIP-392's replica.selector.class (None: consumers read from leaders); a class lockgate
        # does not have stops the start here
        self.replica_selector = replica_selector(config.get("replica.selector.class"))
        self.storage = storage if storage is not None else open_disk_engine(config)
        self.node_id = config.integer("node.id")
        self._tls = {item.name: server_context(config, item) for item in self.listeners}
        self.inter_broker = inter_broker_listener(config, self.listeners).name
        self.listener_ports = {item.name: item.port for item in self.listeners}  # 0 → bound
        # the first listener's address, as tests and tools know the broker by
        self.host, self.port = self.listeners[0].host, self.listeners[0].port
        # dynamic broker configs overlay config.values before the topics resolve their settings
        self.dynamic_configs = open_dynamic_configs(
            config, self.node_id, self.storage, config.get("lockgate.cluster")
        )
        # the single node's metadata (and its topics' catalog, whose document a cluster
        # broker keeps too)
        self.store = LocalMetadataStore(self.storage, self.node_id)
        self.topics = TopicManager(self.storage, self.store, config, now_ms)
        self.dynamic_configs.listeners.append(self.topics.refresh_log_configs)
        # the groups' own configs (ConfigResource GROUP), read before the groups load
        self.group_configs = open_group_configs(
            config, self.storage, config.get("lockgate.cluster")
        )
        self.group_commit = GroupCommit(config.durable and self.storage.durable)
        self.heap = HeapKeeper()  # see server/heap.py: full collections walk only what is new
        # the metrics read the pieces built below at scrape time (and some of them feed it)
        self.metrics = BrokerMetrics(
            config.integer("lockgate.metrics.port") >= 0,
            ScrapeSources(
                topics=self.topics,
                group_commit=self.group_commit,
                transactions=lambda: self.transactions.txns.values(),
                groups=lambda: self.groups.groups,
                under_replicated=lambda: (
                    self.replicas.under_replicated() if self.replicas is not None else (0, 0)
                ),
                connections=lambda: (c.session.listener for c in self.connections),
                listeners=tuple(self.listener_ports),
                data_dir=getattr(self.storage, "root", None),
                transaction_max_timeout_ms=config.integer("transaction.max.timeout.ms"),
                lag_series_max=config.integer("lockgate.metrics.consumer.lag.max.series"),
                clock=now_ms,
                tiered=lambda: self.tiered,
            ),
        )
        # tiered storage (KIP-405), when the broker turns it on
        self.tiered = tiered_manager(config, self.storage, self.node_id, now_ms)
        # Cluster mode (lockgate.cluster set): the metadata store is etcd, partitions are
        # replicated and led where the controller says.
        self.cluster: EtcdMetadataStore | None = None
        self.replicas: ReplicaManager | None = None
        self.controller: ControllerService | None = None
        self.membership: Membership
        self.admin: TopicAdmin
        self.producer_ids: ProducerIdManager | ClusterProducerIds
        # a producer's batches to a partition that wait (for a coordinator) keep their order
        self.append_order = AppendOrder()
        cluster_url = config.get("lockgate.cluster")
        # how this broker's own connections to its peers are secured (cluster mode only)
        self.inter_broker_security: ClientSecurity | None = None
        if cluster_url:
            self.inter_broker_security = inter_broker_security(config)
            self.cluster = EtcdMetadataStore.from_url(
                cluster_url,
                session_timeout_ms=config.integer("broker.session.timeout.ms"),
                heartbeat_interval_ms=config.integer("broker.heartbeat.interval.ms"),
            )
            self.replicas = ReplicaManager(
                self.cluster,
                self.topics,
                self.node_id,
                self.group_commit,
                FetchSettings.from_config(config, self.inter_broker_security),
                config.integer("replica.lag.time.max.ms"),
                self.metrics.isr_changed,
                now_ms,
                self.replica_selector,
                self.tiered,
            )
            self.controller = ControllerService(self.cluster, self._unclean_election)
            self.membership = ClusterMembership(self.cluster, self.node_id)
            self.admin = ClusterTopicAdmin(self.topics, self.cluster)
            self.producer_ids = ClusterProducerIds(self.cluster)
        else:
            self.membership = ClusterMembership(self.store, self.node_id)
            self.admin = LocalTopicAdmin(self.topics, self.node_id)
            self.producer_ids = ProducerIdManager(self.store)
        # how appends as leader wait: for the group commit, and in a cluster for the ISR too
        self.writer: PartitionWriter = (
            LocalWriter(self.group_commit, now_ms)
            if self.replicas is None
            else ReplicatedWriter(self.group_commit, self.replicas, now_ms)
        )
        # asks the coordinators of ids other brokers coordinate (none on a single node)
        self.verifier = TxnVerifier(
            self.node_id, self.membership, self.topics, self.inter_broker_security
        )
        self.snapshots = Snapshotter(
            self.storage, config.integer("lockgate.coordinator.snapshot.interval.ms"), now_ms
        )
        timers = LoopTimers()  # the coordinators' timers, on this broker's event loop
        self.transactions = TransactionCoordinator(
            topics=self.topics,
            num_partitions=config.integer("transaction.state.log.num.partitions"),
            max_timeout_ms=config.integer("transaction.max.timeout.ms"),
            expiration_ms=config.integer("transactional.id.expiration.ms"),
            allocate=self.producer_ids.allocate,
            # (looked up at each call: the in-memory test cluster swaps the writer)
            write=lambda partition, batch: self.writer.write(partition, batch),
            clock=now_ms,
            on_loaded=lambda seconds: self.metrics.coordinator_loaded("transaction", seconds),
            snapshots=self.snapshots if self.cluster is None else None,
            # to each partition's leader; those led here (a single node's all) in-process
            markers=MarkerSender(
                self.node_id, self.membership, self.topics, self.writer, self.inter_broker_security
            ),
            verifier=self.verifier,
            timers=timers,
        )
        self.groups = GroupCoordinator(
            config,
            topics=self.topics,
            write=lambda partition, batch: self.writer.write(partition, batch, internal=True),
            clock=now_ms,
            on_loaded=lambda seconds: self.metrics.coordinator_loaded("group", seconds),
            snapshots=self.snapshots if self.cluster is None else None,
            timers=timers,
            group_configs=self.group_configs,
        )
        # the share coordinator (KIP-932): share partitions' durable state
        self.shares = ShareCoordinator(
            config,
            topics=self.topics,
            write=lambda partition, batch: self.writer.write(partition, batch, internal=True),
            clock=now_ms,
            on_loaded=lambda seconds: self.metrics.coordinator_loaded("share", seconds),
            timers=timers,
            partition_count=self._partition_count,
            single_node=self.cluster is None,
        )
        self.coordinators = CoordinatorLocator(
            self.topics,
            self.membership,
            self.admin,
            config,
            opens={SHARE: self.shares.open} if self.cluster is None else None,
        )
        share_peers = (
            None
            if self.cluster is None
            else PeerConnections(self.membership, self.inter_broker_security,
                                 f"lockgate-share-{self.node_id}", SHARE_STATE_TIMEOUT_MS)
        )  # fmt: skip
        # share partitions' state at their share coordinator, here or on another broker
        self.share_persister = RoutedPersister(
            self.shares,
            self.node_id,
            locate=lambda key: self.coordinators.locate(SHARE, key),
            peers=share_peers,
            timeout_ms=config.integer("share.coordinator.write.timeout.ms"),
            on_reset=lambda group, topic_id: self.share_leader.forget(group, topic_id),
        )
        # share groups' lag: the partitions' high watermarks, from their leaders
        self.groups.share_offsets.latest = LatestOffsets(
            self.topics, self.membership, self.node_id, share_peers
        )
        # the share-partition leader (KIP-932): in-flight records of the share partitions led here
        self.share_leader = ShareManager(
            config, self.group_configs, self.share_persister, timers, now_ms
        )
        # share groups initialize and delete share-partition state through it
        self.groups.share.persister = self.share_persister
        # a deleted topic (here, or learnt from the cluster metadata): the coordinators drop
        # what they hold of it on the partitions they serve here, as Kafka's do
        self.topics.deletion_listeners += [
            self.share_leader.topic_deleted, self.groups.topic_deleted, self.shares.topic_deleted,
        ]  # fmt: skip
        self._background: set[asyncio.Task[int]] = set()
        if self.tiered is not None:
            self.topics.deletion_listeners.append(self._delete_remote_topic)
        # None unless authorizer.class.name is set: then every handler checks ACLs
        self.authorizer = Authorizer.from_config(config, self.storage)
        # client quotas: the store is the truth, `quotas` enforces its latest table
        self.quotas = ClientQuotas(
            config.integer("quota.window.num"), config.integer("quota.window.size.seconds")
        )
        self.quota_store = open_quota_store(self.storage, cluster_url)
        self.quota_store.listeners.append(self.quotas.replace)
        self.quotas.replace(self.quota_store.table)
        # SCRAM credentials for SASL (PLAIN is checked against them too)
        self.credentials = open_credential_store(self.storage, cluster_url)
        self.metrics_port = -1
        self.connections: set[Connection] = set()
        self.connection_limits = ConnectionLimits(config)
        self.request_memory = RequestMemory(config.integer("queued.max.request.bytes"))
        self.fetch_sessions = FetchSessionCache(
            config.integer("max.incremental.fetch.session.cache.slots")
        )
        self._servers: list[asyncio.Server] = []
        self._handshakes: set[asyncio.Task[None]] = set()  # TLS connections being served
        self._tasks: list[asyncio.Task[None]] = []
        self.cleaner = LogCleaner(
            self.topics.compacted,
            now_ms,
            config.integer("log.cleaner.backoff.ms") / 1000,
            config.integer("log.cleaner.dedupe.buffer.size") // MAP_ENTRY_BYTES,
        )
        self._cleaner_task: asyncio.Task[None] | None = None
        self.started = asyncio.Event()
        self.services = Services(
            node_id=self.node_id,
            config=config,
            dynamic_configs=self.dynamic_configs,
            group_configs=self.group_configs,
            storage=self.storage,
            topics=self.topics,
            admin=self.admin,
            membership=self.membership,
            groups=self.groups,
            transactions=self.transactions,
            coordinators=self.coordinators,
            producer_ids=self.producer_ids,
            writer=self.writer,
            append_order=self.append_order,
            fetch_sessions=self.fetch_sessions,
            authorizer=self.authorizer,
            quotas=self.quotas,
            quota_store=self.quota_store,
            credentials=self.credentials,
            metrics=self.metrics,
            produce_creates_topics=config.flag("auto.create.topics.enable")
            and self.cluster is None,
            followers=self.replicas if self.replicas is not None else NO_FOLLOWERS,
            verifier=self.verifier,
            shares=self.shares,
            share_persister=self.share_persister,
            share_leader=self.share_leader,
            tiered=self.tiered,
        )

    @property
    def cluster_id(self) -> str:
        return self.cluster.cluster_id if self.cluster is not None else self.store.cluster_id

    def _partition_count(self, topic_id: uuid.UUID) -> int | None:
        record = self.topics.by_id.get(topic_id)
        return None if record is None else record.partitions

    def _unclean_election(self, topic: str) -> bool:
        return topic in self.topics.topics and self.topics.log_config(topic).unclean_leader_election

    def advertised_for(self, listener: str) -> tuple[str, int] | None:
        """Where clients of a listener reach this broker (None: no such listener)."""
        for item in self.listeners:
            if item.name == listener:
                port = item.advertised_port or self.listener_ports[item.name]
                return item.advertised_host or item.host or "127.0.0.1", port
        return None

    @property
    def advertised(self) -> tuple[str, int]:
        """The inter-broker listener's advertised address (registered in the cluster)."""
        address = self.advertised_for(self.inter_broker)
        assert address is not None
        return address

    def registration(self, incarnation: str | None = None) -> BrokerRegistration:
        """This broker as the cluster knows it: the inter-broker listener's address, every
        listener's advertised endpoint (what Metadata answers on each listener) and its rack."""
        host, port = self.advertised
        endpoints = []
        for item in self.listeners:
            address = self.advertised_for(item.name)
            assert address is not None
            endpoints.append(Endpoint(item.name, *address))
        rack = self.config.get("broker.rack") or None
        if incarnation is None:
            return BrokerRegistration(self.node_id, host, port, rack, endpoints=tuple(endpoints))
        return BrokerRegistration(
            self.node_id, host, port, rack, incarnation=incarnation, endpoints=tuple(endpoints)
        )

    async def start(self) -> None:
        started = time.monotonic()
        clean = self._take_clean_shutdown_mark()
        if self.authorizer is not None:  # ACLs before the first request
            await self.authorizer.start()
        if self.cluster is None:
            self.topics.load(clean)  # (each partition it registers, it leads)
            self._ensure_internal_topics()
            self._check_tiered_topics()
        else:
            self.topics.clean_start = clean  # replicas open as the cluster metadata names them
        # bound first (port 0 resolves to the port to register) but serving only once joined:
        # a broker that had not yet read the cluster metadata would tell clients no topic exists
        loop = asyncio.get_running_loop()
        for listener in self.listeners:
            accept = functools.partial(self._accept, listener)
            context = self._tls[listener.name]
            if context is None:
                server = await asyncio.start_server(
                    accept,
                    listener.host or None,
                    listener.port,
                    limit=STREAM_LIMIT,
                    reuse_address=True,
                    start_serving=self.cluster is None,
                )
            else:  # the handshake run by lockgate, not asyncio: one log line per refusal
                acceptor = functools.partial(
                    TlsAcceptor,
                    context,
                    listener.name,
                    accept,
                    TLS_HANDSHAKE_TIMEOUT_S,
                    STREAM_LIMIT,
                    self._handshakes,
                )
                server = await loop.create_server(
                    acceptor,
                    listener.host or None,
                    listener.port,
                    reuse_address=True,
                    start_serving=self.cluster is None,
                )
            self._servers.append(server)
            if server.sockets and listener.port == 0:
                self.listener_ports[listener.name] = server.sockets[0].getsockname()[1]
            if self.cluster is None:  # serving already: registered with the ports bound so far
                await self.store.register(self.registration(incarnation=""))
        self.port = self.listener_ports[self.listeners[0].name]
        await self.quota_store.start()
        await self.credentials.start()
        await self.dynamic_configs.start()
        await self.group_configs.start()
        if self.cluster is not None:
            await self._join_cluster()
            for server in self._servers:
                await server.start_serving()
        metrics_port = self.config.integer("lockgate.metrics.port")
        if metrics_port >= 0:
            self.metrics_port = await self.metrics.serve(
                self.config.get("lockgate.metrics.host"), metrics_port
            )
        self._tasks.append(asyncio.create_task(self._retention_loop()))
        if self.tiered is not None:
            self._tasks.append(asyncio.create_task(self._tiered_loop(self.tiered)))
        self._tasks.append(asyncio.create_task(self._producer_expiry_loop()))
        self._tasks.append(asyncio.create_task(self._offsets_expiry_loop()))
        self._tasks.append(asyncio.create_task(self._transaction_loops()))
        if self.cluster is None:
            self._tasks.append(asyncio.create_task(self.snapshots.run()))
            self._tasks.append(asyncio.create_task(self._open_partitions()))
        log.info(
            "lockgate broker %d listening on %s (cluster %s, %d partitions in %.2fs, "
            "durability %s)",
            self.node_id,
            ", ".join(
                f"{item.name}://{item.host}:{self.listener_ports[item.name]}"
                for item in self.listeners
            ),
            self.cluster_id,
            len(self.topics.partitions) + self.topics.pending,
            time.monotonic() - started,
            "fsync" if self.group_commit.durable else "page-cache",
        )
        self.heap.start()
        self.started.set()

    async def _open_partitions(self) -> None:
        """Opens the logs of the partitions registered at start, in steps of 10 ms between the
        requests (which open the ones they need at once)."""
        started = time.monotonic()
        count = await run_yielding(self.topics.opening())
        if count:
            log.info("%d partition logs opened in %.2fs", count, time.monotonic() - started)
            self.heap.settle()

    async def _join_cluster(self) -> None:
        """Registers in the metadata store (under a lease), then follows it: replicas take
        the roles it gives, and this broker stands for controller."""
        assert self.cluster is not None and self.replicas is not None
        assert self.controller is not None and isinstance(self.producer_ids, ClusterProducerIds)
        await self.cluster.start()
        await self.cluster.register(self.registration())
        self.replicas.leadership_listeners.append(self._on_leadership)
        self.replicas.start()
        self.controller.start()
        self.producer_ids.start()

    def _on_leadership(self, topic: str, index: int, epoch: int | None) -> None:
        """A cluster broker coordinates the ids and groups of the internal partitions it leads."""
        if topic == TRANSACTION_STATE_TOPIC:
            self.transactions.runtime.on_leadership(index, epoch)
        elif topic == CONSUMER_OFFSETS_TOPIC:
            self.groups.runtime.on_leadership(index, epoch)
        elif topic == SHARE_GROUP_STATE_TOPIC:
            self.shares.runtime.on_leadership(index, epoch)

    async def _leave_cluster(self) -> None:
        """A controlled shutdown: stop leading and fetching, then give the lease back, so
        the controller moves leadership at once instead of after the session timeout."""
        assert self.cluster is not None and self.replicas is not None
        assert self.controller is not None
        await self.replicas.stop()
        await self.controller.stop()
        try:
            await self.cluster.close()
        except Exception as exc:  # etcd away: the lease runs out by itself
            log.warning("leaving the cluster: %s", exc)

    def _take_clean_shutdown_mark(self) -> bool:
        """Whether the last stop was clean (its logs were synced and closed), leaving the mark
        at "unclean" for as long as this broker runs, as Kafka's .kafka_cleanshutdown file."""
        clean = self.storage.read_all(CLEAN_SHUTDOWN_MARK) == b"1"
        if clean:
            try:
                self.storage.write_atomic(CLEAN_SHUTDOWN_MARK, b"0")
            except OSError as exc:  # then this start cannot trust it either: check everything
                log.warning("cannot reset the clean-shutdown mark (%s): checking every log", exc)
                return False
        return clean

    def _ensure_internal_topics(self) -> None:
        self.transactions.runtime.ensure_topic()
        self.groups.runtime.ensure_topic()
        self.shares.open_existing()  # (else made on first use)

    async def _transaction_loops(self) -> None:
        """Loads the coordinators' logs after the listener is up (requests meanwhile get
        COORDINATOR_LOAD_IN_PROGRESS), starts the log cleaner, then aborts timed-out
        transactions and expires idle ids."""
        await asyncio.sleep(0)
        if self.cluster is None:  # (a cluster broker loads partitions as it comes to lead them)
            await self.transactions.runtime.load()
            await self.groups.runtime.load()
            if self.shares.runtime.owned:  # (an earlier run made __share_group_state)
                await self.shares.runtime.load()
        self.shares.start()  # its cold snapshots and pruning
        if self.config.flag("log.cleaner.enable"):  # after the loads, not competing with them
            self._cleaner_task = asyncio.create_task(self.cleaner.run())
        abort_every = self.config.integer(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        )
        expire_every = self.config.integer(
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        )
        last_expiry = time.monotonic()
        while True:
            await asyncio.sleep(abort_every / 1000)
            await self.transactions.abort_timed_out()
            if time.monotonic() - last_expiry >= expire_every / 1000:
                last_expiry = time.monotonic()
                await self.transactions.expire_idle()

    async def _accept(
        self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        if not self.connection_limits.admit(address):
            writer.close()  # as Kafka: refused at once, before any request is read
            return
        connection = Connection(
            self.services, self.metrics, self.request_memory, reader, writer, listener
        )
        self.connections.add(connection)
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            self.connection_limits.release(address)
            self.share_leader.connection_closed(connection.serial)

    async def stop(self) -> None:
        """Graceful: stop accepting, answer in-flight requests, flush, close the logs."""
        log.info("shutting down")
        self.heap.stop()
        for server in self._servers:
            server.close()
        if self.cluster is not None:
            await self._leave_cluster()
        await self.metrics.close()
        await self.quota_store.close()
        await self.credentials.close()
        await self.dynamic_configs.close()
        await self.group_configs.close()
        if self.authorizer is not None:
            await self.authorizer.close()
        self.cleaner.stop()
        if self._cleaner_task is not None:  # a pass gives up at its next batch
            await asyncio.wait({self._cleaner_task}, timeout=10)
            self._cleaner_task.cancel()
        for task in self._tasks:
            task.cancel()
        self.shares.stop()
        self.share_leader.stop()
        for connection in list(self.connections):
            connection.stop_reading()
        deadline = time.monotonic() + 30
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await self.transactions.drain()
        await self.verifier.close()
        await self.share_persister.close()
        await self.group_commit.drain()
        synced = self.group_commit.failure is None
        try:
            await asyncio.to_thread(self._sync_everything)
        except OSError as exc:  # already offline: recovery at the next start cuts torn data
            log.error("final fsync failed: %s", exc)
            synced = False
        if synced:
            self.snapshots.write_all()
        self.topics.close()
        await self.store.close()
        if synced and self.topics.unverified:
            log.warning("logs left by a crash were not all opened: the next start checks them")
        elif synced:
            try:
                self.storage.write_atomic(CLEAN_SHUTDOWN_MARK, b"1")
            except OSError as exc:
                log.warning("no clean-shutdown mark (%s): the next start checks every log", exc)
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        log.info("stopped")

    def _sync_everything(self) -> None:
        for partition in self.topics.partitions.values():
            for segment in partition.segments[-2:]:
                for file in (segment.log, segment.offset_index.file, segment.time_index.file):
                    file.sync()

    async def _retention_loop(self) -> None:
        interval = self.config.integer("log.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            self.apply_retention()

    def _check_tiered_topics(self) -> None:
        """As Kafka: tiered topics need tiered storage on (else their local logs would never
        be trimmed, nor their remote part read)."""
        if self.tiered is not None:
            return
        tiered = sorted(
            name for name in self.topics.topics if self.topics.log_config(name).remote_storage
        )
        if tiered:
            raise ConfigError(
                "You have to delete all topics with the property remote.storage.enable=true "
                f"before disabling tiered storage cluster-wide (tiered topics: {', '.join(tiered)})"
            )

    async def _tiered_loop(self, tiered: RemoteLogManager) -> None:
        interval = self.config.integer("remote.log.manager.task.interval.ms") / 1000
        while True:  # a pass at once: a start learns its partitions' remote log starts
            try:
                await tiered.run(self.topics.partitions.values())
            except Exception:  # a bug: logged, and the next pass tries again
                log.exception("tiered storage pass failed")
            await asyncio.sleep(interval)

    def _delete_remote_topic(self, topic_id: uuid.UUID, name: str) -> None:
        assert self.tiered is not None
        task = asyncio.get_running_loop().create_task(self.tiered.topic_deleted(name, topic_id))
        self._background.add(task)
        task.add_done_callback(self._remote_topic_deleted)

    def _remote_topic_deleted(self, task: asyncio.Task[int]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("deleted topic: its objects are not all deleted from the object "
                        "store (the orphan check finds them): %s", task.exception())  # fmt: skip

    async def _offsets_expiry_loop(self) -> None:
        interval = self.config.integer("offsets.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            self.groups.expire_offsets(now_ms())

    async def _producer_expiry_loop(self) -> None:
        interval = self.config.integer("producer.id.expiration.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            self.expire_producers()

    def expire_producers(self) -> int:
        """Forgets producers idle for longer than producer.id.expiration.ms (KIP-360: they
        are told UNKNOWN_PRODUCER_ID if they come back mid-sequence and bump their epoch)."""
        cutoff = now_ms() - self.config.integer("producer.id.expiration.ms")
        expired = sum(p.producers.expire(cutoff) for p in self.topics.partitions.values())
        if expired:
            log.info("expired %d idle producer entries", expired)
        return expired

    def apply_retention(self) -> int:
        now = now_ms()
        return sum(p.apply_retention(now) for p in list(self.topics.partitions.values()))
