# console/cluster.py — the cluster page's data: brokers, controller and cluster id (one
# Metadata of every topic), the partitions' health (under-replicated: ISR smaller than the
# replicas; under-min-ISR: ISR smaller than the topic's min.insync.replicas, read for every
# topic in one DescribeConfigs; offline: no leader), and each broker's log directories
# (DescribeLogDirs, one request per broker, sent beside the DescribeConfigs). Three kinds of
# round trip whatever the size.
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from lockgate.client.admin import Admin
from lockgate.client.admin_log_dirs import LogDirDescription
from lockgate.client.cluster import NO_LEADER, PartitionInfo
from lockgate.client.errors import ErrorCode, KafkaError
from lockgate.console import bounded

MIN_ISR_KEY = "min.insync.replicas"
TOP_TOPICS = 10  # the largest topics listed per log directory


@dataclass(frozen=True, slots=True)
class BrokerRow:
    node_id: int
    host: str
    port: int
    rack: str | None
    is_controller: bool


@dataclass(frozen=True, slots=True)
class PartitionProblem:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    problem: str  # "offline", "under-min-ISR" or "under-replicated"


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    topics: int
    partitions: int
    under_replicated: int
    under_min_isr: int
    offline: int
    problems: tuple[PartitionProblem, ...]  # the first few, worst first


@dataclass(frozen=True, slots=True)
class LogDirRow:
    broker: int
    path: str
    error: str | None
    total_bytes: int | None
    usable_bytes: int | None
    size: int  # the replicas' bytes in it
    replicas: int
    largest_topics: tuple[tuple[str, int], ...]  # (topic, bytes), the TOP_TOPICS largest


@dataclass(frozen=True, slots=True)
class ClusterOverview:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerRow, ...]
    summary: PartitionSummary
    log_dirs: tuple[LogDirRow, ...]  # a broker that did not answer: one row saying why
    unanswered: tuple[str, ...] = ()  # what the page could not learn, and why


MAX_PROBLEMS = 50


def _problem(partition: PartitionInfo, min_isr: int | None) -> str | None:
    if partition.leader_id == NO_LEADER or partition.error_code == ErrorCode.leader_not_available:
        return "offline"
    if min_isr is not None and len(partition.isr) < min_isr:
        return "under-min-ISR"
    if len(partition.isr) < len(partition.replicas):
        return "under-replicated"
    return None


async def overview(admin: Admin) -> ClusterOverview:
    metadata = await admin.cluster.refresh_metadata(None)
    topics = [info for info in metadata.topics.values() if info.error_code == ErrorCode.none]
    broker_ids = sorted(metadata.brokers)
    # independent of each other: the brokers work on both at once, each answer bounded
    configs_answer, (directories, silent) = await asyncio.gather(
        bounded.answer(
            admin.describe_topic_configs([t.name for t in topics], [MIN_ISR_KEY]),
            "DescribeConfigs",
        ),
        bounded.log_dirs(admin, broker_ids),
    )
    unanswered: list[str] = []
    if isinstance(configs_answer, KafkaError):
        unanswered.append(f"min.insync.replicas unknown, so under-min-ISR is not counted: "
                          f"{configs_answer}")  # fmt: skip
        configs_answer = {}
    configs = configs_answer
    min_isr: dict[str, int | None] = {}
    for topic in topics:
        entries = configs.get(topic.name)
        value = None
        if entries is not None and not isinstance(entries, KafkaError):
            entry = entries.get(MIN_ISR_KEY)
            value = entry.value if entry is not None else None
        min_isr[topic.name] = int(value) if value is not None and value.isdigit() else None
    counts = {"offline": 0, "under-min-ISR": 0, "under-replicated": 0}
    problems: list[PartitionProblem] = []
    partitions = 0
    for topic in topics:
        for partition in topic.partitions:
            partitions += 1
            problem = _problem(partition, min_isr[topic.name])
            if problem is None:
                continue
            counts[problem] += 1
            # an under-min-ISR partition is under-replicated too, as Kafka's metrics count it
            if problem == "under-min-ISR" and len(partition.isr) < len(partition.replicas):
                counts["under-replicated"] += 1
            problems.append(
                PartitionProblem(
                    topic.name,
                    partition.partition,
                    partition.leader_id,
                    partition.leader_epoch,
                    partition.replicas,
                    partition.isr,
                    problem,
                )
            )
    order = {"offline": 0, "under-min-ISR": 1, "under-replicated": 2}
    problems.sort(key=lambda p: (order[p.problem], p.topic, p.partition))
    summary = PartitionSummary(
        topics=len(topics),
        partitions=partitions,
        under_replicated=counts["under-replicated"],
        under_min_isr=counts["under-min-ISR"],
        offline=counts["offline"],
        problems=tuple(problems[:MAX_PROBLEMS]),
    )
    brokers = tuple(
        BrokerRow(b.node_id, b.host, b.port, b.rack, b.node_id == metadata.controller_id)
        for b in sorted(metadata.brokers.values(), key=lambda b: b.node_id)
    )
    rows = [_log_dir_row(broker, d) for broker, found in directories.items() for d in found]
    rows += [
        LogDirRow(broker, "–", str(why), None, None, 0, 0, ()) for broker, why in silent.items()
    ]
    log_dirs = tuple(sorted(rows, key=lambda row: row.broker))
    return ClusterOverview(
        metadata.cluster_id, metadata.controller_id, brokers, summary, log_dirs,
        tuple(unanswered),
    )  # fmt: skip


def _log_dir_row(broker: int, directory: LogDirDescription) -> LogDirRow:
    by_topic: dict[str, int] = {}
    for (topic, _partition), replica in directory.replicas.items():
        by_topic[topic] = by_topic.get(topic, 0) + replica.size
    largest = sorted(by_topic.items(), key=lambda item: (-item[1], item[0]))[:TOP_TOPICS]
    return LogDirRow(
        broker=broker,
        path=directory.path,
        error=None if directory.error == ErrorCode.none else directory.error.name.upper(),
        total_bytes=directory.total_bytes,
        usable_bytes=directory.usable_bytes,
        size=sum(by_topic.values()),
        replicas=len(directory.replicas),
        largest_topics=tuple(largest),
    )
