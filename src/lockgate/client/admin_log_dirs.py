# client/admin_log_dirs.py — DescribeLogDirs as Kafka's Admin.describeLogDirs offers it: each
# broker asked in turn (a log directory belongs to one broker) for its directories, their
# volume's bytes and the partitions stored in them. An error of a whole response
# (CLUSTER_AUTHORIZATION_FAILED) raises; a directory's own error (KAFKA_STORAGE_ERROR when
# offline) is reported in its description, as the Java client does.
#
# Functions take a Cluster; Admin (admin.py) exposes them as methods.
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lockgate.client.cluster import Cluster
from lockgate.client.errors import ErrorCode, raise_for
from lockgate.protocol.api import ApiKey


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    size: int  # bytes of the partition's segments in this directory
    offset_lag: int  # how far the log end is behind the high watermark (0 for a leader)
    is_future: bool  # a log being moved here by AlterReplicaLogDirs


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: str
    error: ErrorCode  # NONE, or KAFKA_STORAGE_ERROR for an offline directory
    replicas: Mapping[tuple[str, int], ReplicaInfo]
    total_bytes: int | None  # None when the broker does not know (or answers below v4)
    usable_bytes: int | None


async def describe_log_dirs(
    cluster: Cluster,
    broker_ids: Iterable[int] | None = None,
    topics: Mapping[str, Iterable[int]] | None = None,
) -> dict[int, list[LogDirDescription]]:
    """Per broker id (every known broker when None), its log directories; `topics` (name →
    partitions) narrows the replicas listed, None lists them all."""
    if broker_ids is None:
        await cluster.refresh_metadata(())
        broker_ids = sorted(cluster.metadata.brokers)
    body: dict[str, Any] = {
        "topics": None
        if topics is None
        else [{"topic": t, "partitions": sorted(set(p))} for t, p in sorted(topics.items())]
    }
    described: dict[int, list[LogDirDescription]] = {}
    for node_id in broker_ids:
        connection = await cluster.connection(node_id)
        response = await connection.request(ApiKey.DESCRIBE_LOG_DIRS, body)
        raise_for(getattr(response, "error_code", 0), None, f"broker {node_id}")
        described[node_id] = [_description(result) for result in response.results]
    return described


def _description(result: Any) -> LogDirDescription:
    replicas = {
        (topic.name, partition.partition_index): ReplicaInfo(
            partition.partition_size, partition.offset_lag, bool(partition.is_future_key)
        )
        for topic in result.topics
        for partition in topic.partitions
    }
    total = getattr(result, "total_bytes", -1)
    usable = getattr(result, "usable_bytes", -1)
    return LogDirDescription(
        result.log_dir,
        ErrorCode(result.error_code),
        replicas,
        None if total < 0 else int(total),
        None if usable < 0 else int(usable),
    )
