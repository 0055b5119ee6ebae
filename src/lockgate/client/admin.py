# client/admin.py — topic and config administration: create/delete/list/describe topics,
# add partitions, describe and incrementally alter topic configs; transactions and producer
# state through admin_transactions.py, consumer groups through admin_groups.py.
#
# Every method raises the named KafkaError of the first resource that failed (in the order
# given); resources before it in a batch may have been changed already, as with Kafka's own
# admin client. Topic changes go to the controller (any broker on KRaft clusters, which forward).
from __future__ import annotations

import enum
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockgate.client import admin_acls as acls
from lockgate.client import admin_groups as groups
from lockgate.client import admin_log_dirs as log_dirs
from lockgate.client import admin_quotas as quotas
from lockgate.client import admin_records as records
from lockgate.client import admin_scram as scram
from lockgate.client import admin_share_groups as share_groups
from lockgate.client import admin_transactions as transactions
from lockgate.client.cluster import Cluster, ClusterClient, PartitionInfo, TopicInfo, TopicPartition
from lockgate.client.connection import DEFAULT_CLIENT_ID
from lockgate.client.errors import (
    ErrorCode,
    KafkaError,
    UnknownTopicOrPartitionError,
    error_for,
    raise_for,
)
from lockgate.client.security import ClientSecurity
from lockgate.protocol.api import ApiKey
from lockgate.security.acls import AclBinding, AclBindingFilter

# The broker may use the whole operation timeout before it answers; the client waits that
# long plus this margin for the network.
RESPONSE_MARGIN_MS = 1_000


class ResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4
    GROUP = 32  # a group's configs (Kafka 4's ConfigResource GROUP)


