# Cluster metadata as the brokers share it: registered brokers, the controller, topics and each
# partition's state {replicas, leader, leader epoch, ISR, partition epoch}. Engines keep it in
# a store (etcd in cluster mode) and mirror it into a MetadataView that the broker reads
# synchronously; every change goes through the store, a partition's state only by
# compare-and-swap on the revision it was read at, so two writers never both win.
from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class Endpoint:
    listener: str  # the listener's name, upper case
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    node_id: int
    host: str  # the inter-broker listener's advertised address: other brokers connect here
    port: int
    rack: str | None = None
    # new at every start of the process: tells a restarted broker from its previous life
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)
    # every listener's advertised address; empty in a registration written before listeners
    # were named (its one address then serves every listener)
    endpoints: tuple[Endpoint, ...] = ()

    def on_listener(self, listener: str) -> BrokerRegistration | None:
        """This broker as clients of `listener` reach it (host and port of that listener),
        or None when it has no such listener."""
        if not self.endpoints:
            return self
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return dataclasses.replace(self, host=endpoint.host, port=endpoint.port)
        return None

    def encode(self) -> bytes:
        return json.dumps(
            {"node_id": self.node_id, "host": self.host, "port": self.port, "rack": self.rack,
             "incarnation": self.incarnation,
             "endpoints": [{"listener": e.listener, "host": e.host, "port": e.port}
                           for e in self.endpoints]}
        ).encode()  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes) -> BrokerRegistration:
        data = json.loads(raw)
        endpoints = tuple(Endpoint(str(e["listener"]), str(e["host"]), int(e["port"]))
                          for e in data.get("endpoints", ()))  # fmt: skip
        return cls(int(data["node_id"]), str(data["host"]), int(data["port"]), data.get("rack"),
                   str(data.get("incarnation", "")), endpoints)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What Kafka's controller keeps per partition. `partition_epoch` moves on every change
    (leader or ISR), `leader_epoch` only when the leader changes (KIP-101, KIP-359)."""

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0

    def encode(self) -> bytes:
        return json.dumps(
            {"replicas": list(self.replicas), "leader": self.leader,
             "leader_epoch": self.leader_epoch, "isr": list(self.isr),
             "partition_epoch": self.partition_epoch}
        ).encode()  # fmt: skip

    def __str__(self) -> str:
        return (f"leader {self.leader} epoch {self.leader_epoch} isr {list(self.isr)} "
                f"(partition epoch {self.partition_epoch})")  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes) -> PartitionState:
        data = json.loads(raw)
        return cls(tuple(int(r) for r in data["replicas"]), int(data["leader"]),
                   int(data["leader_epoch"]), tuple(int(r) for r in data["isr"]),
                   int(data["partition_epoch"]))  # fmt: skip


@dataclass(slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    def encode(self) -> bytes:
        return json.dumps(
            {"name": self.name, "topic_id": str(self.topic_id), "partitions": self.partitions,
             "configs": self.configs, "internal": self.internal}
        ).encode()  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes) -> TopicRecord:
        data = json.loads(raw)
        return cls(str(data["name"]), uuid.UUID(data["topic_id"]), int(data["partitions"]),
                   dict(data.get("configs", {})), bool(data.get("internal", False)))  # fmt: skip


class TopicCatalog(Protocol):
    """The topics of the single-node engine (cluster/local.py), read and written in place
    by TopicManager once the logs exist."""

    @property
    def cluster_id(self) -> str: ...

    def topics(self) -> dict[str, TopicRecord]: ...

    def put_topic(self, record: TopicRecord) -> None: ...

    def remove_topic(self, name: str) -> None: ...

    def lead(self, topic: str, index: int, leader_epoch: int) -> None:
        """This node leads the partition at `leader_epoch`: its log is open."""
        ...


@dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    """A value with the store revision it was last written at: the token of a CAS."""

    value: T
    revision: int


@dataclass(frozen=True, slots=True)
class Controller:
    node_id: int
    # Grows with every election (the store's revision of the election): a decision of an
    # older controller is recognisable as such.
    epoch: int


# What changed, for listeners: ("broker", "3"), ("controller", ""), ("topic", "orders"),
# ("partition", "orders/0"); the view has already applied it.
Change = tuple[str, str]


class MetadataView:
    """The mirror of the store that the broker reads without waiting. Only the engine
    applies changes to it, in the store's revision order."""

    def __init__(self) -> None:
        self.revision = 0
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller: Controller | None = None
        self.topics: dict[str, Versioned[TopicRecord]] = {}
        self.partitions: dict[tuple[str, int], Versioned[PartitionState]] = {}
        self.listeners: list[Callable[[Change], None]] = []

    def topic_partitions(self, topic: str) -> dict[int, Versioned[PartitionState]]:
        return {p: state for (t, p), state in self.partitions.items() if t == topic}

    def notify(self, change: Change) -> None:
        for listener in list(self.listeners):
            listener(change)


class MetadataStore(Protocol):
    """The one interface the broker uses for shared cluster metadata. Writes return once
    the view reflects them (a caller reads its own writes)."""

    view: MetadataView
    lease_listeners: list[Callable[[bool], None]]  # called with whether the lease is live

    @property
    def cluster_id(self) -> str: ...

    @property
    def live(self) -> bool:
        """False while this broker's registration may have expired: it must not act as a
        leader or as the controller until it is live again."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def register(self, broker: BrokerRegistration) -> None: ...

    async def campaign(self) -> Controller:
        """Waits until this broker is the controller and returns its term."""
        ...

    async def resign(self) -> None: ...

    async def create_topic(self, spec: TopicRecord, states: dict[int, PartitionState]) -> bool:
        """Creates the topic and its partitions' states at once; False if it exists."""
        ...

    async def delete_topic(self, name: str) -> bool: ...

    async def update_topic(
        self, record: TopicRecord, revision: int, states: dict[int, PartitionState] | None = None
    ) -> bool:
        """A topic's record if still at `revision` (with `states`: its new partitions)."""
        ...

    async def allocate_producer_ids(self, size: int) -> int:
        """Reserves `size` producer ids no other broker gets; returns the first."""
        ...

    async def compare_and_set(
        self,
        topic: str,
        index: int,
        state: PartitionState,
        revision: int,
        controller_epoch: int | None = None,
    ) -> Versioned[PartitionState] | None:
        """Writes a partition's state if it is still at `revision` (0: if absent); None when
        another writer got there first (read the view again and decide anew)."""
        ...
