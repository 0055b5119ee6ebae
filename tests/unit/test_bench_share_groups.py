"""The pure parts of bench.share_groups: offset runs, the distinct-record count behind the
records/s and duplicate figures, the percentile of the latency figures, and the ratio table."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.share_groups import (
    DistinctRecords,
    ScenarioResult,
    format_ratio_table,
    offset_runs,
    percentile,
    ratio_rows,
)


def test_offset_runs_cut_at_gaps_and_partition_changes() -> None:
    pairs = [(0, 5), (0, 6), (0, 7), (1, 8), (1, 9), (0, 9), (0, 11)]
    assert offset_runs(pairs) == [(0, 5, 7), (1, 8, 9), (0, 9, 9), (0, 11, 11)]
    assert offset_runs([]) == []


deliveries = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(0, 5)), max_size=30
)


@given(deliveries)
def test_distinct_records_match_a_set(runs: list[tuple[int, int, int]]) -> None:
    seen = DistinctRecords()
    model: set[tuple[int, int]] = set()
    total = 0
    for partition, first, length in runs:
        last = first + length
        offsets = {(partition, offset) for offset in range(first, last + 1)}
        assert seen.add(partition, first, last) == len(offsets - model)
        model |= offsets
        total += len(offsets)
    assert seen.distinct == len(model)
    assert seen.deliveries == total
    assert seen.duplicates == total - len(model)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 1..100, unordered
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([], 0.5) == 0.0


def test_ratio_rows_divide_by_the_reference_of_the_same_scenario() -> None:
    results = [
        ScenarioResult("kafka", "throughput 1p x 4c", "throughput",
                       {"records_per_second": 80_000.0, "broker_cpu_per_million": 4.0}),
        ScenarioResult("lockgate-page-cache", "throughput 1p x 4c", "throughput",
                       {"records_per_second": 100_000.0, "broker_cpu_per_million": 2.0}),
        ScenarioResult("lockgate-page-cache", "throughput 6p x 4c", "throughput",
                       {"records_per_second": 1.0, "broker_cpu_per_million": 1.0}),
        ScenarioResult("kafka", "storm", "storm",
                       {"expiry_to_last_seconds": 0.0, "broker_cpu_seconds": 0.5}),
        ScenarioResult("lockgate-page-cache", "storm", "storm",
                       {"expiry_to_last_seconds": 0.1, "broker_cpu_seconds": 0.25}),
    ]  # fmt: skip
    rows = ratio_rows(results)
    assert [(r["scenario"], r["figure"], r["ratio"]) for r in rows] == [
        ("throughput 1p x 4c", "records/s", 1.25),
        ("throughput 1p x 4c", "broker CPU s/M records", 0.5),
        ("storm", "expiry to last redelivery s", None),  # Kafka's 0: no ratio
        ("storm", "broker CPU s", 0.5),
    ]
    table = format_ratio_table(rows).splitlines()
    assert table[0].startswith("| target | scenario |")
    assert table[2] == (
        "| lockgate-page-cache | throughput 1p x 4c | records/s | 100,000 | 80,000 | 1.25× |"
    )
    assert table[4].endswith("| — |")
