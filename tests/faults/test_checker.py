"""The checker finds each anomaly in a hand-made history, and none in a clean one."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.faults.checker import ANOMALIES, check, table
from tests.faults.history import Event


def txn(producer: str, number: int, values: list[str], outcome: str, partition: int = 0) -> Event:
    return {
        "type": "txn",
        "producer": producer,
        "txn": number,
        "values": [[v, "t", partition] for v in values],
        "outcome": outcome,
    }


def final(values: list[str], topic: str = "t", partition: int = 0) -> list[Event]:
    return [
        {"type": "final", "topic": topic, "partition": partition, "offset": i, "value": v}
        for i, v in enumerate(values)
    ]


def read(offset: int, value: str, reader: str = "r", partition: int = 0, **also: Any) -> Event:
    return {"type": "read", "reader": reader, "topic": "t", "partition": partition,
            "offset": offset, "value": value, **also}  # fmt: skip


def clean() -> list[Event]:
    return [
        txn("p", 0, ["a", "b"], "committed"),
        txn("p", 1, ["c"], "aborted"),
        txn("p", 2, ["d"], "unknown"),
        *final(["a", "b", "d"]),
    ]


def only(anomaly: str, count: int, events: list[Event], **also: int) -> None:
    """`count` of `anomaly`, the counts in `also`, and nothing else."""
    found = check(events)
    expected = {anomaly: count, **also}
    assert {name: found[name] for name in expected} == expected, found
    assert sum(found.values()) == sum(expected.values()), found


def test_a_clean_history_has_no_anomaly() -> None:
    assert sum(check(clean()).values()) == 0


def test_lost() -> None:
    # b is missing: lost, and the transaction is torn
    only("lost", 1, [txn("p", 0, ["a", "b"], "committed"), *final(["a"])], torn=1)


def test_torn_unknown_transaction() -> None:
    only("torn", 1, [txn("p", 0, ["a", "b"], "unknown"), *final(["a"])])


def test_duplicated() -> None:
    only("duplicated", 1, [txn("p", 0, ["a"], "committed"), *final(["a", "a"])])


def test_aborted_read_by_the_final_scan_and_during_the_run() -> None:
    only("aborted_read", 2, [txn("p", 0, ["a"], "aborted"), *final(["a"]), read(0, "a")])


def test_reordered() -> None:
    only("reordered", 1, [txn("p", 0, ["a"], "committed"), txn("p", 1, ["b"], "committed"),
                          *final(["b", "a"])])  # fmt: skip


def test_non_monotonic() -> None:
    only("non_monotonic", 1, [read(5, "x"), read(5, "x")])  # the same record twice
    only("non_monotonic", 1, [read(5, "x"), read(4, "w")])


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [(["out:a"], 0), ([], 1), (["out:a", "out:a"], 1), (["out:a", "out:b"], 1)],
    ids=["consistent", "missing-output", "output-twice", "output-beyond-offset"],
)
def test_group_offsets_against_outputs(outputs: list[str], expected: int) -> None:
    events: list[Event] = [
        txn("p", 0, ["a", "b"], "committed"),
        *final(["a", "b"], topic="t"),
        *final(outputs, topic="out"),
        {"type": "pipe", "input_topic": "t", "output_topic": "out", "group": "g"},
        {"type": "group", "group": "g", "topic": "t", "partition": 0, "offset": 1},
    ]
    twice = outputs.count("out:a") - 1 if "out:a" in outputs else 0
    only("group_mismatch", expected, events, duplicated=twice)


def test_table_totals() -> None:
    text = table({1: check(clean()), 2: check([txn("p", 0, ["a"], "committed")])})
    assert text.splitlines()[-1].split()[:2] == ["total", "1"]


def test_every_anomaly_is_counted_and_has_a_column() -> None:
    counts = check(clean())
    assert set(counts) == set(ANOMALIES)
    assert len(table({1: counts}).splitlines()[0].split()) == len(ANOMALIES) + 1


# -- lifecycle runs: data deleted on purpose is not lost -------------------------------------


def lifecycle(retained: list[str], compacted: list[str]) -> Event:
    return {"type": "lifecycle", "retained_topics": retained, "compacted_topics": compacted}


def start(offset: int, topic: str = "t") -> Event:
    return {"type": "start", "topic": topic, "partition": 0, "offset": offset}


def committed_at(number: int, values: list[str], offsets: list[int]) -> Event:
    return {**txn("p", number, values, "committed"), "offsets": offsets}


def test_values_below_the_log_start_of_a_retained_topic_are_not_lost() -> None:
    events = [lifecycle(["t"], []), committed_at(0, ["a", "b"], [0, 1]), start(1)]
    events.append({"type": "final", "topic": "t", "partition": 0, "offset": 1, "value": "b"})
    assert sum(check(events).values()) == 0


def test_retention_excuses_nothing_at_or_above_the_log_start() -> None:
    events = [lifecycle(["t"], []), committed_at(0, ["a", "b"], [0, 1]), start(1)]
    only("lost", 1, events)


def test_retention_excuses_nothing_on_topics_without_it() -> None:
    events = [lifecycle(["other"], []), committed_at(0, ["a"], [0]), start(1)]
    only("lost", 1, events)


def keyed(number: int, values: list[tuple[str, str]], offsets: list[int]) -> Event:
    event = committed_at(number, [v for v, _ in values], offsets)
    event["values"] = [[v, "t", 0, k] for v, k in values]
    return event


def final_keyed(offset: int, value: str, key: str) -> Event:
    return {"type": "final", "topic": "t", "partition": 0, "offset": offset, "value": value,
            "key": key}  # fmt: skip


def test_a_value_compacted_behind_a_newer_one_of_its_key_is_not_lost() -> None:
    events = [
        lifecycle([], ["t"]),
        keyed(0, [("a", "k1"), ("b", "k2")], [0, 1]),
        keyed(1, [("c", "k1")], [2]),
        final_keyed(1, "b", "k2"),
        final_keyed(2, "c", "k1"),
    ]
    assert sum(check(events).values()) == 0


def test_compaction_that_drops_the_newest_value_of_a_key_loses_it() -> None:
    events = [
        lifecycle([], ["t"]),
        keyed(0, [("a", "k1")], [0]),
        keyed(1, [("c", "k1")], [2]),
        final_keyed(0, "a", "k1"),
    ]
    only("lost", 1, events)


# -- Jepsen's Kafka anomalies ------------------------------------------------------------------

PIPE: Event = {"type": "pipe", "input_topic": "t", "output_topic": "out", "group": "g"}


def scan(values: dict[int, str], partition: int = 0) -> list[Event]:
    """The final scan of one partition: offsets missing from `values` hold nothing visible."""
    return [
        {"type": "final", "topic": "t", "partition": partition, "offset": offset, "value": value}
        for offset, value in values.items()
    ]


def spread(producer: str, number: int, values: list[tuple[str, int]], **also: Any) -> Event:
    """A committed transaction over partitions of "t"; `reads` in `also` makes it the stage's."""
    return {"type": "txn", "producer": producer, "txn": number, "outcome": "committed",
            "values": [[v, "t", p] for v, p in values], **also}  # fmt: skip


