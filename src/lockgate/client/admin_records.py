# client/admin_records.py — partition offsets and record deletion for admin tools, as Kafka's
# Admin.listOffsets / deleteRecords: requests grouped by partition leader, one answer (or error)
# per partition, so that a tool can report each partition as kafka-get-offsets.sh and
# kafka-delete-records.sh do instead of stopping at the first failure.
#
# Functions take a Cluster; Admin (admin.py) exposes them as methods.
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lockgate.client.cluster import Cluster, PartitionInfo, TopicPartition
from lockgate.client.errors import ErrorCode, KafkaError, error_for
from lockgate.protocol.api import ApiKey

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
# The first ListOffsets version that knows each special timestamp (Kafka's ListOffsetsRequest):
# asking an older version would have the broker read it as an invalid timestamp.
_MIN_VERSION_FOR = {
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}
_ISOLATION_MIN_VERSION = 2
_CONSUMER_REPLICA_ID = -1


@dataclass(frozen=True, slots=True)
class ListedOffset:
    offset: int  # -1 when no record matches a timestamp query
    timestamp: int  # -1 unless the query was a timestamp (or max-timestamp)
    leader_epoch: int


async def _by_leader(
    cluster: Cluster, partitions: Mapping[TopicPartition, int]
) -> tuple[dict[int, list[tuple[TopicPartition, PartitionInfo]]], dict[TopicPartition, KafkaError]]:
    grouped: dict[int, list[tuple[TopicPartition, PartitionInfo]]] = defaultdict(list)
    failed: dict[TopicPartition, KafkaError] = {}
    for tp in partitions:
        try:
            info = await cluster.partition(tp)
        except KafkaError as exc:
            failed[tp] = exc
            continue
        grouped[info.leader_id].append((tp, info))
    return grouped, failed


async def list_offsets(
    cluster: Cluster, timestamps: Mapping[TopicPartition, int], *, isolation_level: int = 0
) -> dict[TopicPartition, ListedOffset | KafkaError]:
    """ListOffsets for each partition: -1 latest (the LSO with isolation_level 1), -2 earliest,
    -3 max timestamp, -4 earliest local, -5 latest tiered, -6 earliest pending upload, or a
    timestamp in ms."""
    grouped, results = await _by_leader(cluster, timestamps)
    results_any: dict[TopicPartition, ListedOffset | KafkaError] = dict(results)
    for leader, members in grouped.items():
        connection = await cluster.connection(leader)
        needed = max(
            [_MIN_VERSION_FOR.get(timestamps[tp], 1) for tp, _info in members]
            + [_ISOLATION_MIN_VERSION if isolation_level else 1]
        )
        version = connection.version_for(ApiKey.LIST_OFFSETS, min_version=needed)
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, info in members:
            by_topic[tp.topic].append(
                {
                    "partition_index": tp.partition,
                    "current_leader_epoch": info.leader_epoch,
                    "timestamp": timestamps[tp],
                    "max_num_offsets": 1,
                }
            )
        answer = await connection.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": _CONSUMER_REPLICA_ID,
                "isolation_level": isolation_level,
                "timeout": cluster.request_timeout_ms,
                "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
            },
            version=version,
        )
        for topic in answer.topics:
            for partition in topic.partitions:
                tp = TopicPartition(str(topic.name), int(partition.partition_index))
                if partition.error_code != ErrorCode.none:
                    results_any[tp] = error_for(partition.error_code, None, f"ListOffsets {tp}")
                else:
                    results_any[tp] = ListedOffset(
                        int(partition.offset),
                        int(getattr(partition, "timestamp", -1)),
                        int(getattr(partition, "leader_epoch", -1)),
                    )
    return results_any


async def delete_records(
    cluster: Cluster, offsets: Mapping[TopicPartition, int], *, timeout_ms: int = 30_000
) -> dict[TopicPartition, int | KafkaError]:
    """DeleteRecords: moves each partition's log start to the offset (-1: the high watermark);
    the new low watermark per partition, or its error (OFFSET_OUT_OF_RANGE past the end)."""
    grouped, failed = await _by_leader(cluster, offsets)
    results: dict[TopicPartition, int | KafkaError] = dict(failed)
    for leader, members in grouped.items():
        connection = await cluster.connection(leader)
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, _info in members:
            by_topic[tp.topic].append({"partition_index": tp.partition, "offset": offsets[tp]})
        answer = await connection.request(
            ApiKey.DELETE_RECORDS,
            {
                "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
                "timeout": timeout_ms,
            },
        )
        for topic in answer.topics:
            for partition in topic.partitions:
                tp = TopicPartition(str(topic.name), int(partition.partition_index))
                if partition.error_code != ErrorCode.none:
                    results[tp] = error_for(partition.error_code, None, f"DeleteRecords {tp}")
                else:
                    results[tp] = int(partition.low_watermark)
    return results
