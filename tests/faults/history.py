# tests/faults/history.py — what a fault run records: one JSON object per line, appended by the
# workload's writers (several processes may append to their own files; the run merges them).
#
# Event types:
#   txn    {producer, txn, values: [[value, topic, partition]...], outcome}  outcome is
#          "committed" (commit acknowledged), "aborted" (abort acknowledged), "unknown"
#          (the writer lost contact mid-way: all or nothing may be visible) or "pending"
#          (recorded by a writer when the transaction begins and again just before its
#          commit is invoked; superseded by the outcome unless the writer died); producer is
#          the transactional id; a value may carry a fourth item, its key; a committed one
#          carries "offsets", each value's offset (-1 where the broker answered a retry as a
#          duplicate). Once the commit was invoked, every record carries "commit_started"
#          (time.time() just before the call). The stage's transactions also carry "reads",
#          the input values they consumed; their values may repeat across its transactions
#          (an input read again after a failed one is written again)
#   read   {reader, topic, partition, offset, value, at}  a read_committed read by the stage;
#          reader names one consumer instance, at is time.time() when its poll returned
#   final  {topic, partition, offset, value, key}  the read_committed scan after the faults
#          healed
#   start  {topic, partition, offset}  a partition's log start offset after that scan
#   lifecycle {retained_topics, compacted_topics}  topics whose data is deleted on purpose
#   group  {group, topic, partition, offset}  a group's committed offset after the run
#   pipe   {input_topic, output_topic, group}  a consume-transform-produce stage ran:
#          every committed input below the group's offset must appear once as "out:<input>"
from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

Event = dict[str, Any]


class History:
    """Appends events to a JSON-lines file, flushed per line (a crash loses at most the line
    being written). Thread-safe within one process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._handle = path.open("a", encoding="utf-8")

    def record(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"type": kind, **fields}) + "\n"
        with self._lock:
            self._handle.write(line)
            self._handle.flush()

    def close(self) -> None:
        with self._lock:
            self._handle.close()


def load(paths: Iterable[Path]) -> list[Event]:
    events: list[Event] = []
    for path in paths:
        if path.exists():
            events.extend(_lines(path))
    return events


def _lines(path: Path) -> Iterator[Event]:
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash of its writer