def test_inconsistent_offsets_between_an_acknowledged_send_and_the_final_scan() -> None:
    events = [committed_at(0, ["a"], [0]), {**txn("q", 0, ["b"], "committed"), "offsets": [-1]}]
    only("inconsistent_offsets", 1, [*events, *scan({0: "b", 1: "a"})])


def test_inconsistent_offsets_between_a_read_and_the_final_scan() -> None:
    only("inconsistent_offsets", 1, [*scan({0: "a"}), read(0, "x")])


def test_offsets_that_agree_or_are_unknown_are_consistent() -> None:
    events = [committed_at(0, ["a"], [0]), {**txn("q", 0, ["b"], "committed"), "offsets": [-1]}]
    assert sum(check([*events, *scan({0: "a", 1: "b"}), read(0, "a")]).values()) == 0


def test_poll_skip_over_a_visible_record() -> None:
    only("poll_skip", 1, [*scan({0: "a", 1: "b", 2: "c", 3: "d"}), read(0, "a"), read(3, "d")])


@pytest.mark.parametrize(
    ("visible", "reads"),
    [
        ({0: "a", 2: "c"}, [read(0, "a"), read(2, "c")]),  # 1: an aborted record or a marker
        ({0: "a", 1: "b", 2: "c"}, [read(0, "a", reader="r1"), read(2, "c", reader="r2")]),
        ({0: "a", 1: "b"}, [read(0, "a"), read(9, "z", partition=1), read(1, "b")]),
    ],
    ids=["invisible-offset", "new-consumer-instance", "another-partition-between"],
)
def test_reads_that_skip_nothing_visible(visible: dict[int, str], reads: list[Event]) -> None:
    events = [*scan(visible), *scan({9: "z"}, partition=1), *reads]
    assert sum(check(events).values()) == 0


