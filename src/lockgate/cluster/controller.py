# The controller's decisions, pure: where a new partition's replicas go (Kafka 4's striped,
# rack-aware placement), and what a partition's state becomes when brokers go or come back
# (leader election from the ISR, the ISR without the lost). Nothing here awaits or touches the
# store: ControllerService (cluster/controller_service.py) applies the decisions by
# compare-and-swap, and the topic admin (topics/admin.py) places new partitions.
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lockgate.cluster.metadata import NO_LEADER, PartitionState


class AssignmentError(ValueError):
    """The request cannot be placed on these brokers (INVALID_REPLICATION_FACTOR)."""


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker replicas may be placed on: its rack (None: broker.rack unset) and whether it is
    fenced (Kafka's broker without a live session: used only when nothing else is left, and
    never as a leader). A registered lockgate broker holds a live lease: it is unfenced."""

    node_id: int
    rack: str | None = None
    fenced: bool = False


class PlacementRandom(Protocol):
    """The random draws of a placement (random.Random has them): a start in each list of
    brokers and of racks, and a reshuffle once every broker has led a partition."""

    def randrange(self, stop: int, /) -> int: ...

    def shuffle(self, x: MutableSequence[Any], /) -> None: ...


NO_BROKER = -1
# Kafka 4.4's message (lockgate cordons no log directories: only the fenced part applies)
FENCED = "All brokers are currently fenced, or have all their log directories cordoned."


class _Brokers:
    """Some brokers of one rack (its fenced or its unfenced ones), read round robin. Each
    partition is a new round (`round_number`): its first read starts one place further on
    than the previous round's, and a round yields each broker at most once."""

    __slots__ = ("ids", "offset", "read", "round_number")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.read = 0  # brokers handed out in the current round
        self.offset = 0  # where the round's reading starts
        self.round_number = 0

    def start(self, draw: PlacementRandom) -> None:
        if self.ids:
            self.ids.sort()
            self.offset = draw.randrange(len(self.ids))

    def next(self, round_number: int) -> int:
        if not self.ids:
            return NO_BROKER
        if round_number != self.round_number:
            self.round_number = round_number
            self.read = 0
            self.offset = (self.offset + 1) % len(self.ids)
        if self.read >= len(self.ids):
            return NO_BROKER
        broker = self.ids[(self.read + self.offset) % len(self.ids)]
        self.read += 1
        return broker


@dataclass(slots=True)
class _Rack:
    fenced: _Brokers = dataclasses.field(default_factory=_Brokers)
    unfenced: _Brokers = dataclasses.field(default_factory=_Brokers)

    def next(self, round_number: int) -> int:
        """Its next unfenced broker, a fenced one once those are used up in this round."""
        broker = self.unfenced.next(round_number)
        return broker if broker != NO_BROKER else self.fenced.next(round_number)


def _rack_order(rack: str | None) -> tuple[bool, str]:
    return (rack is not None, rack or "")  # brokers without a rack first, then by name


class _StripedPlacer:
    """Kafka's StripedReplicaPlacer over one set of brokers, one partition per place() call.

    Racks are visited in name order (brokers without a rack are a rack of their own, first),
    starting one rack further on for each partition; each replica comes from the next rack in
    turn, and within a rack from its next broker in turn, so with a replication factor up to
    the number of racks no two replicas share one. The leader (the first replica) comes from
    the first rack with an unfenced broker left. Once as many partitions as unfenced brokers
    were placed, racks and brokers are shuffled, so that later partitions do not repeat the
    same replica sets."""

    def __init__(self, brokers: Iterable[UsableBroker], draw: PlacementRandom) -> None:
        self.draw = draw
        self.racks: dict[str | None, _Rack] = {}
        self.total = self.unfenced = 0
        for broker in brokers:
            rack = self.racks.setdefault(broker.rack, _Rack())
            (rack.fenced if broker.fenced else rack.unfenced).ids.append(broker.node_id)
            self.total += 1
            self.unfenced += not broker.fenced
        self.names = sorted(self.racks, key=_rack_order)  # the order of the turns
        self.sorted_racks = [self.racks[name] for name in self.names]  # the order of the draws
        for rack in self.sorted_racks:
            rack.fenced.start(draw)
            rack.unfenced.start(draw)
        self.round_number = 0
        self.offset = draw.randrange(len(self.names)) if self.names else 0

    def check(self, replication_factor: int) -> None:
        """Kafka's InvalidReplicationFactorException cases, with Kafka 4.4's messages."""
        if replication_factor <= 0:
            raise AssignmentError(
                f"Invalid replication factor {replication_factor}: the replication factor "
                "must be positive."
            )
        if replication_factor > self.total:
            raise AssignmentError(
                f"The target replication factor of {replication_factor} cannot be reached "
                f"because only {self.total} broker(s) are registered or some brokers have all "
                "their log directories cordoned."
            )
        if self.unfenced == 0:
            raise AssignmentError(FENCED)

    def _shuffle(self) -> None:
        self.draw.shuffle(self.names)
        for rack in self.sorted_racks:
            self.draw.shuffle(rack.fenced.ids)
            self.draw.shuffle(rack.unfenced.ids)

    def place(self, replication_factor: int) -> tuple[int, ...]:
        self.check(replication_factor)
        # (a single unfenced broker leads every partition: no reshuffle would change that)
        if self.round_number == self.unfenced and self.unfenced > 1:
            self._shuffle()
            self.round_number = 0
        count = len(self.names)
        if self.offset == count:
            self.offset = 0
        round_number = self.round_number
        leader_rack = self.offset
        while True:
            leader = self.racks[self.names[leader_rack]].unfenced.next(round_number)
            if leader != NO_BROKER:
                break
            leader_rack = (leader_rack + 1) % count
        replicas = [leader]
        rack_index = self.offset
        misses = 0
        while len(replicas) < replication_factor:
            if rack_index == leader_rack:
                leader_rack = -1  # the leader's rack is passed over once, in the first turn
                broker = NO_BROKER
            else:
                broker = self.racks[self.names[rack_index]].next(round_number)
            rack_index = (rack_index + 1) % count
            if broker != NO_BROKER:
                replicas.append(broker)
                misses = 0
                continue
            misses += 1
            if misses > 2 * count:  # every rack answered nothing twice: none ever will
                raise AssignmentError(
                    f"no broker left for replica {len(replicas) + 1} of {replication_factor}"
                )
        self.round_number += 1
        self.offset += 1
        return tuple(replicas)


def place_replicas(
    brokers: Iterable[UsableBroker],
    partitions: int,
    replication_factor: int,
    draw: PlacementRandom,
    first_partition: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Kafka 4's placement of new partitions (its controller's StripedReplicaPlacer): the
    replicas of each partition striped over the racks, then over each rack's brokers, from
    random starts (`draw`, the caller's: random.Random() in the broker), so that with a
    replication factor up to the number of racks no two replicas share a rack, every broker
    gets its share of replicas and of leaders, and fenced brokers are used last and never
    lead. AssignmentError (INVALID_REPLICATION_FACTOR) with Kafka's message when the factor
    is not positive, above the number of brokers, or every broker is fenced.
    `first_partition` numbers the partitions of a grown topic (CreatePartitions); as in
    Kafka, the existing partitions do not change where the new ones go."""
    placer = _StripedPlacer(brokers, draw)
    if replication_factor > 0 and placer.unfenced == 0:  # (Kafka's order of the checks here)
        raise AssignmentError(FENCED)
    placer.check(replication_factor)
    return {
        partition: placer.place(replication_factor)
        for partition in range(first_partition, first_partition + partitions)
    }


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