class ConfigSource(enum.IntEnum):
    """DescribeConfigs' config_source (Kafka's DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class AlterConfigOp(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    # (name, value, source) beneath the value, most important first; only when asked for
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ()

    @property
    def is_default(self) -> bool:
        return self.source in (ConfigSource.DEFAULT_CONFIG, ConfigSource.STATIC_BROKER_CONFIG)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: tuple[PartitionInfo, ...]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


class Admin(ClusterClient):
    """`async with Admin("host:port") as admin: await admin.create_topics([...])`."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] | None = None,
        *,
        cluster: Cluster | None = None,
        client_id: str | None = DEFAULT_CLIENT_ID,
        request_timeout_ms: int = 30_000,
        security: ClientSecurity | None = None,
    ) -> None:
        super().__init__(bootstrap_servers, cluster, client_id, security, request_timeout_ms)

    # ------------------------------------------------------------------------------------------
    # Topics

    async def create_topics(
        self,
        topics: Iterable[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> dict[str, uuid.UUID | None]:
        """Creates topics; returns their ids (None from brokers older than CreateTopics v7)."""
        wanted = list(topics)
        connection = await self.cluster.controller_connection()
        response = await connection.request(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": topic.name,
                        "num_partitions": topic.num_partitions,
                        "replication_factor": topic.replication_factor,
                        "assignments": [],
                        "configs": [
                            {"name": name, "value": value} for name, value in topic.configs.items()
                        ],
                    }
                    for topic in wanted
                ],
                "timeout": self._operation_timeout(timeout_ms),
                "validate_only": validate_only,
            },
            timeout_ms=self._operation_timeout(timeout_ms) + RESPONSE_MARGIN_MS,
        )
        results = {result.name: result for result in response.topics}
        created: dict[str, uuid.UUID | None] = {}
        for topic in wanted:
            result = _result_for(results, topic.name, "CreateTopics")
            raise_for(result.error_code, result.error_message, f"topic {topic.name}")
            topic_id = getattr(result, "topic_id", None)
            created[topic.name] = None if topic_id is None or topic_id.int == 0 else topic_id
        return created

    async def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> uuid.UUID | None:
        created = await self.create_topics(
            [NewTopic(name, num_partitions, replication_factor, dict(configs or {}))],
            timeout_ms=timeout_ms,
        )
        return created[name]

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None) -> None:
        wanted = list(names)
        connection = await self.cluster.controller_connection()
        response = await connection.request(
            ApiKey.DELETE_TOPICS,
            {
                "topics": [{"name": name, "topic_id": None} for name in wanted],  # v6+
                "topic_names": wanted,  # v1-5
                "timeout": self._operation_timeout(timeout_ms),
            },
            timeout_ms=self._operation_timeout(timeout_ms) + RESPONSE_MARGIN_MS,
        )
        results = {result.name: result for result in response.responses}
        for name in wanted:
            result = _result_for(results, name, "DeleteTopics")
            raise_for(result.error_code, getattr(result, "error_message", None), f"topic {name}")
            self.cluster.invalidate(name)

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        metadata = await self.cluster.refresh_metadata(None)
        return sorted(
            name
            for name, info in metadata.topics.items()
            if info.error_code == ErrorCode.none and (include_internal or not info.internal)
        )

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Partitions, leaders, leader epochs, replicas and ISR of the named topics (all
        non-internal topics when `names` is None). Unknown topics raise."""
        wanted = None if names is None else list(names)
        metadata = await self.cluster.refresh_metadata(wanted)
        if wanted is None:
            wanted = sorted(n for n, info in metadata.topics.items() if not info.internal)
        descriptions = []
        for name in wanted:
            info = metadata.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name}")
            raise_for(info.error_code, info.error_message, f"topic {name}")
            descriptions.append(_describe(info))
        return descriptions

    async def create_partitions(
        self,
        new_totals: Mapping[str, int],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        """Raises each topic's partition count to the total given (Kafka cannot lower it)."""
        connection = await self.cluster.controller_connection()
        response = await connection.request(
            ApiKey.CREATE_PARTITIONS,
            {
                "topics": [
                    {"name": name, "count": count, "assignments": None}
                    for name, count in new_totals.items()
                ],
                "timeout": self._operation_timeout(timeout_ms),
                "validate_only": validate_only,
            },
            timeout_ms=self._operation_timeout(timeout_ms) + RESPONSE_MARGIN_MS,
        )
        results = {result.name: result for result in response.results}
        for name in new_totals:
            result = _result_for(results, name, "CreatePartitions")
            raise_for(result.error_code, result.error_message, f"topic {name}")
            self.cluster.invalidate(name)

    # ------------------------------------------------------------------------------------------
    # Configs

    async def describe_configs(
        self,
        name: str,
        resource_type: ResourceType = ResourceType.TOPIC,
        keys: Sequence[str] | None = None,
        *,
        include_synonyms: bool = False,
    ) -> dict[str, ConfigEntry]:
        """The configs of one topic (or broker, by id as a string; "" the cluster-wide broker
        default); `keys` None = all."""
        connection = await self.cluster.any_connection()
        response = await connection.request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": int(resource_type),
                        "resource_name": name,
                        "configuration_keys": None if keys is None else list(keys),
                    }
                ],
                "include_synonyms": include_synonyms,
                "include_documentation": False,
            },
        )
        result = _only(response.results, "DescribeConfigs")
        raise_for(result.error_code, result.error_message, f"{resource_type.name.lower()} {name}")
        return _config_entries(result)

    async def describe_topic_configs(
        self, names: Iterable[str], keys: Sequence[str] | None = None
    ) -> dict[str, dict[str, ConfigEntry] | KafkaError]:
        """The configs of many topics in one DescribeConfigs request (`keys` None = all):
        each topic's entries, or its own error (a topic deleted meanwhile fails alone)."""
        wanted = list(names)
        if not wanted:
            return {}
        connection = await self.cluster.any_connection()
        response = await connection.request(
            ApiKey.DESCRIBE_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": int(ResourceType.TOPIC),
                        "resource_name": name,
                        "configuration_keys": None if keys is None else list(keys),
                    }
                    for name in wanted
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )
        described: dict[str, dict[str, ConfigEntry] | KafkaError] = {}
        for result in response.results:
            if result.error_code != ErrorCode.none:
                described[result.resource_name] = error_for(
                    result.error_code, result.error_message, f"topic {result.resource_name}"
                )
            else:
                described[result.resource_name] = _config_entries(result)
        return described

    async def alter_configs(
        self,
        name: str,
        *,
        set_configs: Mapping[str, str] | None = None,
        delete_configs: Iterable[str] = (),
        resource_type: ResourceType = ResourceType.TOPIC,
        validate_only: bool = False,
    ) -> None:
        """IncrementalAlterConfigs: sets some configs and removes overrides of others, leaving
        every other config as it was (unlike the legacy AlterConfigs)."""
        changes: list[dict[str, Any]] = [
            {"name": key, "config_operation": int(AlterConfigOp.SET), "value": value}
            for key, value in (set_configs or {}).items()
        ]
        changes += [
            {"name": key, "config_operation": int(AlterConfigOp.DELETE), "value": None}
            for key in delete_configs
        ]
        if not changes:
            raise ValueError("nothing to alter: give set_configs or delete_configs")
        connection = await self.cluster.any_connection()
        response = await connection.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            {
                "resources": [
                    {"resource_type": int(resource_type), "resource_name": name, "configs": changes}
                ],
                "validate_only": validate_only,
            },
        )
        result = _only(response.responses, "IncrementalAlterConfigs")
        raise_for(result.error_code, result.error_message, f"{resource_type.name.lower()} {name}")

    # ------------------------------------------------------------------------------------------
    # Log directories (body in admin_log_dirs.py)

    async def describe_log_dirs(
        self,
        broker_ids: Iterable[int] | None = None,
        topics: Mapping[str, Iterable[int]] | None = None,
    ) -> dict[int, list[log_dirs.LogDirDescription]]:
        """DescribeLogDirs: per broker (all when None) its log directories and the replicas
        they hold (`topics`: name → partitions to list; None lists all)."""
        return await log_dirs.describe_log_dirs(self.cluster, broker_ids, topics)

    # ------------------------------------------------------------------------------------------

    def _operation_timeout(self, timeout_ms: int | None) -> int:
        """Topic operations default to the request timeout, as far as the broker's wait goes."""
        return self.cluster.request_timeout_ms if timeout_ms is None else timeout_ms

    # ------------------------------------------------------------------------------------------
    # Transactions and producers (bodies in admin_transactions.py)

    async def list_transactions(
        self,
        *,
        states: Collection[str] = (),
        producer_ids: Collection[int] = (),
        running_longer_than_ms: int | None = None,
    ) -> list[transactions.TransactionListing]:
        return await transactions.list_transactions(
            self.cluster,
            states=states,
            producer_ids=producer_ids,
            running_longer_than_ms=running_longer_than_ms,
        )

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, transactions.TransactionDescription]:
        return await transactions.describe_transactions(self.cluster, transactional_ids)

    async def describe_producers(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, list[transactions.ProducerState]]:
        return await transactions.describe_producers(self.cluster, partitions)

    async def abort_transaction(
        self,
        topic_partition: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:
        await transactions.abort_transaction(
            self.cluster, topic_partition, producer_id, producer_epoch, coordinator_epoch
        )

    async def force_terminate_transaction(
        self,
        transactional_id: str,
        *,
        timeout_ms: int = transactions.DEFAULT_FORCE_TIMEOUT_MS,
    ) -> None:
        await transactions.force_terminate_transaction(
            self.cluster, transactional_id, timeout_ms=timeout_ms
        )

    async def find_hanging_transactions(
        self, partitions: Iterable[TopicPartition], *, max_transaction_timeout_ms: int
    ) -> list[transactions.HangingTransaction]:
        return await transactions.find_hanging_transactions(
            self.cluster, partitions, max_transaction_timeout_ms=max_transaction_timeout_ms
        )

    # ------------------------------------------------------------------------------------------
    # Consumer groups (bodies in admin_groups.py)

    async def list_groups(self, *, states: Collection[str] = ()) -> list[groups.GroupListing]:
        return await groups.list_groups(self.cluster, states=states)

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, groups.GroupDescription]:
        return await groups.describe_groups(self.cluster, group_ids)

    async def list_group_offsets(
        self, group_id: str, *, require_stable: bool = False
    ) -> dict[TopicPartition, int]:
        return await groups.list_group_offsets(
            self.cluster, group_id, require_stable=require_stable
        )

    async def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        await groups.alter_group_offsets(self.cluster, group_id, offsets)

    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        await groups.delete_groups(self.cluster, group_ids)

    async def delete_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> None:
        await groups.delete_group_offsets(self.cluster, group_id, partitions)

    async def delete_group_offsets_by_partition(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, KafkaError | None]:
        return await groups.delete_group_offsets_by_partition(self.cluster, group_id, partitions)

    # ------------------------------------------------------------------------------------------
    # Share groups, KIP-932 (bodies in admin_share_groups.py)

    async def list_share_groups(
        self, *, states: Collection[str] = ()
    ) -> list[share_groups.ShareGroupListing]:
        return await share_groups.list_share_groups(self.cluster, states=states)

    async def describe_share_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, share_groups.ShareGroupDescription]:
        return await share_groups.describe_share_groups(self.cluster, group_ids)

    async def describe_share_group_offsets(
        self, group_id: str, topics: Mapping[str, Collection[int]] | None = None
    ) -> dict[TopicPartition, share_groups.SharePartitionOffset]:
        return await share_groups.describe_share_group_offsets(self.cluster, group_id, topics)

    async def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        await share_groups.alter_share_group_offsets(self.cluster, group_id, offsets)

    async def alter_share_group_offsets_by_partition(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, KafkaError | None]:
        return await share_groups.alter_share_group_offsets_by_partition(
            self.cluster, group_id, offsets
        )

    async def delete_share_group_offsets(
        self, group_id: str, topics: Iterable[str]
    ) -> dict[str, KafkaError | None]:
        return await share_groups.delete_share_group_offsets(self.cluster, group_id, topics)

    async def delete_share_groups(self, group_ids: Iterable[str]) -> dict[str, KafkaError | None]:
        return await share_groups.delete_share_groups(self.cluster, group_ids)

    # ------------------------------------------------------------------------------------------
    # Partition offsets and record deletion (bodies in admin_records.py)

    async def list_offsets(
        self, timestamps: Mapping[TopicPartition, int], *, isolation_level: int = 0
    ) -> dict[TopicPartition, records.ListedOffset | KafkaError]:
        """Each partition's answer or error; see admin_records.list_offsets."""
        return await records.list_offsets(self.cluster, timestamps, isolation_level=isolation_level)

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int | KafkaError]:
        """Each partition's new low watermark or error; see admin_records.delete_records."""
        return await records.delete_records(
            self.cluster, offsets, timeout_ms=self._operation_timeout(timeout_ms)
        )

    # ------------------------------------------------------------------------------------------
    # Client quotas (bodies in admin_quotas.py)

    async def describe_client_quotas(
        self, components: Sequence[quotas.QuotaFilterComponent] = (), *, strict: bool = False
    ) -> list[quotas.ClientQuotaEntry]:
        return await quotas.describe_client_quotas(self.cluster, components, strict=strict)

    async def alter_client_quotas(
        self, alterations: Sequence[quotas.ClientQuotaAlteration], *, validate_only: bool = False
    ) -> None:
        await quotas.alter_client_quotas(self.cluster, alterations, validate_only=validate_only)

    # ------------------------------------------------------------------------------------------
    # ACLs (bodies in admin_acls.py)

    async def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        await acls.create_acls(self.cluster, bindings)

    async def describe_acls(self, wanted: AclBindingFilter | None = None) -> list[AclBinding]:
        return await acls.describe_acls(self.cluster, wanted or AclBindingFilter())

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        return await acls.delete_acls(self.cluster, filters)

    # ------------------------------------------------------------------------------------------
    # SCRAM credentials (bodies in admin_scram.py)

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, list[scram.ScramCredentialInfo]]:
        return await scram.describe_user_scram_credentials(self.cluster, users)

    async def alter_user_scram_credentials(
        self, alterations: Sequence[scram.ScramUpsertion | scram.ScramDeletion]
    ) -> None:
        await scram.alter_user_scram_credentials(self.cluster, alterations)