def test_unseen_is_a_lost_input_that_no_read_ever_saw() -> None:
    # both lost; a was read by the stage before it vanished, b never by anyone
    only("lost", 2, [PIPE, committed_at(0, ["a", "b"], [0, 1]), read(0, "a")], unseen=1)


def test_a_lost_value_outside_the_stage_input_is_lost_not_unseen() -> None:
    event = committed_at(0, ["a"], [0])
    event["values"] = [["a", "other", 0]]
    only("lost", 1, [PIPE, event])


def test_an_input_the_stage_never_read_but_the_final_scan_shows_is_seen() -> None:
    assert sum(check([PIPE, committed_at(0, ["a"], [0]), *scan({0: "a"})]).values()) == 0


def test_precommitted_read() -> None:
    committed = {**committed_at(0, ["a"], [0]), "commit_started": 10.0}
    only("precommitted_read", 1, [committed, *scan({0: "a"}), read(0, "a", at=9.5)])
    # a writer that died during its commit leaves the pending record, with the time
    pending = {**txn("p", 0, ["a"], "pending"), "commit_started": 10.0}
    only("precommitted_read", 1, [pending, *scan({0: "a"}), read(0, "a", at=9.5)])


@pytest.mark.parametrize(
    ("started", "at"), [(10.0, 10.5), (None, 9.5), (10.0, None)], ids=["after", "old", "untimed"]
)
def test_reads_after_the_commit_or_without_times(started: float | None, at: float | None) -> None:
    committed = committed_at(0, ["a"], [0])
    if started is not None:
        committed["commit_started"] = started
    polled = read(0, "a")
    if at is not None:
        polled["at"] = at
    assert sum(check([committed, *scan({0: "a"}), polled]).values()) == 0


def zombie_pair(**stage: Any) -> list[Event]:
    """One transactional id's transactions 0 and 1 on partitions 0 and 1, in opposite orders
    on each: 0 -> 1 on partition 0, 1 -> 0 on partition 1."""
    return [
        spread("p", 0, [("a", 0), ("b", 1)], **stage),
        spread("p", 1, [("c", 0), ("d", 1)], **stage),
        *scan({0: "a", 1: "c"}),
        *scan({0: "d", 1: "b"}, partition=1),
    ]


def test_g0_write_cycle_of_one_transactional_id() -> None:
    only("G0", 1, zombie_pair(reads=[]))  # the stage's transactions
    only("G0", 1, zombie_pair(), reordered=1)  # a writer's: its send order is broken too


def test_g0_over_thousands_of_transactions() -> None:
    """A single cycle through 10,000 transactions: T(i) -> T(i+1) on partition i."""
    count = 10_000
    events = [
        spread("p", i, [(f"v{i}-{i}", i), (f"v{i}-{(i - 1) % count}", (i - 1) % count)], reads=[])
        for i in range(count)
    ]
    for i in range(count):
        events += scan({0: f"v{i}-{i}", 1: f"v{(i + 1) % count}-{i}"}, partition=i)
    only("G0", 1, events)


def test_transactions_of_different_ids_may_interleave() -> None:
    """Kafka does not isolate concurrent producers: their write cycles are not anomalies."""
    events = [
        spread("p", 0, [("a", 0), ("b", 1)]),
        spread("q", 0, [("c", 0), ("d", 1)]),
        *scan({0: "a", 1: "c", 2: "b"}),  # interleaved on one partition too
        *scan({0: "d", 1: "b"}, partition=1),
    ]
    events[-1]["value"] = "e"
    events[0]["values"].append(["e", "t", 1])
    assert sum(check(events).values()) == 0


def test_g1c_cycle_through_a_read() -> None:
    # the stage's transaction 0 read what its transaction 1 wrote, yet comes before it
    events = [
        spread("pipe", 0, [("x", 0)], reads=["y"]),
        spread("pipe", 1, [("y", 0)], reads=[]),
        *scan({0: "x", 1: "y"}),
    ]
    only("G1c", 1, events)


def test_g1c_of_read_edges_alone() -> None:
    # each of two transactions read the other's value
    events = [
        spread("p", 0, [("x", 0)], reads=["y"]),
        spread("q", 0, [("y", 1)], reads=["x"]),
        *scan({0: "x"}),
        *scan({0: "y"}, partition=1),
    ]
    only("G1c", 1, events)


