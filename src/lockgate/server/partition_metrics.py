# The metric families with a series per partition (log offsets and sizes, LSO lag, hanging
# transaction candidates) or per committed offset (consumer lag), rendered straight into
# Prometheus's text format at scrape time. A broker may host thousands of partitions: going
# through prometheus_client's metric objects and its exposition costs about 18 µs a series
# (630 ms for 5,000 partitions, during which the event loop answers nothing); this costs about
# a tenth of that. Every value is an integer read from the broker's state (the partitions and
# the groups' committed offsets it is given, at scrape time); label values are escaped as the
# text format requires (group ids may hold any character) and in name order, as
# prometheus_client writes them. The walk pauses every CHUNK partitions or committed offsets
# (`render_steps`), so the endpoint can give the event loop back between pieces: a scrape of
# thousands of partitions is many short holds of the loop, not one long stall. It walks copies
# of the mappings taken at its start, so topics and offsets may change between pieces.
from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from lockgate.coordinator.group.committed import partition_of
from lockgate.coordinator.group.records import committed_offset
from lockgate.log.partition import Partition
from lockgate.log.steps import Steps, run

Key = tuple[str, int]
CHUNK = 500  # partitions or committed offsets walked between two pauses (a few ms)
# a walk that pauses (yields None) between pieces and returns the text


class _Held(Protocol):
    @property
    def records(self) -> Mapping[bytes, bytes]: ...


class GroupOffsets(Protocol):
    """A consumer group as its lag reads it: its committed offsets, held as their records
    (coordinator.group.committed: key → value)."""

    @property
    def offsets(self) -> _Held: ...


PARTITION_GAUGES = (
    ("lockgate_log_size_bytes", "Bytes in the partition's segments"),
    ("lockgate_log_start_offset", "The partition's log start offset"),
    ("lockgate_log_end_offset", "The partition's log end offset"),
    ("lockgate_log_high_watermark", "The partition's high watermark"),
    ("lockgate_log_last_stable_offset", "The partition's last stable offset"),
    ("lockgate_log_segments", "Segments of the partition's log"),
    (
        "lockgate_last_stable_offset_lag",
        "High watermark minus last stable offset: what read_committed consumers wait for",
    ),
)
PRODUCERS = (
    "lockgate_producer_state_entries",
    "(producer, partition) entries in producer state",
)
HANGING = (
    "lockgate_hanging_transaction_candidates",
    "Producers with an open transaction on the partition and no write for longer than "
    "transaction.max.timeout.ms (only partitions that have some)",
)
LAG = ("lockgate_consumer_lag", "High watermark minus the group's committed offset")
GROUP_LAG = (
    "lockgate_consumer_group_lag",
    "Sum of the group's partition lags (partitions cut by the cap included)",
)
DROPPED = (
    "lockgate_consumer_lag_series_dropped",
    "Partition lag series left out by lockgate.metrics.consumer.lag.max.series",
)


def escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _header(lines: list[str], name: str, documentation: str) -> None:
    lines.append(f"# HELP {name} {documentation}")
    lines.append(f"# TYPE {name} gauge")


def render(
    partitions: Mapping[Key, Partition],
    groups: Mapping[str, GroupOffsets],
    hanging_before_ms: int,
    lag_series_max: int,
) -> str:
    """The families of this module, in the text format, in one go (see render_steps)."""
    return run(render_steps(partitions, groups, hanging_before_ms, lag_series_max))


def render_steps(
    partitions: Mapping[Key, Partition],
    groups: Mapping[str, GroupOffsets],
    hanging_before_ms: int,
    lag_series_max: int,
) -> Steps[str]:
    """The families of this module, in the text format (a newline after every line), pausing
    every CHUNK partitions or offsets. `hanging_before_ms`: an open transaction's producer
    whose last write is older is a hanging candidate (now minus transaction.max.timeout.ms);
    `lag_series_max`: lockgate.metrics.consumer.lag.max.series."""
    hosted = dict(partitions)  # the lag's lookups see the partitions the walk started with
    lines: list[str] = []
    lines.extend((yield from _partitions(list(hosted.items()), hanging_before_ms)))
    lines.extend((yield from _consumer_lag(hosted, sorted(groups.items()), lag_series_max)))
    lines.append("")
    return "\n".join(lines)


def _partitions(partitions: list[tuple[Key, Partition]], horizon: int) -> Steps[list[str]]:
    columns: list[list[str]] = [[] for _ in PARTITION_GAUGES]
    size, start, end, high, stable, segments, lag = columns
    hanging: list[str] = []
    producers = 0
    for walked, ((topic, index), partition) in enumerate(partitions, 1):
        if walked % CHUNK == 0:
            yield
        producers += len(partition.producers)
        labels = f'{{partition="{index}",topic="{escape(topic)}"}}'
        high_watermark = partition.high_watermark
        last_stable = partition.last_stable_offset
        size.append(f"{labels} {partition.size_bytes}")
        start.append(f"{labels} {partition.log_start_offset}")
        end.append(f"{labels} {partition.log_end_offset}")
        high.append(f"{labels} {high_watermark}")
        stable.append(f"{labels} {last_stable}")
        segments.append(f"{labels} {len(partition.segments)}")
        lag.append(f"{labels} {high_watermark - last_stable}")
        if partition.open_txns:
            stale = 0
            for producer_id in partition.open_txns:
                entry = partition.producers.get(producer_id)
                if entry is not None and entry.timestamp < horizon:
                    stale += 1
            if stale:
                hanging.append(f"{labels} {stale}")
    lines: list[str] = []
    for (name, documentation), column in zip(
        (*PARTITION_GAUGES, HANGING), (*columns, hanging), strict=True
    ):
        _header(lines, name, documentation)
        lines.extend(name + series for series in column)
    _header(lines, *PRODUCERS)
    lines.append(f"{PRODUCERS[0]} {producers}")
    return lines


def _consumer_lag(
    partitions: Mapping[Key, Partition], groups: list[tuple[str, GroupOffsets]], cap: int
) -> Steps[list[str]]:
    """Committed offset against the high watermark (what kafka-consumer-groups calls the log
    end) for the groups this broker coordinates and partitions it hosts, at most
    lockgate.metrics.consumer.lag.max.series partition series, groups in name order."""
    series: list[str] = []
    totals: list[str] = []
    dropped = 0
    walked = 0
    for group_id, group in groups:
        summed = 0
        counted = False
        group_label = escape(group_id)
        for key, committed in list(group.offsets.records.items()):
            walked += 1
            if walked % CHUNK == 0:
                yield
            topic, index = partition_of(key)
            partition = partitions.get((topic, index))
            if partition is None:
                continue
            behind = max(partition.high_watermark - committed_offset(committed), 0)
            summed += behind
            counted = True
            if len(series) < cap:
                series.append(
                    f'{LAG[0]}{{group="{group_label}",partition="{index}",'
                    f'topic="{escape(topic)}"}} {behind}'
                )
            else:
                dropped += 1
        if counted:
            totals.append(f'{GROUP_LAG[0]}{{group="{group_label}"}} {summed}')
    lines: list[str] = []
    _header(lines, *LAG)
    lines.extend(series)
    _header(lines, *GROUP_LAG)
    lines.extend(totals)
    _header(lines, *DROPPED)
    lines.append(f"{DROPPED[0]} {dropped}")
    return lines
