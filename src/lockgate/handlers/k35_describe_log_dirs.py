"""DescribeLogDirs (key 35), versions 1–4.

Behaviour:
- lockgate keeps one log directory (log.dirs; the storage engine's root): it is answered with
  its absolute path and, per topic, the partitions this broker hosts (leader or follower) with
  their size on disk, their offset lag (high watermark minus log end offset, never below 0: 0
  for a leader, as Kafka) and is-future false (no AlterReplicaLogDirs, so no future logs).
- Null topics = every hosted partition; otherwise only the named partitions that this broker
  hosts (others are left out, as Kafka does, not answered with an error).
- An offline directory (a failed fsync took the storage engine offline) is answered with
  KAFKA_STORAGE_ERROR and no topics.
- Authorization: DESCRIBE on the cluster; otherwise CLUSTER_AUTHORIZATION_FAILED and no results.
Version notes: v2 flexible; v3 top-level error code; v4 total and usable bytes of the volume
(-1 when the storage is in memory).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from lockgate.handlers.registry import HandlerResult, RequestContext, handles
from lockgate.log.partition import Partition
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import Operation, ResourceType
from lockgate.security.authorizer import authorize
from lockgate.storage.disk import DiskEngine


def hosted_partitions(
    partitions: Mapping[tuple[str, int], Partition], wanted: Iterable[Any] | None
) -> dict[str, list[Partition]]:
    """Hosted partitions by topic, in partition order; `wanted` (request topics with their
    partition lists) narrows them, None keeps all."""
    chosen: dict[str, list[Partition]] = defaultdict(list)
    if wanted is None:
        for (topic, _), partition in sorted(partitions.items()):
            chosen[topic].append(partition)
        return dict(chosen)
    for topic in wanted:
        for index in sorted(set(topic.partitions)):
            found = partitions.get((topic.topic, index))
            if found is not None and found not in chosen[topic.topic]:
                chosen[topic.topic].append(found)
    return {name: found for name, found in chosen.items() if found}


def partition_entry(partition: Partition) -> dict[str, Any]:
    return {
        "partition_index": partition.index,
        "partition_size": partition.size_bytes,
        # Kafka: HW - LEO for the current log, floored at 0 (a leader's LEO is never behind)
        "offset_lag": max(partition.high_watermark - partition.log_end_offset, 0),
        "is_future_key": False,
    }


def volume_bytes(ctx: RequestContext) -> tuple[int, int, str]:
    """(total, usable, absolute path) of the log directory; -1/-1 for an in-memory store."""
    storage = ctx.services.storage
    if isinstance(storage, DiskEngine):
        try:
            stats = os.statvfs(storage.root)
        except OSError:
            return -1, -1, storage.root
        return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize, storage.root
    return -1, -1, os.path.abspath(ctx.services.config.get("log.dirs").split(",")[0].strip())


@handles(ApiKey.DESCRIBE_LOG_DIRS, 1, 4)
async def handle(ctx: RequestContext, request: Any) -> HandlerResult:
    if not authorize(ctx, Operation.DESCRIBE, ResourceType.CLUSTER):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "results": (),
        }
    total, usable, path = volume_bytes(ctx)
    if ctx.services.storage.offline is not None:
        result: dict[str, Any] = {
            "error_code": ErrorCode.kafka_storage_error,
            "log_dir": path,
            "topics": (),
            "total_bytes": -1,
            "usable_bytes": -1,
        }
    else:
        chosen = hosted_partitions(ctx.services.topics.partitions, request.topics)
        result = {
            "error_code": ErrorCode.none,
            "log_dir": path,
            "topics": [
                {"name": name, "partitions": [partition_entry(p) for p in partitions]}
                for name, partitions in sorted(chosen.items())
            ],
            "total_bytes": total,
            "usable_bytes": usable,
        }
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": [result]}