def test_an_aborted_transaction_is_no_node_of_the_graph() -> None:
    # as above, but the second one aborted: what it read and wrote draws no edge
    events = [
        spread("p", 0, [("x", 0)], reads=["y"]),
        {**spread("q", 0, [("y", 1)], reads=["x"]), "outcome": "aborted"},
        *scan({0: "x"}),
    ]
    assert sum(check(events).values()) == 0


def test_the_stage_reading_a_writer_is_no_cycle() -> None:
    events = [
        spread("w", 0, [("a", 0)]),
        spread("w", 1, [("b", 0)]),
        spread("pipe", 0, [("out:a", 1)], reads=["a"]),
        spread("pipe", 1, [("out:b", 1)], reads=["b"]),
        *scan({0: "a", 1: "b"}),
        *scan({0: "out:a", 1: "out:b"}, partition=1),
    ]
    assert sum(check(events).values()) == 0


def simulated_run(seed: int, writers: int = 4, transactions: int = 2_500) -> list[Event]:
    """A clean run: writers' transactions interleaved record by record on 6 partitions, 10%
    aborted (records and markers take offsets nobody reads), then the stage reading every
    partition in order and committing batches, and the final scan."""
    rng = random.Random(seed)
    logs: dict[int, list[str | None]] = {p: [] for p in range(6)}  # None: invisible
    events: list[Event] = []
    open_ones = {f"w{w}": iter(range(transactions)) for w in range(writers)}
    current: dict[str, tuple[Event, list[tuple[str, int]]]] = {}
    clock = 0.0
    while open_ones:
        writer = rng.choice(sorted(open_ones))
        if writer not in current:
            number = next(open_ones[writer], None)
            if number is None:
                del open_ones[writer]
                continue
            plan = [(f"{writer}-{number}-{i}", rng.randrange(6)) for i in range(rng.randint(1, 4))]
            current[writer] = (spread(writer, number, plan, offsets=[]), plan)
        event, plan = current[writer]
        if len(event["offsets"]) < len(plan):
            value, partition = plan[len(event["offsets"])]
            event["offsets"].append(len(logs[partition]))
            logs[partition].append(value)
            continue
        del current[writer]
        clock += 1
        aborted = rng.random() < 0.1
        for partition in {p for _, p in plan}:
            if aborted:
                logs[partition] = [
                    v if (v, partition) not in plan else None for v in logs[partition]
                ]
            logs[partition].append(None)  # the marker
        if aborted:
            events.append({**event, "outcome": "aborted", "offsets": None})
        else:
            events.append({**event, "commit_started": clock})
    pipe = {**PIPE, "output_topic": "out"}
    events.append(pipe)
    for partition, log in logs.items():
        visible = [(offset, v) for offset, v in enumerate(log) if v is not None]
        events += scan(dict(visible), partition)
        for start in range(0, len(visible), 7):
            batch = visible[start : start + 7]
            number = partition * 10_000 + start
            events += [
                read(o, v, reader="pipe-1", partition=partition, at=clock + 1) for o, v in batch
            ]
            outputs = [[f"out:{v}", "out", partition] for _, v in batch]
            events.append({"type": "txn", "producer": "pipe-writer", "txn": number,
                           "values": outputs, "reads": [v for _, v in batch],
                           "outcome": "committed",
                           "offsets": list(range(start, start + len(batch)))})  # fmt: skip
        events += [
            {"type": "final", "topic": "out", "partition": partition, "offset": i,
             "value": f"out:{v}"}
            for i, (_, v) in enumerate(visible)
        ]  # fmt: skip
        events.append({"type": "group", "group": "g", "topic": "t", "partition": partition,
                       "offset": len(log)})  # fmt: skip
    return events


def test_a_clean_run_of_thousands_of_interleaved_transactions() -> None:
    events = simulated_run(1)
    assert sum(1 for e in events if e["type"] == "txn") > 10_000
    assert sum(check(events).values()) == 0, check(events)


# Share groups: a "share" event declares the group's topics and delivery limit; readers record
# each delivery and each final acknowledgement's outcome.


def shared(limit: int = 3) -> Event:
    return {"type": "share", "group": "s", "topics": ["t"], "limit": limit}


def delivery(value: str, count: int, reader: str = "r") -> Event:
    return {"type": "share_delivery", "reader": reader, "topic": "t", "partition": 0,
            "offset": 0, "value": value, "count": count}  # fmt: skip


