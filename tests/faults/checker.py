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
from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable

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

    # A writer records a transaction before committing it ("pending") and again with its
    # outcome; the last record counts, and a pending one whose writer died is unknown.
    latest = {(e["producer"], e["txn"]): e for e in events if e["type"] == "txn"}
    order: dict[tuple[str, str, int], list[tuple[int, int, int]]] = defaultdict(list)
    for txn in latest.values():
        values = [v[0] for v in txn["values"]]
        visible = [v for v in values if v in seen]
        if txn["outcome"] == "committed":
            anomalies["lost"] += len(values) - len(visible)
        elif txn["outcome"] == "aborted":
            anomalies["aborted_read"] += len(visible)
            anomalies["aborted_read"] += sum(1 for v in values if v in read_values)
        if visible and len(visible) != len(values):
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
