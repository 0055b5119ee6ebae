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