def _result_for(results: Mapping[str | None, Any], name: str, api: str) -> Any:
    result = results.get(name)
    if result is None:
        raise error_for(ErrorCode.unknown_server_error, f"{api} response does not mention {name}")
    return result


def _only(results: Sequence[Any], api: str) -> Any:
    if len(results) != 1:
        raise error_for(ErrorCode.unknown_server_error, f"{api}: {len(results)} results for one")
    return results[0]


def _config_entries(result: Any) -> dict[str, ConfigEntry]:
    return {
        entry.name: ConfigEntry(
            name=entry.name,
            value=entry.value,
            source=_config_source(entry),
            read_only=bool(entry.read_only),
            sensitive=bool(entry.is_sensitive),
            synonyms=tuple(
                (synonym.name, synonym.value, _source(synonym.source))
                for synonym in getattr(entry, "synonyms", ())
            ),
        )
        for entry in result.configs
    }


def _config_source(entry: Any) -> ConfigSource:
    return _source(getattr(entry, "config_source", -1))


def _source(code: int) -> ConfigSource:
    try:
        return ConfigSource(int(code))
    except ValueError:
        # DescribeConfigs v0 had only is_default; lockgate and modern brokers send the source.
        return ConfigSource.UNKNOWN


def _describe(info: TopicInfo) -> TopicDescription:
    return TopicDescription(info.name, info.topic_id, info.internal, info.partitions)
