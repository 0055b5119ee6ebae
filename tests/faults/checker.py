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
#   inconsistent_offsets  an offset of a partition named with two values (acknowledged
#                     sends, the stage's reads, the final scan); counted per offset
#   poll_skip         a reader's consecutive reads of a partition jumped over an offset whose
#                     value the final scan shows
#   unseen            a committed value of the stage's input topic that no read ever saw,
#                     neither the stage's nor the final scan (a lost value nobody ever read)
#   precommitted_read a value read before its writer invoked the commit of its transaction
#   G0                a cycle of write-write dependencies between transactions of one
#                     transactional id (counted per strongly connected component)
#   G1c               a cycle of write-write and write-read dependencies with a write-read
#                     one (counted per strongly connected component)
#
# Share groups (KIP-932; a "share" event names the group, its topics and its delivery limit;
# share_workload.py's readers answer each record by the policy of its value):
#   share_lost        a value of the final scan of a share topic that no reader finally
#                     answered (accept or reject, applied or of unknown outcome) and that was
#                     not archived (its deliveries never reached the limit)
#   share_after_final a value handed out again after an acknowledgement the broker applied
#                     (accept or reject) made it final
#   share_accepted_twice  a value whose ACCEPT the broker applied twice
#   share_count_down  a value handed out with a smaller delivery count than an earlier
#                     delivery's (a crash may repeat a count, never lower it)
#   share_over_limit  a value handed out with a delivery count past the group's limit
#   share_uncommitted a value handed out that the final read_committed scan does not show
#                     (an aborted transaction's, say)
#   share_unfinished  a share partition whose start offset stayed below the partition's end
#                     after the readers finished (records left in flight)
#
# The dependency graph is Jepsen's but for its write-write edges, drawn within one
# transactional id only: T1 -> T2 when, on a partition of the final scan, T2's value is the
# next of that id's values after T1's. Kafka does not isolate concurrent transactions of
# different ids: they interleave on partitions and form write cycles that Kafka allows
# (Jepsen's Kafka checker makes those edges optional for that reason). One id's transactions
# are serial, so a cycle among them means a zombie interleaved with its successor. A
# write-read edge T1 -> T2: T2 (the stage's) committed after reading a value of T1.
# The stage's transactions count in the graph and the offsets only: an input it reads again
# after a failed transaction is written again, so its values are not unique like a writer's.
#
# Tiered storage (KIP-405; a "remote" event lists one partition's objects in the object store
# at the end of a run, after the broker's own clean-up):
#   tiered_orphan     an object no manifest owns (the leftover of an interrupted copy or
#                     delete that the broker did not delete)
#   tiered_range      a manifest reaching the partition's end offset or beyond, overlapping
#                     another, or leaving a gap after the one before it (a partition's copied
#                     segments follow each other, offset after offset)
#
# Lifecycle runs delete and compact on purpose (a "lifecycle" event names the topics): a
# committed value missing from the final read is not lost when its offset is below its
# partition's final log start offset on a topic with retention, or when a later offset of the
# same key is visible on a compacted topic. Anywhere else it is lost.
from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tests.faults.history import Event

# anomaly: its column in the table (abbreviated so that a seed's row fits a terminal)
COLUMNS = {
    "lost": "lost",
    "duplicated": "dup",
    "aborted_read": "aborted",
    "torn": "torn",
    "reordered": "reorder",
    "non_monotonic": "nonmono",
    "group_mismatch": "group",
    "inconsistent_offsets": "offsets",
    "poll_skip": "skip",
    "unseen": "unseen",
    "precommitted_read": "precommit",
    "G0": "G0",
    "G1c": "G1c",
    "share_lost": "s-lost",
    "share_after_final": "s-again",
    "share_accepted_twice": "s-acc2",
    "share_count_down": "s-count",
    "share_over_limit": "s-limit",
    "share_uncommitted": "s-uncommit",
    "share_unfinished": "s-open",
    "tiered_orphan": "t-orphan",
    "tiered_range": "t-range",
}
ANOMALIES = tuple(COLUMNS)
Edge = tuple[int, int]


