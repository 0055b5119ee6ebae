# tests/faults/checker.py — the consistency checker: reads a run's history (history.py) and
# counts every anomaly exactly-once forbids. Pure: events in, counts out.
#
#   lost              a value of a committed transaction missing from the final read
#   duplicated        a value read more than once by the final read_committed scan
#   aborted_read      a value of an aborted transaction read by anyone
#   torn              a transaction partly visible (some of its values, not all)
#   reordered         a producer's values on a partition out of its send order
#   non_monotonic     a reader saw a partition's offsets go backwards or repeat
#   group_mismatch    a consume-transform-produce stage whose outputs differ from the
#                     committed inputs below its group's committed offsets
#
# Lifecycle runs delete and compact on purpose (a "lifecycle" event names the topics): a
# committed value missing from the final read is not lost when its offset is below its
# partition's final log start offset on a topic with retention, or when a later offset of the
# same key is visible on a compacted topic. Anywhere else it is lost.
from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from tests.faults.history import Event

ANOMALIES = (
    "lost",
    "duplicated",
    "aborted_read",
    "torn",
    "reordered",
    "non_monotonic",
    "group_mismatch",
)


def check(events: Iterable[Event]) -> Counter[str]:
    events = list(events)
    anomalies: Counter[str] = Counter({name: 0 for name in ANOMALIES})
    finals = [e for e in events if e["type"] == "final"]
    seen = Counter(e["value"] for e in finals)
    position = {e["value"]: (e["topic"], e["partition"], e["offset"]) for e in finals}
    read_values = {e["value"] for e in events if e["type"] == "read"}
    anomalies["duplicated"] = sum(count - 1 for count in seen.values() if count > 1)
    gone = _deleted_on_purpose(events, finals)

    # A writer records a transaction before committing it ("pending") and again with its
    # outcome; the last record counts, and a pending one whose writer died is unknown.
    latest = {(e["producer"], e["txn"]): e for e in events if e["type"] == "txn"}
    order: dict[tuple[str, str, int], list[tuple[int, int, int]]] = defaultdict(list)
    for txn in latest.values():
        values = [v[0] for v in txn["values"]]
        visible = [v for v in values if v in seen]
        offsets = txn.get("offsets") or [-1] * len(values)
        accounted = len(visible) + sum(
            1
            for entry, offset in zip(txn["values"], offsets, strict=True)
            if entry[0] not in seen and gone(entry, offset)
        )
        if txn["outcome"] == "committed":
            anomalies["lost"] += len(values) - accounted
        elif txn["outcome"] == "aborted":
            anomalies["aborted_read"] += len(visible)
            anomalies["aborted_read"] += sum(1 for v in values if v in read_values)
        if visible and accounted != len(values):
            anomalies["torn"] += 1
        for index, value in enumerate(values):
            if value in position:
                topic, partition, offset = position[value]
                order[(txn["producer"], topic, partition)].append((offset, txn["txn"], index))
    for placed in order.values():
        by_offset = [(txn, index) for _offset, txn, index in sorted(placed)]
        anomalies["reordered"] += sum(1 for a, b in itertools.pairwise(by_offset) if b < a)

    last: dict[tuple[str, str, int], int] = {}
    for read in (e for e in events if e["type"] == "read"):
        key = (read["reader"], read["topic"], read["partition"])
        if key in last and read["offset"] <= last[key]:
            anomalies["non_monotonic"] += 1
        last[key] = read["offset"]

    anomalies["group_mismatch"] += _pipelines(events, finals)
    return anomalies


def _deleted_on_purpose(
    events: list[Event], finals: list[Event]
) -> Callable[[list[Any], int], bool]:
    """Whether a committed value absent from the final read was removed by retention or
    compaction as configured, given its [value, topic, partition, key?] entry and its offset
    (-1 when the broker answered a retry without one)."""
    retained: set[str] = set()
    compacted: set[str] = set()
    for event in events:
        if event["type"] == "lifecycle":
            retained.update(event["retained_topics"])
            compacted.update(event["compacted_topics"])
    starts = {(e["topic"], e["partition"]): e["offset"] for e in events if e["type"] == "start"}
    newest_by_key: dict[tuple[str, int, str], int] = {}
    for final in finals:
        if final.get("key") is not None:
            slot = (final["topic"], final["partition"], final["key"])
            newest_by_key[slot] = max(newest_by_key.get(slot, -1), final["offset"])

    def gone(entry: list[Any], offset: int) -> bool:
        topic, partition = entry[1], entry[2]
        if topic in retained and offset < starts.get((topic, partition), 0):
            return True
        if topic in compacted and len(entry) > 3:
            return newest_by_key.get((topic, partition, entry[3]), -1) > offset
        return False

    return gone


def _pipelines(events: list[Event], finals: list[Event]) -> int:
    mismatches = 0
    committed = {
        (e["group"], e["topic"], e["partition"]): e["offset"]
        for e in events
        if e["type"] == "group"
    }
    for pipe in (e for e in events if e["type"] == "pipe"):
        inputs = {
            e["value"]
            for e in finals
            if e["topic"] == pipe["input_topic"]
            and e["offset"] < committed.get((pipe["group"], e["topic"], e["partition"]), 0)
        }
        outputs = Counter(
            e["value"].removeprefix("out:") for e in finals if e["topic"] == pipe["output_topic"]
        )
        mismatches += len(inputs ^ set(outputs))  # missing or extra outputs
        mismatches += sum(count - 1 for count in outputs.values() if count > 1)
    return mismatches


def table(results: dict[int, Counter[str]]) -> str:
    """Anomaly counts per seed, plus a total row."""
    header = ["seed", *ANOMALIES]
    rows = [[str(seed), *(str(counts[a]) for a in ANOMALIES)] for seed, counts in results.items()]
    total = Counter[str]()
    for counts in results.values():
        total.update(counts)
    rows.append(["total", *(str(total[a]) for a in ANOMALIES)])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    )
