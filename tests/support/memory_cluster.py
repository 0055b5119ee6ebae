# Cluster brokers in the test's own process, for tests that need brokers talking to each other
# over real sockets but not etcd: each is a Broker on 127.0.0.1 (port 0) storing in memory,
# with a ReplicaManager and the membership of a cluster over one MemoryStore they share. The
# test writes topics and partition states into the store, as the controller would. Only the
# listener and the ReplicaManager run (and, once asked, the coordinators with their marker
# sender): none of the broker's background loops (timeouts, retention) do.
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable

from lockgate.client.connection import BrokerConnection
from lockgate.cluster.membership import ClusterMembership
from lockgate.cluster.metadata import (
    BrokerRegistration,
    MetadataView,
    PartitionState,
    TopicRecord,
    Versioned,
)
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.locator import CoordinatorLocator
from lockgate.coordinator.txn.markers import MarkerSender
from lockgate.coordinator.txn.verifier import TxnVerifier
from lockgate.replication.fetcher import FetchSettings
from lockgate.replication.manager import ReplicaManager
from lockgate.replication.writer import ReplicatedWriter
from lockgate.server.broker import Broker
from lockgate.server.connection import Connection
from lockgate.storage.memory import MemoryEngine


class MemoryStore:
    """The parts of the metadata store the brokers use; writes are compare-and-swap."""

    def __init__(self) -> None:
        self.view = MetadataView()
        self.lease_listeners: list[Callable[[bool], None]] = []
        self.is_live = True
        self.revision = 0

    @property
    def live(self) -> bool:
        return self.is_live

    @property
    def cluster_id(self) -> str:
        return "memory-cluster"

    def put_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        self.revision += 1
        record = TopicRecord(name, uuid.uuid4(), partitions, configs or {})
        self.view.topics[name] = Versioned(record, self.revision)
        self.view.notify(("topic", name))

    def put(self, topic: str, index: int, state: PartitionState) -> None:
        self.revision += 1
        self.view.partitions[(topic, index)] = Versioned(state, self.revision)
        self.view.notify(("partition", f"{topic}/{index}"))

    def delete_topic(self, name: str) -> None:
        self.revision += 1
        del self.view.topics[name]
        for key in [k for k in self.view.partitions if k[0] == name]:
            del self.view.partitions[key]
        self.view.notify(("topic", name))

    async def compare_and_set(
        self,
        topic: str,
        index: int,
        state: PartitionState,
        revision: int,
        controller_epoch: int | None = None,
    ) -> Versioned[PartitionState] | None:
        current = self.view.partitions.get((topic, index))
        if current is None or current.revision != revision:
            return None
        self.put(topic, index, state)
        return self.view.partitions[(topic, index)]


def replica_manager(broker: Broker, store: MemoryStore) -> ReplicaManager:
    """A ReplicaManager over the store, wired to the broker's pieces as the broker wires its own
    in cluster mode (its followers' connections in plaintext)."""
    return ReplicaManager(
        store,  # type: ignore[arg-type]
        broker.topics,
        broker.node_id,
        broker.group_commit,
        FetchSettings.from_config(broker.config, None),
        broker.config.integer("replica.lag.time.max.ms"),
        broker.metrics.isr_changed,
        broker.topics.clock_ms,  # the broker's clock
        broker.replica_selector,
    )


class MemoryClusterBroker:
    def __init__(self, store: MemoryStore, node_id: int, settings: dict[str, str]) -> None:
        config = BrokerConfig(
            {"listeners": "127.0.0.1:0", "node.id": str(node_id),
             "lockgate.durability": "page-cache", **settings}
        )  # fmt: skip
        self.node_id = node_id
        self.broker = broker = Broker(config, MemoryEngine())
        broker.replicas = replica_manager(broker, store)
        broker.writer = ReplicatedWriter(broker.group_commit, broker.replicas, broker.writer.clock)
        broker.membership = ClusterMembership(store, node_id)  # type: ignore[arg-type]
        broker.verifier = TxnVerifier(
            node_id, broker.membership, broker.topics, broker.inter_broker_security
        )
        broker.transactions.verifier = broker.verifier
        # coordinators are found as in a cluster: the leaders of the internal partitions
        broker.coordinators = CoordinatorLocator(
            broker.topics, broker.membership, broker.admin, config
        )
        broker.services = dataclasses.replace(
            broker.services,
            followers=broker.replicas,
            writer=broker.writer,
            membership=broker.membership,
            verifier=broker.verifier,
            coordinators=broker.coordinators,
        )
        self.store = store
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._stopped = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.broker.port = self._server.sockets[0].getsockname()[1]
        self.register(self.broker.port)

    def run_coordinators(self) -> None:
        """From now on the broker's group and transaction coordinators follow the partitions of
        __consumer_offsets / __transaction_state it leads, as a cluster broker's do once it
        has joined (off by default: only the listener runs)."""
        assert self.broker.replicas is not None
        self.broker.replicas.leadership_listeners.append(self.broker._on_leadership)
        broker = self.broker
        broker.transactions.markers = MarkerSender(
            self.node_id,
            broker.membership,
            broker.topics,
            broker.writer,
            broker.inter_broker_security,
        )

    @property
    def connection_count(self) -> int:
        """Connections open to this broker now."""
        return len(self._connections)

    def drop_connections(self) -> None:
        """Closes every connection open to this broker (clients and other brokers)."""
        for task in self._connections:
            task.cancel()

    def register(self, port: int) -> None:
        """Registers the broker at `port` (another port than its own: unreachable), in its
        broker.rack."""
        rack = self.broker.config.get("broker.rack") or None
        self.store.view.brokers[self.node_id] = BrokerRegistration(
            self.node_id, "127.0.0.1", port, rack
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            broker = self.broker
            listener = broker.listeners[0]
            await Connection(
                broker.services, broker.metrics, broker.request_memory, reader, writer, listener
            ).run()
        finally:
            self._connections.discard(task)

    async def stop(self) -> None:
        """Everything stopped (again: a no-op), the broker deregistered."""
        if self._stopped:
            return
        self._stopped = True
        self.store.view.brokers.pop(self.node_id, None)
        assert self.broker.replicas is not None
        await self.broker.replicas.stop()
        await self.broker.verifier.close()
        for index in list(self.broker.transactions.runtime.owned):  # cancels loads and completions
            self.broker.transactions.runtime.on_leadership(index, None)
        if self.broker.transactions.markers is not None:
            await self.broker.transactions.markers.close()
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.broker.topics.close()


@contextlib.asynccontextmanager
async def connected(member: MemoryClusterBroker) -> AsyncIterator[BrokerConnection]:
    """A client connection to the broker, for raw requests."""
    connection = BrokerConnection("127.0.0.1", member.broker.port, node_id=member.node_id)
    await connection.connect()
    try:
        yield connection
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def memory_cluster(
    count: int,
    settings: dict[str, str] | None = None,
    node_settings: dict[int, dict[str, str]] | None = None,
) -> AsyncIterator[tuple[MemoryStore, list[MemoryClusterBroker]]]:
    """`count` brokers (node ids 0..count-1) registered in a fresh MemoryStore, each with
    `settings` and its own `node_settings` (its broker.rack, say)."""
    store = MemoryStore()
    brokers = [
        MemoryClusterBroker(store, n, {**(settings or {}), **(node_settings or {}).get(n, {})})
        for n in range(count)
    ]
    try:
        for member in brokers:
            await member.start()
        for member in brokers:
            assert member.broker.replicas is not None
            member.broker.replicas.start()
        yield store, brokers
    finally:
        for member in brokers:
            await member.stop()
