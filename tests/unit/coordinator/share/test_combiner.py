"""The state-batch combiner (Kafka's PersisterStateBatchCombiner): against a per-offset model
(each offset at or above the start offset takes the largest (delivery count, state) of the
batches covering it), and the shape of its answer (sorted, disjoint, coalesced)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.coordinator.share.combiner import combine
from lockgate.coordinator.share.records import StateBatch


def test_higher_delivery_count_wins_over_recency() -> None:
    held = [StateBatch(0, 9, 2, 3)]  # acknowledged at delivery 3
    late = [StateBatch(5, 14, 0, 2)]  # a late write of delivery 2: loses where they overlap
    assert combine(held, late, -1) == (StateBatch(0, 9, 2, 3), StateBatch(10, 14, 0, 2))


def test_ties_go_to_the_higher_state() -> None:
    assert combine([StateBatch(0, 4, 0, 1)], [StateBatch(2, 3, 4, 1)], -1) == (
        StateBatch(0, 1, 0, 1),
        StateBatch(2, 3, 4, 1),
        StateBatch(4, 4, 0, 1),
    )


def test_adjacent_equal_ranges_coalesce_and_start_offset_clips() -> None:
    batches = [StateBatch(0, 4, 2, 1), StateBatch(5, 9, 2, 1), StateBatch(10, 12, 4, 1)]
    assert combine(batches, [], 3) == (StateBatch(3, 9, 2, 1), StateBatch(10, 12, 4, 1))
    assert combine(batches, [], 13) == ()


def test_gaps_stay_gaps() -> None:
    assert combine([StateBatch(0, 1, 2, 1)], [StateBatch(5, 6, 2, 1)], -1) == (
        StateBatch(0, 1, 2, 1),
        StateBatch(5, 6, 2, 1),
    )


_batch = st.builds(
    lambda first, length, state, count: StateBatch(first, first + length, state, count),
    st.integers(0, 60),
    st.integers(0, 15),
    st.sampled_from([0, 2, 3, 4]),
    st.integers(1, 4),
)


def _model(batches: list[StateBatch], start: int) -> dict[int, tuple[int, int]]:
    best: dict[int, tuple[int, int]] = {}
    for batch in batches:
        for offset in range(batch.first_offset, batch.last_offset + 1):
            if start != -1 and offset < start:
                continue
            priority = (batch.delivery_count, batch.delivery_state)
            best[offset] = max(best.get(offset, priority), priority)
    return best


@settings(max_examples=300, deadline=None)
@given(st.lists(_batch, max_size=8), st.lists(_batch, max_size=8), st.integers(-1, 70))
def test_combiner_matches_the_per_offset_model(
    held: list[StateBatch], new: list[StateBatch], start: int
) -> None:
    merged = combine(held, new, start)
    covered: dict[int, tuple[int, int]] = {}
    for batch in merged:
        for offset in range(batch.first_offset, batch.last_offset + 1):
            covered[offset] = (batch.delivery_count, batch.delivery_state)
    assert covered == _model(held + new, start)
    # sorted and disjoint; adjacent ranges differ in (state, count) (more than one input only:
    # a single batch is passed through as it is)
    for before, after in itertools.pairwise(merged):
        assert before.last_offset < after.first_offset
        if before.last_offset + 1 == after.first_offset:
            assert (before.delivery_state, before.delivery_count) != (
                after.delivery_state,
                after.delivery_count,
            )
