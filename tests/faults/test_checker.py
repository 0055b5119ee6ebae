"""The checker finds each anomaly in a hand-made history, and none in a clean one."""

from __future__ import annotations

from typing import Any

import pytest

from tests.faults.checker import check, table
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
    events: list[Event] = [txn("p", 0, ["a"], "aborted"), *final(["a"])]
    read: dict[str, Any] = {"type": "read", "reader": "r", "topic": "t", "partition": 0}
    events.append({**read, "offset": 0, "value": "a"})
    only("aborted_read", 2, events)


def test_reordered() -> None:
    only("reordered", 1, [txn("p", 0, ["a"], "committed"), txn("p", 1, ["b"], "committed"),
                          *final(["b", "a"])])  # fmt: skip


def test_non_monotonic() -> None:
    read: dict[str, Any] = {"type": "read", "reader": "r", "topic": "t", "partition": 0}
    only(
        "non_monotonic",
        1,
        [{**read, "offset": 5, "value": "x"}, {**read, "offset": 5, "value": "y"}],
    )


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
