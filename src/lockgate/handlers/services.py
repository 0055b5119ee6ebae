# What a handler may call: the services the composition root builds once and hands to every
# request's context. A handler reaches nothing else (not the broker, not the connection), so
# this record is the whole surface of the request layer; both modes fill every field (a single
# node with engines that have nothing to replicate or ask). metrics is the narrow part of the
# broker's registry that request handling feeds.
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lockgate.cluster.membership import Membership
    from lockgate.config.dynamic import DynamicBrokerConfigs
    from lockgate.config.group_configs import GroupConfigs
    from lockgate.config.properties import BrokerConfig
    from lockgate.coordinator.group.service import GroupCoordinator
    from lockgate.coordinator.locator import CoordinatorLocator
    from lockgate.coordinator.share.persister import Persister
    from lockgate.coordinator.share.service import ShareCoordinator
    from lockgate.coordinator.txn.coordinator import TransactionCoordinator
    from lockgate.coordinator.txn.verifier import TxnVerifier
    from lockgate.handlers.fetch_sessions import FetchSessionCache
    from lockgate.log.append_order import AppendOrder
    from lockgate.log.partition import Partition
    from lockgate.replication.writer import PartitionWriter
    from lockgate.security.authorizer import Authorizer
    from lockgate.security.credentials import CredentialStore
    from lockgate.security.quota_store import QuotaStore
    from lockgate.security.quotas import ClientQuotas
    from lockgate.share.manager import ShareManager
    from lockgate.storage.engine import StorageEngine
    from lockgate.tiered.manager import RemoteLogManager
    from lockgate.topics.admin import TopicAdmin
    from lockgate.topics.directory import TopicManager


class RequestMetrics(Protocol):
    """The tallies handlers feed (the broker's Prometheus registry implements them)."""

    def partition_errors(self, api_key: int, codes: Iterable[int]) -> None: ...

    def appended(self, topic: str, size: int, messages: int) -> None: ...

    def fetched(
        self, entries: Iterable[tuple[str | None, Mapping[str, Any]]], follower: bool
    ) -> None: ...

    def share_fetched(self, sizes: Iterable[tuple[str, int]]) -> None: ...


class Followers(Protocol):
    """The leader's side of the follower fetches it serves, and of the consumers it sends to
    a follower (KIP-392): ReplicaManager in a cluster; a single node has no followers,
    NO_FOLLOWERS."""

    def is_follower(self, replica_id: int) -> bool: ...

    def on_follower_fetch(
        self, partition: Partition, replica: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None: ...

    def preferred_read_replica(
        self, partition: Partition, client_rack: str | None, listener: str, fetch_offset: int
    ) -> int:
        """The broker a consumer should read from instead of this leader, or -1."""
        ...


class ProducerIds(Protocol):
    def allocate(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Services:
    node_id: int
    config: BrokerConfig
    dynamic_configs: DynamicBrokerConfigs
    group_configs: GroupConfigs  # ConfigResource GROUP: the groups' overrides
    storage: StorageEngine  # DescribeLogDirs reports on it
    topics: TopicManager  # the partitions this broker hosts
    admin: TopicAdmin  # creates, deletes and grows topics
    membership: Membership  # the brokers and who leads what
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    coordinators: CoordinatorLocator
    producer_ids: ProducerIds
    writer: PartitionWriter  # appends as leader, then waits until durable (and replicated)
    append_order: AppendOrder  # a producer's batches that wait keep their order
    fetch_sessions: FetchSessionCache
    authorizer: Authorizer | None  # None: no ACLs to check
    quotas: ClientQuotas
    quota_store: QuotaStore
    credentials: CredentialStore
    metrics: RequestMetrics
    # auto.create.topics.enable on a single node; a cluster creates topics on Metadata
    # requests only, as Kafka does
    produce_creates_topics: bool
    followers: Followers
    verifier: TxnVerifier  # asks other brokers' txn coordinators (none on a single node)
    shares: ShareCoordinator  # the share coordinator (share-state APIs 83-87)
    # the share-partition state of any share partition, wherever it is coordinated (KIP-932)
    share_persister: Persister
    share_leader: ShareManager  # the share-partition leader: share sessions and partitions
    # tiered storage (KIP-405): copies and remote reads; None when
    # remote.log.storage.system.enable is false
    tiered: RemoteLogManager | None
