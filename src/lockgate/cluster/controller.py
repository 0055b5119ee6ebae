# The controller's decisions, pure: where a new partition's replicas go (Kafka's rack-unaware
# round robin), and what a partition's state becomes when brokers go or come back (leader
# election from the ISR, the ISR without the lost). Nothing here awaits or touches the store:
# ControllerService (cluster/controller_service.py) applies the decisions by compare-and-swap.
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

from lockgate.cluster.metadata import NO_LEADER, PartitionState


class AssignmentError(ValueError):
    """The request cannot be placed on these brokers (INVALID_REPLICATION_FACTOR)."""


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    start_index: int,
    first_partition: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Kafka's rack-unaware assignment: partition p's first replica is broker
    (p + start) mod n; the others follow at a shift that moves on once per round of n
    partitions, so that followers spread too. `start_index` is random in Kafka (the caller
    draws it); `first_partition` continues an existing topic (CreatePartitions)."""
    ordered = sorted(brokers)
    count = len(ordered)
    if replication_factor < 1:
        raise AssignmentError(f"replication factor must be at least 1, not {replication_factor}")
    if replication_factor > count:
        raise AssignmentError(
            f"replication factor {replication_factor} is larger than the "
            f"{count} available broker{'s' if count != 1 else ''}"
        )
    start = start_index % count
    shift = start
    assignment: dict[int, tuple[int, ...]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start) % count
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            step = 1 + (shift + j) % (count - 1)
            replicas.append(ordered[(first + step) % count])
        assignment[partition] = tuple(replicas)
    return assignment


def initial_state(replicas: tuple[int, ...]) -> PartitionState:
    """A new partition: its first replica leads at epoch 0, every replica in sync (empty)."""
    return PartitionState(replicas, replicas[0], 0, replicas, 0)


def _elect(state: PartitionState, alive: Collection[int], unclean: bool) -> PartitionState:
    """A new leader: the first replica, in assignment order, that is alive and in the ISR;
    failing that, with unclean election, the first alive replica, alone in the ISR.
    Otherwise the partition is offline (no leader) and its ISR is kept, so that a member
    coming back can lead it without loss."""
    isr = [r for r in state.isr if r in alive]
    candidates = [r for r in state.replicas if r in isr]
    if candidates:
        leader, new_isr = candidates[0], tuple(isr)
    elif unclean and (survivors := [r for r in state.replicas if r in alive]):
        leader, new_isr = survivors[0], (survivors[0],)
    else:
        leader, new_isr = NO_LEADER, state.isr
    return PartitionState(
        state.replicas, leader, state.leader_epoch + 1, new_isr, state.partition_epoch + 1
    )


def on_brokers_changed(
    state: PartitionState, alive: Collection[int], unclean: bool = False
) -> PartitionState | None:
    """The partition's next state after the set of live brokers changed, or None if it needs
    no change. A lost leader is replaced (its epoch bumped); a lost follower leaves the ISR;
    an offline partition gets a leader once an ISR member (or, with unclean election, any
    replica) is back. Followers re-enter the ISR through their leader, never here."""
    if state.leader == NO_LEADER:
        elected = _elect(state, alive, unclean)
        return elected if elected.leader != NO_LEADER else None
    if state.leader not in alive:
        return _elect(state, alive, unclean)
    isr = tuple(r for r in state.isr if r in alive)
    if isr == state.isr:
        return None
    return dataclasses.replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)


def on_controlled_shutdown(
    state: PartitionState, leaving: int, alive: Collection[int]
) -> PartitionState | None:
    """A broker announced its shutdown: partitions it leads move to another ISR member
    first (a clean election: nothing acknowledged is lost), and it leaves every ISR. A
    partition whose ISR is the leaving broker alone keeps it: better the short outage than
    an unclean election."""
    if leaving not in state.isr and state.leader != leaving:
        return None
    others = [r for r in alive if r != leaving]
    if state.leader == leaving:
        elected = _elect(state, others, unclean=False)
        return elected if elected.leader != NO_LEADER else None
    isr = tuple(r for r in state.isr if r != leaving)
    return dataclasses.replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)


def with_isr(state: PartitionState, isr: Sequence[int]) -> PartitionState:
    """The leader's ISR change (shrink after replica.lag.time.max.ms, expand once caught up):
    the leader stays in, the order of the assignment is kept."""
    members = set(isr) | {state.leader}
    ordered = tuple(r for r in state.replicas if r in members)
    return dataclasses.replace(state, isr=ordered, partition_epoch=state.partition_epoch + 1)
