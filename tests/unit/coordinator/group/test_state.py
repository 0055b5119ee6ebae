"""Classic group states: their names (as DescribeGroups/ListGroups show them) and the table of
legal previous states, checked pair by pair through Group.transition."""

from __future__ import annotations

import itertools

import pytest

from lockgate.coordinator.group.group import Group
from lockgate.coordinator.group.state import LEGAL_PREVIOUS, GroupState

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# Kafka's GroupState.validPreviousStates (classic GroupMetadata), written out by hand, with
# lockgate's two differences: Empty → Empty is allowed (a no-op) and Dead is final (lockgate
# forgets a deleted group instead of keeping a Dead one around, so Dead → Dead never happens).
EXPECTED_PREVIOUS: dict[GroupState, set[GroupState]] = {
    EMPTY: {PREPARING, EMPTY},
    PREPARING: {EMPTY, STABLE, COMPLETING},
    COMPLETING: {PREPARING},
    STABLE: {COMPLETING},
    DEAD: {EMPTY, STABLE, PREPARING, COMPLETING},
}


def test_names_are_kafkas() -> None:
    assert [s.value for s in GroupState] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


def test_table() -> None:
    assert set(LEGAL_PREVIOUS) == set(GroupState)
    assert {s: set(previous) for s, previous in LEGAL_PREVIOUS.items()} == EXPECTED_PREVIOUS


@pytest.mark.parametrize(
    ("before", "after"),
    list(itertools.product(GroupState, GroupState)),
    ids=lambda s: s.value,
)
def test_transition_follows_the_table(before: GroupState, after: GroupState) -> None:
    group = Group("g", state=before)
    if before in EXPECTED_PREVIOUS[after]:
        group.transition(after)
        assert group.state is after
    else:
        with pytest.raises(ValueError, match="illegal transition"):
            group.transition(after)
        assert group.state is before


def test_a_rebalance_cycle_is_legal_and_shortcuts_are_not() -> None:
    group = Group("g")
    for state in (PREPARING, COMPLETING, STABLE, PREPARING, COMPLETING, PREPARING, EMPTY):
        group.transition(state)
    # a group never becomes Stable or CompletingRebalance without a join round
    for shortcut in (STABLE, COMPLETING):
        with pytest.raises(ValueError):
            Group("g").transition(shortcut)
    # nor Empty straight from a generation in progress: members must leave through a rebalance
    for state in (STABLE, COMPLETING):
        with pytest.raises(ValueError):
            Group("g", state=state).transition(EMPTY)
