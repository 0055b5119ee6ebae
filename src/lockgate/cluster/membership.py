# Who is in the cluster, as Metadata, DescribeCluster and FindCoordinator answer it: the
# metadata store's view, in both modes (a single node's store, cluster/local.py, has this node
# registered, as the controller and the leader of every partition it has open).
from __future__ import annotations

import dataclasses
from typing import Protocol

from lockgate.cluster.metadata import NO_LEADER, BrokerRegistration, MetadataStore, PartitionState


class Membership(Protocol):
    def cluster_id(self) -> str: ...

    def brokers(self) -> list[BrokerRegistration]: ...

    def controller_id(self) -> int: ...

    def partition(self, topic: str, index: int) -> PartitionState | None:
        """Replicas, leader, leader epoch and ISR; None if unknown."""
        ...


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
