"""The controller's pure decisions: leader election from the ISR (clean and unclean), the ISR
after brokers go and come back, controlled shutdown and the leader's ISR changes."""

from __future__ import annotations

from lockgate.cluster.controller import (
    initial_state,
    on_brokers_changed,
    on_controlled_shutdown,
    with_isr,
)
from lockgate.cluster.metadata import NO_LEADER, PartitionState


def test_new_partition_is_led_by_its_first_replica() -> None:
    assert initial_state((2, 3, 1)) == PartitionState((2, 3, 1), 2, 0, (2, 3, 1), 0)


STATE = PartitionState((1, 2, 3), 1, 4, (1, 2, 3), 9)


def test_nothing_changes_while_everyone_is_alive() -> None:
    assert on_brokers_changed(STATE, {1, 2, 3}) is None


def test_lost_leader_is_replaced_from_the_isr_in_assignment_order() -> None:
    assert on_brokers_changed(STATE, {2, 3}) == PartitionState((1, 2, 3), 2, 5, (2, 3), 10)
    behind = PartitionState((1, 2, 3), 1, 4, (1, 3), 9)  # 2 alive but out of sync
    assert on_brokers_changed(behind, {2, 3}) == PartitionState((1, 2, 3), 3, 5, (3,), 10)


def test_lost_follower_leaves_the_isr_and_the_leader_epoch_stays() -> None:
    assert on_brokers_changed(STATE, {1, 3}) == PartitionState((1, 2, 3), 1, 4, (1, 3), 10)


def test_no_clean_leader_means_offline_with_the_isr_kept() -> None:
    alone = PartitionState((1, 2, 3), 1, 4, (1,), 9)
    offline = on_brokers_changed(alone, {2, 3})
    assert offline == PartitionState((1, 2, 3), NO_LEADER, 5, (1,), 10)
    assert on_brokers_changed(offline, {2, 3}) is None  # still nobody clean
    assert on_brokers_changed(offline, {1, 2, 3}) == PartitionState((1, 2, 3), 1, 6, (1,), 11)


def test_unclean_election_takes_any_live_replica() -> None:
    alone = PartitionState((1, 2, 3), 1, 4, (1,), 9)
    assert on_brokers_changed(alone, {3}, unclean=True) == PartitionState((1, 2, 3), 3, 5, (3,), 10)
    assert on_brokers_changed(alone, set(), unclean=True) == PartitionState(
        (1, 2, 3), NO_LEADER, 5, (1,), 10
    )


def test_controlled_shutdown_moves_leadership_first() -> None:
    assert on_controlled_shutdown(STATE, 1, {1, 2, 3}) == PartitionState(
        (1, 2, 3), 2, 5, (2, 3), 10
    )
    assert on_controlled_shutdown(STATE, 3, {1, 2, 3}) == PartitionState(
        (1, 2, 3), 1, 4, (1, 2), 10
    )
    # the only in-sync replica stays leader rather than lose what only it has
    assert on_controlled_shutdown(PartitionState((1, 2), 1, 0, (1,), 0), 1, {1, 2}) is None
    assert on_controlled_shutdown(PartitionState((1, 2), 1, 0, (1,), 0), 2, {1, 2}) is None


def test_leader_changes_its_isr_and_stays_in_it() -> None:
    assert with_isr(STATE, [3]) == PartitionState((1, 2, 3), 1, 4, (1, 3), 10)
    assert with_isr(PartitionState((1, 2, 3), 1, 4, (1,), 9), [2, 1]) == PartitionState(
        (1, 2, 3), 1, 4, (1, 2), 10
    )