def check(events: Iterable[Event]) -> Counter[str]:
    events = list(events)
    anomalies: Counter[str] = Counter({name: 0 for name in ANOMALIES})
    finals = [e for e in events if e["type"] == "final"]
    reads = [e for e in events if e["type"] == "read"]
    seen = Counter(e["value"] for e in finals)
    position = {e["value"]: (e["topic"], e["partition"], e["offset"]) for e in finals}
    read_values = {e["value"] for e in reads}
    inputs = {e["input_topic"] for e in events if e["type"] == "pipe"}
    anomalies["duplicated"] = sum(count - 1 for count in seen.values() if count > 1)
    gone = _deleted_on_purpose(events, finals)

    # A writer records a transaction before committing it ("pending") and again with its
    # outcome; the last record counts, and a pending one whose writer died is unknown.
    latest = {(e["producer"], e["txn"]): e for e in events if e["type"] == "txn"}
    order: dict[tuple[str, str, int], list[tuple[int, int, int]]] = defaultdict(list)
    for txn in (t for t in latest.values() if "reads" not in t):
        values = [v[0] for v in txn["values"]]
        visible = [v for v in values if v in seen]
        offsets = txn.get("offsets") or [-1] * len(values)
        missing = [
            entry
            for entry, offset in zip(txn["values"], offsets, strict=True)
            if entry[0] not in seen and not gone(entry, offset)
        ]
        if txn["outcome"] == "committed":
            anomalies["lost"] += len(missing)
            anomalies["unseen"] += sum(
                1 for entry in missing if entry[1] in inputs and entry[0] not in read_values
            )
        elif txn["outcome"] == "aborted":
            anomalies["aborted_read"] += len(visible)
            anomalies["aborted_read"] += sum(1 for v in values if v in read_values)
        if visible and missing:
            anomalies["torn"] += 1
        for index, value in enumerate(values):
            if value in position:
                topic, partition, offset = position[value]
                order[(txn["producer"], topic, partition)].append((offset, txn["txn"], index))
    for placed in order.values():
        by_offset = [(txn, index) for _offset, txn, index in sorted(placed)]
        anomalies["reordered"] += sum(1 for a, b in itertools.pairwise(by_offset) if b < a)

    anomalies["non_monotonic"], anomalies["poll_skip"] = _reader_order(reads, finals)
    anomalies["group_mismatch"] += _pipelines(events, finals)
    anomalies["inconsistent_offsets"] = _inconsistent_offsets(latest.values(), reads, finals)
    anomalies["precommitted_read"] = _precommitted_reads(events, reads)
    anomalies["G0"], anomalies["G1c"] = _cycles(list(latest.values()), finals)
    anomalies.update(check_share(events, finals))
    anomalies["tiered_orphan"], anomalies["tiered_range"] = _remote_objects(events)
    return anomalies


def _remote_objects(events: Iterable[Event]) -> tuple[int, int]:
    """Orphans, and manifest ranges out of place, over the "remote" events."""
    orphans = misplaced = 0
    for event in events:
        if event["type"] != "remote":
            continue
        orphans += len(event["orphans"])
        previous: list[int] | None = None
        for base, end in sorted(event["segments"]):
            if end >= event["end_offset"] or end < base:
                misplaced += 1
            if previous is not None and base != previous[1] + 1:
                misplaced += 1  # an overlap or a gap
            previous = [base, end]
    return orphans, misplaced


SHARE_ANOMALIES = tuple(name for name in ANOMALIES if name.startswith("share_"))


def check_share(events: Sequence[Event], finals: Sequence[Event] | None = None) -> Counter[str]:
    """The share-group rules over the history's share events, in the order they were
    recorded (one process records them all); `finals`: the final scan's events."""
    anomalies: Counter[str] = Counter({name: 0 for name in SHARE_ANOMALIES})
    if finals is None:
        finals = [e for e in events if e["type"] == "final"]
    declared = [e for e in events if e["type"] == "share"]
    if not declared:
        return anomalies
    topics = {topic for e in declared for topic in e["topics"]}
    limit = min(e["limit"] for e in declared)
    visible = {e["value"] for e in finals}
    final: dict[str, str] = {}  # value → its applied final acknowledgement
    answered: set[str] = set()  # values with a final acknowledgement of any outcome
    highest: dict[str, int] = {}  # value → its highest delivery count so far
    accepted: Counter[str] = Counter()
    for event in events:
        if event["type"] == "share_delivery":
            value, count = event["value"], event["count"]
            if value in final:
                anomalies["share_after_final"] += 1
            if count < highest.get(value, 0):
                anomalies["share_count_down"] += 1
            if count > limit:
                anomalies["share_over_limit"] += 1
            if value not in visible:
                anomalies["share_uncommitted"] += 1
            highest[value] = max(highest.get(value, 0), count)
        elif event["type"] == "share_ack" and event["ack"] != "release":
            answered.add(event["value"])
            if event["ok"]:
                final.setdefault(event["value"], event["ack"])
                if event["ack"] == "accept":
                    accepted[event["value"]] += 1
        elif event["type"] == "share_end" and event["start_offset"] < event["end_offset"]:
            anomalies["share_unfinished"] += 1
    anomalies["share_accepted_twice"] = sum(n - 1 for n in accepted.values() if n > 1)
    anomalies["share_lost"] = sum(
        1
        for e in finals
        if e["topic"] in topics
        and e["value"] not in answered
        and highest.get(e["value"], 0) < limit
    )
    return anomalies


def _reader_order(reads: list[Event], finals: list[Event]) -> tuple[int, int]:
    """Non-monotonic reads and poll skips: per reader and partition, consecutive reads at
    offsets a then c must have a < c, and nothing visible in the final scan between them
    (aborted records and transaction markers take offsets nobody reads)."""
    visible: dict[tuple[str, int], list[int]] = defaultdict(list)
    for final in finals:
        visible[(final["topic"], final["partition"])].append(final["offset"])
    for offsets in visible.values():
        offsets.sort()
    backwards = skips = 0
    last: dict[tuple[str, str, int], int] = {}
    for read in reads:
        key = (read["reader"], read["topic"], read["partition"])
        offset, previous = read["offset"], last.get(key)
        if previous is not None and offset <= previous:
            backwards += 1
        elif previous is not None:
            between = visible.get((read["topic"], read["partition"]), [])
            first_after = bisect.bisect_right(between, previous)
            if first_after < len(between) and between[first_after] < offset:
                skips += 1
        last[key] = offset
    return backwards, skips


