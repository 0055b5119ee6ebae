# Who is in the cluster, as Metadata, DescribeCluster and FindCoordinator answer it: the
# single node is alone and leads everything; a cluster broker reads the metadata store's view.
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

from lockgate.cluster.metadata import NO_LEADER, BrokerRegistration, MetadataStore, PartitionState


class Membership(Protocol):
    def cluster_id(self) -> str: ...

    def brokers(self) -> list[BrokerRegistration]: ...

    def controller_id(self) -> int: ...

    def partition(self, topic: str, index: int) -> PartitionState | None:
        """Replicas, leader, leader epoch and ISR; None if unknown."""
        ...


class _Led(Protocol):
    @property
    def leader_epoch(self) -> int: ...


class _Partitions(Protocol):
    def get(self, topic: str, index: int) -> _Led | None: ...


class SingleNode:
    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        registration: Callable[[], BrokerRegistration],
        partitions: _Partitions,
    ) -> None:
        self.node_id = node_id
        self._cluster_id = cluster_id
        self._registration = registration  # (its ports are known once the listeners bind)
        self.partitions = partitions

    def cluster_id(self) -> str:
        return self._cluster_id

    def brokers(self) -> list[BrokerRegistration]:
        return [self._registration()]

    def controller_id(self) -> int:
        return self.node_id

    def partition(self, topic: str, index: int) -> PartitionState | None:
        node = self.node_id
        partition = self.partitions.get(topic, index)
        if partition is None:  # its log could not be opened: no leader to name
            return PartitionState((node,), NO_LEADER, -1, ())
        return PartitionState((node,), node, partition.leader_epoch, (node,))


class ClusterMembership:
    def __init__(self, store: MetadataStore, node_id: int) -> None:
        self.store = store
        self.node_id = node_id

    def cluster_id(self) -> str:
        return self.store.cluster_id

    def brokers(self) -> list[BrokerRegistration]:
        return sorted(self.store.view.brokers.values(), key=lambda b: b.node_id)

    def controller_id(self) -> int:
        controller = self.store.view.controller
        return NO_LEADER if controller is None else controller.node_id

    def partition(self, topic: str, index: int) -> PartitionState | None:
        versioned = self.store.view.partitions.get((topic, index))
        if versioned is None:
            return None
        state = versioned.value
        if state.leader == self.node_id and not self.store.live:
            # our view may be stale and we refuse to lead: send clients to ask elsewhere
            return dataclasses.replace(state, leader=NO_LEADER)
        return state


def on_listener(brokers: list[BrokerRegistration], listener: str) -> list[BrokerRegistration]:
    """The brokers as clients of `listener` reach them; a broker without that listener is left
    out, as Kafka leaves it out of Metadata and DescribeCluster."""
    found = (broker.on_listener(listener) for broker in brokers)
    return [broker for broker in found if broker is not None]
