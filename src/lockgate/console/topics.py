# console/topics.py — the topics pages' data. The list is one Metadata of every topic per page
# view (names, partition counts and replica health all come from it), filtered and cut into
# pages here: 10,000 topics cost one round trip and a sort. A topic's detail asks, at once, its
# metadata, its earliest offsets, its high watermarks (ListOffsets latest, read_uncommitted),
# its last stable offsets (the same, read_committed), its replicas' sizes (DescribeLogDirs)
# and its configs (DescribeConfigs). A missing topic raises UnknownTopicOrPartitionError.
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from lockgate.client.admin import Admin, ConfigEntry, ConfigSource
from lockgate.client.admin_log_dirs import LogDirDescription
from lockgate.client.admin_records import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ListedOffset
from lockgate.client.cluster import NO_LEADER, TopicPartition
from lockgate.client.errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError, raise_for
from lockgate.console import bounded
from lockgate.console.paging import PAGE_SIZE, page_of

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    internal: bool
    partitions: int
    replication_factor: int
    under_replicated: int
    offline: int


@dataclass(frozen=True, slots=True)
class TopicList:
    rows: tuple[TopicRow, ...]
    matching: int  # topics matching the filter
    total: int  # topics in the cluster
    page: int  # 1-based, clamped to the pages there are
    pages: int


async def list_topics(
    admin: Admin,
    *,
    name_filter: str = "",
    include_internal: bool = False,
    page: int = 1,
    page_size: int = PAGE_SIZE,
) -> TopicList:
    metadata = await admin.cluster.refresh_metadata(None)
    needle = name_filter.strip().lower()
    visible = [
        info
        for info in metadata.topics.values()
        if info.error_code == ErrorCode.none and (include_internal or not info.internal)
    ]
    matching = sorted(
        (info for info in visible if needle in info.name.lower()), key=lambda info: info.name
    )
    shown, page, pages = page_of(matching, page, page_size)
    rows = tuple(
        TopicRow(
            name=info.name,
            internal=info.internal,
            partitions=len(info.partitions),
            replication_factor=max((len(p.replicas) for p in info.partitions), default=0),
            under_replicated=sum(len(p.isr) < len(p.replicas) for p in info.partitions),
            offline=sum(p.leader_id == NO_LEADER for p in info.partitions),
        )
        for info in shown
    )
    return TopicList(rows, len(matching), len(visible), page, pages)


@dataclass(frozen=True, slots=True)
class PartitionRow:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    log_start: int | None  # None: the leader did not answer (its error in `error`)
    high_watermark: int | None
    last_stable_offset: int | None
    size: int | None  # bytes on the leader's log directories
    error: str | None

    @property
    def records(self) -> int | None:
        if self.log_start is None or self.high_watermark is None:
            return None
        return max(0, self.high_watermark - self.log_start)

    @property
    def undecided(self) -> int | None:
        """Offsets between the LSO and the high watermark: held back from read_committed
        readers by a transaction still open."""
        if self.last_stable_offset is None or self.high_watermark is None:
            return None
        return self.high_watermark - self.last_stable_offset


@dataclass(frozen=True, slots=True)
class ConfigRow:
    name: str
    value: str | None  # None for a sensitive value (never shown)
    overridden: bool  # set on the topic itself, not inherited
    source: str
    sensitive: bool


@dataclass(frozen=True, slots=True)
class TopicDetail:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: tuple[PartitionRow, ...]
    configs: tuple[ConfigRow, ...]

    @property
    def size(self) -> int:
        return sum(p.size or 0 for p in self.partitions)

    @property
    def records(self) -> int:
        return sum(p.records or 0 for p in self.partitions)

    @property
    def overridden_configs(self) -> int:
        return sum(c.overridden for c in self.configs)


def _offset(answer: ListedOffset | KafkaError | None) -> int | None:
    return answer.offset if isinstance(answer, ListedOffset) else None


def _error(*answers: ListedOffset | KafkaError | None) -> str | None:
    for answer in answers:
        if isinstance(answer, KafkaError):
            return str(answer)
    return None


def _config_row(entry: ConfigEntry) -> ConfigRow:
    return ConfigRow(
        name=entry.name,
        value=None if entry.sensitive else entry.value,
        overridden=entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG,
        source=entry.source.name.lower().replace("_", " "),
        sensitive=entry.sensitive,
    )


async def topic_detail(admin: Admin, name: str) -> TopicDetail:
    metadata = await admin.cluster.refresh_metadata([name])
    info = metadata.topics.get(name)
    if info is None:
        raise UnknownTopicOrPartitionError(f"topic {name}")
    raise_for(info.error_code, info.error_message, f"topic {name}")
    partitions = [TopicPartition(name, p.partition) for p in info.partitions]
    leaders = {TopicPartition(name, p.partition): p.leader_id for p in info.partitions}
    earliest, latest, stable, (directories, _silent), configs = await asyncio.gather(
        bounded.offsets(admin, leaders, EARLIEST_TIMESTAMP),
        bounded.offsets(admin, leaders, LATEST_TIMESTAMP),
        bounded.offsets(admin, leaders, LATEST_TIMESTAMP, READ_COMMITTED),
        bounded.log_dirs(admin, metadata.brokers, {name: [tp.partition for tp in partitions]}),
        admin.describe_configs(name),
    )
    sizes = _leader_sizes(directories, {p.partition: p.leader_id for p in info.partitions}, name)
    rows = tuple(
        PartitionRow(
            partition=p.partition,
            leader=p.leader_id,
            leader_epoch=p.leader_epoch,
            replicas=p.replicas,
            isr=p.isr,
            offline_replicas=p.offline_replicas,
            log_start=_offset(earliest.get(tp)),
            high_watermark=_offset(latest.get(tp)),
            last_stable_offset=_offset(stable.get(tp)),
            size=sizes.get(p.partition),
            error=_error(earliest.get(tp), latest.get(tp), stable.get(tp)),
        )
        for p, tp in zip(info.partitions, partitions, strict=True)
    )
    config_rows = tuple(_config_row(entry) for _key, entry in sorted(configs.items()))
    return TopicDetail(name, info.topic_id, info.internal, rows, config_rows)


def _leader_sizes(
    directories: Mapping[int, list[LogDirDescription]], leaders: Mapping[int, int], topic: str
) -> dict[int, int]:
    """Each partition's bytes on its leader (a follower may lag; the leader's is the log)."""
    sizes: dict[int, int] = {}
    for broker, found in directories.items():
        for directory in found:
            for (name, partition), replica in directory.replicas.items():
                if name == topic and leaders.get(partition) == broker:
                    sizes[partition] = sizes.get(partition, 0) + replica.size
    return sizes


async def end_offsets_and_size(admin: Admin, name: str) -> dict[str, float]:
    """The topic's counters for the live chart: the sum of its partitions' high watermarks
    (records ever written) and of its leaders' log sizes (bytes)."""
    info = await admin.cluster.topic(name)
    leaders = {TopicPartition(name, p.partition): p.leader_id for p in info.partitions}
    latest, (directories, _silent) = await asyncio.gather(
        bounded.offsets(admin, leaders, LATEST_TIMESTAMP),
        bounded.log_dirs(
            admin, admin.cluster.metadata.brokers, {name: [p.partition for p in info.partitions]}
        ),
    )
    for answer in latest.values():
        if isinstance(answer, KafkaError):
            raise answer
    sizes = _leader_sizes(directories, {p.partition: p.leader_id for p in info.partitions}, name)
    return {
        "messages": float(sum(_offset(a) or 0 for a in latest.values())),
        "bytes": float(sum(sizes.values())),
    }
