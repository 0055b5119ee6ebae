# tools/offset_specs.py — the text formats of the offset tools, as Kafka's scripts read and
# write them: `topic` / `topic:0,2,5` scopes, `--to-datetime` timestamps, `--by-duration`
# ISO-8601 durations, the reset-offsets CSV (export and --from-file) and the delete-records
# JSON file. Pure functions: no I/O, so that every rule has a unit test.
#
# Invariant: whatever export_csv writes, parse_reset_csv reads back to the same plan.
from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lockgate.client.cluster import TopicPartition
from lockgate.tools.common import ToolError

Plan = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class TopicScope:
    topic: str
    partitions: tuple[int, ...]  # empty: every partition of the topic


def parse_topic_scope(text: str) -> TopicScope:
    """`orders` or `orders:0,2,5` (Kafka's --topic of reset-offsets and delete-offsets)."""
    topic, separator, rest = text.partition(":")
    if not topic:
        raise ToolError(f"--topic expects TOPIC or TOPIC:P,P..., got {text!r}")
    if not separator:
        return TopicScope(topic, ())
    try:
        partitions = tuple(int(p) for p in rest.split(",") if p.strip())
    except ValueError:
        raise ToolError(f"partitions of {text!r} must be integers") from None
    if not partitions or any(p < 0 for p in partitions):
        raise ToolError(f"--topic {text!r} names no valid partition")
    return TopicScope(topic, tuple(dict.fromkeys(partitions)))


def parse_datetime_ms(text: str, local_zone: datetime.tzinfo | None = None) -> int:
    """`YYYY-MM-DDTHH:mm:SS.sss` with an optional `Z` or `±HH:MM`, as --to-datetime; without
    a zone the time is local, as Kafka's tool reads it."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(
            f"--to-datetime expects YYYY-MM-DDTHH:mm:SS.sss[Z|+HH:MM], got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=local_zone) if local_zone else moment.astimezone()
    return int(moment.timestamp() * 1000)


_DURATION = re.compile(
    r"(?P<sign>[-+]?)P(?:(?P<days>[-+]?\d+)D)?"
    r"(?:T(?:(?P<hours>[-+]?\d+)H)?(?:(?P<minutes>[-+]?\d+)M)?"
    r"(?:(?P<seconds>[-+]?\d+(?:[.,]\d{1,9})?)S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration `PnDTnHnMn.nS` (java.time.Duration's subset) in milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    parts = match.groupdict() if match else {}
    units = ("days", "hours", "minutes", "seconds")
    has_time_part = "T" in text.upper()
    if (
        match is None
        or all(parts[unit] is None for unit in units)
        or (has_time_part and all(parts[unit] is None for unit in units[1:]))
    ):
        raise ToolError(f"--by-duration expects an ISO-8601 duration like P1DT2H30M, got {text!r}")
    seconds = (
        int(parts["days"] or 0) * 86_400
        + int(parts["hours"] or 0) * 3_600
        + int(parts["minutes"] or 0) * 60
    )
    millis = seconds * 1000 + round(float((parts["seconds"] or "0").replace(",", ".")) * 1000)
    return -millis if parts["sign"] == "-" else millis


def export_csv(plans: Mapping[str, Plan]) -> str:
    """Kafka's export: `topic,partition,offset` for one group, `group,topic,partition,offset`
    for several."""
    lines = []
    for group, plan in plans.items():
        for tp, offset in sorted(plan.items()):
            fields = [tp.topic, str(tp.partition), str(offset)]
            lines.append(",".join([group, *fields] if len(plans) > 1 else fields))
    return "\n".join(lines)


def parse_reset_csv(text: str, groups: Iterable[str]) -> dict[str, Plan]:
    """A reset plan per group from CSV lines as export_csv writes them. Three-field lines need
    exactly one group in scope; four-field lines name their group."""
    wanted = list(groups)
    plans: dict[str, Plan] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3:
            if len(wanted) != 1:
                raise ToolError(
                    f"line {number}: with several groups each line must be "
                    "group,topic,partition,offset"
                )
            group, (topic, partition, offset) = wanted[0], fields
        elif len(fields) == 4:
            group, topic, partition, offset = fields
        else:
            raise ToolError(f"line {number}: expected topic,partition,offset, got {line!r}")
        try:
            tp, target = TopicPartition(topic, int(partition)), int(offset)
        except ValueError:
            raise ToolError(f"line {number}: partition and offset must be integers") from None
        if target < 0:
            raise ToolError(f"line {number}: Invalid negative offset")  # Kafka's words
        plans.setdefault(group, {})[tp] = target
    return plans


def parse_delete_records_json(text: str) -> Plan:
    """Kafka's --offset-json-file: {"partitions": [{"topic", "partition", "offset"}], "version": 1}
    (offset -1: the high watermark). Duplicate partitions are refused, as Kafka does."""
    try:
        document = json.loads(text)
        entries = document["partitions"]
        if not isinstance(entries, list):
            raise TypeError("partitions is not a list")
        pairs = [
            (TopicPartition(str(e["topic"]), int(e["partition"])), int(e["offset"]))
            for e in entries
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise ToolError(f"unreadable offset JSON file: {exc}") from None
    plan: Plan = {}
    duplicates = []
    for tp, offset in pairs:
        if tp in plan:
            duplicates.append(str(tp))
        plan[tp] = offset
    if duplicates:
        raise ToolError(
            f"Offset json file contains duplicate topic partitions: {', '.join(duplicates)}"
        )
    if not plan:
        raise ToolError("the offset JSON file names no partition")
    return plan


def clamp(offset: int, earliest: int, latest: int) -> int:
    """Kafka's checkOffsetsRange: a reset target outside the log moves to its nearest end."""
    return min(max(offset, earliest), latest)
