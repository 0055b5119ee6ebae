"""An exhaustive walk over short histories of the transaction coordinator's rules with several
producer instances of one transactional id, lost responses and the coordinator's own moves
(completing a decision, aborting on timeout), near the end of the epoch range. At every step:

- no client is ever handed epoch Short.MAX_VALUE (it is left for markers) or a negative one;
- every transition stays inside the epoch range and survives the transaction log encoding;
- once another instance's InitProducerId (-1, -1) has succeeded, an instance never gets a
  successful answer again, except to a (-1, -1) of its own (KIP-98 zombie fencing)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest

from lockgate.coordinator.txn import rules
from lockgate.coordinator.txn.log import decode_value, encode_value
from lockgate.coordinator.txn.metadata import NO_EPOCH, NO_PRODUCER_ID, TV2, TxnMetadata
from lockgate.coordinator.txn.state import PREPARING
from lockgate.protocol.errors import ErrorCode
from tests.unit.coordinator.txn.support import MAX, MAX_TIMEOUT_MS, NOW, TP_A, TXN_ID

Pair = tuple[int, int]
NO_PAIR: Pair = (NO_PRODUCER_ID, NO_EPOCH)
FAR_FUTURE = NOW + 10 * MAX_TIMEOUT_MS
MAX_INSTANCES = 3


@dataclass(frozen=True)
class World:
    meta: TxnMetadata | None
    pairs: tuple[Pair, ...]  # what each instance believes its id/epoch is (NO_PAIR: nothing yet)
    fenced: frozenset[int]  # instances fenced by another one's successful (-1, -1) init


def allocator(world: World) -> rules.AllocateId:
    """Deterministic fresh ids: one above every id seen so far."""
    seen = [p for p, _ in world.pairs]
    if world.meta is not None:
        m = world.meta
        seen += [m.producer_id, m.prev_producer_id, m.next_producer_id]
    counter = iter(range(max(seen) + 1, max(seen) + 10))
    return lambda: next(counter)


def check_transition(new: TxnMetadata) -> None:
    assert new.producer_id >= 0 and 0 <= new.producer_epoch <= MAX, new
    assert new.next_producer_epoch == NO_EPOCH or 0 <= new.next_producer_epoch < MAX, new
    decoded = decode_value(new.transactional_id, encode_value(new))
    assert decoded == new, new  # every field survives a coordinator failover


def moves(world: World, version: int) -> Iterator[tuple[str, int, rules.Outcome]]:
    """(description, acting instance or -1 for the coordinator, outcome) of every next step."""
    meta = world.meta
    allocate = allocator(world)
    if len(world.pairs) < MAX_INSTANCES:
        outcome = rules.init_producer_id(
            meta, TXN_ID, 60_000, -1, -1, NOW, MAX_TIMEOUT_MS, allocate
        )
        yield "new instance InitProducerId(-1, -1)", len(world.pairs), outcome
    for instance, pair in enumerate(world.pairs):
        if pair == NO_PAIR:
            outcome = rules.init_producer_id(
                meta, TXN_ID, 60_000, -1, -1, NOW, MAX_TIMEOUT_MS, allocator(world)
            )
            yield f"instance {instance} retries InitProducerId(-1, -1)", instance, outcome
            continue
        producer_id, epoch = pair
        yield (
            f"instance {instance} InitProducerId{pair}",
            instance,
            rules.init_producer_id(
                meta, TXN_ID, 60_000, producer_id, epoch, NOW, MAX_TIMEOUT_MS, allocator(world)
            ),
        )
        yield (
            f"instance {instance} AddPartitions{pair}",
            instance,
            rules.add_partitions(meta, producer_id, epoch, [TP_A], NOW, version),
        )
        for commit in (True, False):
            yield (
                f"instance {instance} EndTxn{pair} {'commit' if commit else 'abort'}",
                instance,
                rules.end_txn(meta, producer_id, epoch, commit, NOW, version, allocator(world)),
            )
    if meta is not None and meta.state in PREPARING:
        yield "coordinator completes", -1, rules.Outcome(ErrorCode.none, rules.complete(meta, NOW))
    if meta is not None:
        timed_out = rules.abort_if_timed_out(meta, FAR_FUTURE)
        if timed_out is not None:
            yield "coordinator aborts on timeout", -1, rules.Outcome(ErrorCode.none, timed_out)


def successors(world: World, version: int) -> Iterator[tuple[str, World]]:
    for description, instance, outcome in moves(world, version):
        new_meta = outcome.transition if outcome.transition is not None else world.meta
        if outcome.transition is not None:
            check_transition(outcome.transition)
        if instance < 0:
            yield description, replace(world, meta=new_meta)
            continue
        answered = outcome.error == ErrorCode.none
        new_instance = description.endswith("(-1, -1)")
        if answered and not new_instance:  # (-1, -1) starts afresh, whoever sends it
            assert instance not in world.fenced, f"{description}: a fenced instance succeeded"
        pair = (outcome.producer_id, outcome.producer_epoch)
        if answered and pair != NO_PAIR:
            assert pair[0] >= 0 and 0 <= pair[1] < MAX, f"{description}: handed out {pair}"
        pairs = list(world.pairs)
        if instance == len(pairs):
            pairs.append(NO_PAIR)
        fenced = world.fenced
        if new_instance and answered:
            fenced = frozenset(range(len(pairs))) - {instance}
        learned = list(pairs)
        if answered and pair != NO_PAIR:
            learned[instance] = pair
        yield description, World(new_meta, tuple(learned), fenced)
        if learned != pairs:
            # the same step, but its answer was lost on the way back to the client (the others
            # are fenced all the same: the coordinator has bumped the epoch)
            yield description + " (answer lost)", World(new_meta, tuple(pairs), fenced)


def explore(start: World, version: int, depth: int) -> int:
    seen = {start}
    frontier: list[tuple[World, tuple[str, ...]]] = [(start, ())]
    for _ in range(depth):
        following: list[tuple[World, tuple[str, ...]]] = []
        for world, history in frontier:
            try:
                for description, nxt in successors(world, version):
                    if nxt not in seen:
                        seen.add(nxt)
                        following.append((nxt, (*history, description)))
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}\nafter: {list(history)}\nstate: {world.meta}"
                ) from None
        frontier = following
    return len(seen)


@pytest.mark.parametrize("version", [0, TV2], ids=["TV1", "TV2"])
@pytest.mark.parametrize("start_epoch", [MAX - 3, 7])
def test_no_history_breaks_fencing_or_the_epoch_range(version: int, start_epoch: int) -> None:
    start = rules.init_producer_id(
        None, TXN_ID, 60_000, -1, -1, NOW, MAX_TIMEOUT_MS, lambda: 100
    ).transition
    assert start is not None
    start = replace(start, producer_epoch=start_epoch)
    explored = explore(World(start, ((100, start_epoch),), frozenset()), version, depth=8)
    assert explored > 1000  # the walk really branched