def ack(value: str, kind: str, ok: bool = True) -> Event:
    return {"type": "share_ack", "reader": "r", "value": value, "ack": kind, "ok": ok}


def end(start_offset: int, end_offset: int) -> Event:
    return {"type": "share_end", "topic": "t", "partition": 0, "start_offset": start_offset,
            "end_offset": end_offset}  # fmt: skip


def share_clean() -> list[Event]:
    """a accepted, b rejected, c released once then accepted by another reader, d's accept of
    unknown outcome (never handed out again), e archived after the limit, f's first delivery
    lost to a crash (its count repeats)."""
    return [
        *final(["a", "b", "c", "d", "e", "f"]),
        shared(),
        delivery("a", 1), ack("a", "accept"),
        delivery("b", 1), ack("b", "reject"),
        delivery("c", 1), ack("c", "release"), delivery("c", 2, "r2"), ack("c", "accept"),
        delivery("d", 1), ack("d", "accept", ok=False),
        delivery("e", 1), ack("e", "release"), delivery("e", 2), ack("e", "release"),
        delivery("e", 3), ack("e", "release"),
        delivery("f", 1), delivery("f", 1), ack("f", "accept"),
        end(6, 6),
    ]  # fmt: skip


def test_a_clean_share_history_has_no_anomaly() -> None:
    assert sum(check(share_clean()).values()) == 0


def test_without_a_share_event_no_share_rule_applies() -> None:
    assert sum(check([*final(["zz"]), delivery("zz", 9)]).values()) == 0


@pytest.mark.parametrize(
    ("extra", "anomaly", "count"),
    [
        ([delivery("a", 2)], "share_after_final", 1),  # an applied accept, handed out again
        ([delivery("b", 2)], "share_after_final", 1),  # an applied reject, handed out again
        ([delivery("e", 2)], "share_count_down", 1),  # e was at 3
        ([delivery("zz", 1)], "share_uncommitted", 1),  # not in the final scan
        ([end(4, 6)], "share_unfinished", 1),  # records left in flight
    ],
)
def test_each_share_anomaly(extra: list[Event], anomaly: str, count: int) -> None:
    only(anomaly, count, [*share_clean(), *extra])


def test_a_value_handed_out_again_and_accepted_again_is_counted_twice() -> None:
    only(
        "share_after_final",
        1,
        [*share_clean(), delivery("a", 2), ack("a", "accept")],
        share_accepted_twice=1,
    )


def test_share_lost_and_over_limit() -> None:
    events = share_clean()
    # a value released and never handed out again below the limit: lost
    events = [e for e in events if not (e.get("value") == "c" and e.get("count") == 2)]
    events = [e for e in events if not (e.get("value") == "c" and e.get("ack") == "accept")]
    only("share_lost", 1, events)
    only("share_over_limit", 1, [*share_clean(), delivery("e", 4)], share_after_final=0)
    # never delivered at all: lost
    only("share_lost", 1, [*share_clean(), *final(["g"], partition=1)])


# -- tiered storage: the objects left in the object store ------------------------------------


def remote(segments: list[list[int]], orphans: tuple[str, ...] = (), end: int = 100) -> Event:
    return {"type": "remote", "topic": "t", "partition": 0, "end_offset": end,
            "segments": segments, "orphans": list(orphans)}  # fmt: skip


def test_contiguous_manifests_below_the_end_and_no_orphan_are_clean() -> None:
    assert sum(check([*clean(), remote([[10, 19], [0, 9], [20, 49]])]).values()) == 0
    assert sum(check([*clean(), remote([])]).values()) == 0


def test_orphans_are_counted_each() -> None:
    only("tiered_orphan", 2, [*clean(), remote([[0, 9]], ("t/0/a.log", "t/0/a.index"))])


@pytest.mark.parametrize(
    ("segments", "count"),
    [
        ([[0, 9], [10, 100]], 1),  # reaches the end offset
        ([[0, 9], [5, 19]], 1),  # overlaps
        ([[0, 9], [12, 19]], 1),  # a gap
        ([[0, 9], [0, 9]], 1),  # the same range twice
        ([[10, 5]], 1),  # ends before it begins
    ],
)
def test_manifest_ranges_out_of_place(segments: list[list[int]], count: int) -> None:
    only("tiered_range", count, [*clean(), remote(segments)])