def _inconsistent_offsets(txns: Iterable[Event], reads: list[Event], finals: list[Event]) -> int:
    """Offsets named with more than one value by acknowledged sends, reads and the final
    scan (-1: an offset the broker did not give)."""
    values_at: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    for txn in txns:
        if txn["outcome"] == "committed":
            for entry, offset in zip(txn["values"], txn.get("offsets", []), strict=False):
                if offset >= 0:
                    values_at[(entry[1], entry[2], offset)].add(entry[0])
    for event in (*reads, *finals):
        if event["offset"] >= 0:
            values_at[(event["topic"], event["partition"], event["offset"])].add(event["value"])
    return sum(1 for values in values_at.values() if len(values) > 1)


def _precommitted_reads(events: list[Event], reads: list[Event]) -> int:
    """Reads that returned before the commit of the value's transaction was even invoked
    (all clients run on one machine: one clock). Histories without the times are skipped."""
    started: dict[str, float] = {}
    for txn in events:
        if txn["type"] == "txn" and txn.get("commit_started") is not None:
            for entry in txn["values"]:
                started[entry[0]] = min(started.get(entry[0], math.inf), txn["commit_started"])
    return sum(
        1
        for read in reads
        if read.get("at") is not None and read["at"] < started.get(read["value"], -math.inf)
    )


def _cycles(txns: list[Event], finals: list[Event]) -> tuple[int, int]:
    """G0 and G1c: the strongly connected components of the dependency graph with a cycle of
    write-write edges alone, and with a write-read edge on a cycle."""
    # Aborted transactions are no nodes (reading them is aborted_read). Committed records
    # come last: an input the stage read again after a failed transaction is written again,
    # and the visible copy belongs to the acknowledged transaction.
    live = sorted(
        (t for t in txns if t["outcome"] != "aborted"), key=lambda t: t["outcome"] == "committed"
    )
    writer_of = {entry[0]: node for node, txn in enumerate(live) for entry in txn["values"]}
    write_write = _write_edges(finals, writer_of, [txn["producer"] for txn in live])
    visible = {writer_of[f["value"]] for f in finals if f["value"] in writer_of}
    write_read: set[Edge] = set()
    for node, txn in enumerate(live):
        if txn["outcome"] == "committed" or node in visible:
            for value in txn.get("reads", ()):
                writer = writer_of.get(value)
                if writer is not None and writer != node:
                    write_read.add((writer, node))
    return (
        _cyclic_components(len(live), write_write, write_write),
        _cyclic_components(len(live), write_write | write_read, write_read),
    )


def _write_edges(
    finals: list[Event], writer_of: dict[str, int], transactional_ids: Sequence[str]
) -> set[Edge]:
    """T1 -> T2 when, on a partition in offset order, T2's value is the next one after T1's
    among the values of their transactional id."""
    placed: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for final in finals:
        node = writer_of.get(final["value"])
        if node is not None:
            placed[(final["topic"], final["partition"])].append((final["offset"], node))
    edges: set[Edge] = set()
    for partition in placed.values():
        previous: dict[str, int] = {}  # transactional id: its last transaction so far here
        for _offset, node in sorted(partition):
            before = previous.get(transactional_ids[node])
            if before is not None and before != node:
                edges.add((before, node))
            previous[transactional_ids[node]] = node
    return edges


def _cyclic_components(count: int, edges: set[Edge], marked: set[Edge]) -> int:
    """How many strongly connected components of the graph (nodes 0..count-1) hold an edge
    of `marked` between two of their members: such an edge lies on a cycle."""
    successors: list[list[int]] = [[] for _ in range(count)]
    for source, target in edges:
        successors[source].append(target)
    component = _strongly_connected(successors)
    return len({component[a] for a, b in marked if component[a] == component[b]})


def _strongly_connected(successors: list[list[int]]) -> list[int]:
    """Tarjan's algorithm without recursion (histories hold ~10^4 transactions, and chains
    as long): each node's component number."""
    count = len(successors)
    index, low = [-1] * count, [0] * count
    component, on_stack = [-1] * count, [False] * count
    stack: list[int] = []
    visited = components = 0
    for root in range(count):
        if index[root] >= 0:
            continue
        index[root] = low[root] = visited
        visited += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, iter(successors[root]))]
        while work:
            node, children = work[-1]
            for child in children:
                if index[child] < 0:
                    index[child] = low[child] = visited
                    visited += 1
                    stack.append(child)
                    on_stack[child] = True
                    work.append((child, iter(successors[child])))
                    break
                if on_stack[child]:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        on_stack[member] = False
                        component[member] = components
                        if member == node:
                            break
                    components += 1
    return component


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
    """Anomaly counts per seed, plus a total row (columns abbreviated: see COLUMNS)."""
    header = ["seed", *COLUMNS.values()]
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
