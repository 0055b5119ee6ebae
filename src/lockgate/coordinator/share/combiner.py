# Kafka's PersisterStateBatchCombiner, restated: merges the state batches held for a share
# partition with the ones a write brings. Everything below the start offset is dropped (a batch
# across it is cut at it; -1: no start offset, nothing dropped). Where batches overlap, an offset
# takes the batch with the higher delivery count, and on a tie the higher delivery state: a
# merge is ordered by (count, state), not by recency, so a late write of an older delivery
# cannot undo a newer one. Adjacent ranges with the same (state, count) are joined. The answer
# is the shortest sorted, non-overlapping cover of the union.
from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from lockgate.coordinator.share.records import StateBatch

_Priority = tuple[int, int]  # (delivery count, delivery state): the larger wins


def combine(
    so_far: Sequence[StateBatch], new: Sequence[StateBatch], start_offset: int
) -> tuple[StateBatch, ...]:
    pruned = list(_prune(so_far, start_offset)) + list(_prune(new, start_offset))
    if len(pruned) <= 1:
        return tuple(pruned)
    return tuple(_sweep(pruned))


def _prune(batches: Iterable[StateBatch], start_offset: int) -> Iterable[StateBatch]:
    for batch in batches:
        if batch.first_offset > batch.last_offset:
            continue  # an empty range covers nothing
        if start_offset == -1 or batch.first_offset >= start_offset:
            yield batch
        elif batch.last_offset >= start_offset:
            yield StateBatch(
                start_offset, batch.last_offset, batch.delivery_state, batch.delivery_count
            )


def _sweep(batches: list[StateBatch]) -> list[StateBatch]:
    """A sweep over the batches' starts and ends (an end at last + 1, before any start at the
    same offset): between two event offsets the winner is the largest active priority."""
    events: list[tuple[int, bool, _Priority]] = []
    for batch in batches:
        priority = (batch.delivery_count, batch.delivery_state)
        events.append((batch.first_offset, True, priority))
        events.append((batch.last_offset + 1, False, priority))
    events.sort(key=lambda event: (event[0], event[1]))
    active: dict[_Priority, int] = {}
    largest: list[tuple[int, int]] = []  # negated priorities (a max-heap), stale ones skipped
    out: list[StateBatch] = []
    open_from = -1
    winner: _Priority | None = None
    index, end = 0, len(events)
    while index < end:
        offset = events[index][0]
        if winner is not None and offset > open_from:
            _append(out, open_from, offset - 1, winner)
        while index < end and events[index][0] == offset:
            _, begins, priority = events[index]
            index += 1
            if begins:
                active[priority] = active.get(priority, 0) + 1
                heapq.heappush(largest, (-priority[0], -priority[1]))
            elif active[priority] == 1:
                del active[priority]
            else:
                active[priority] -= 1
        while largest and (-largest[0][0], -largest[0][1]) not in active:
            heapq.heappop(largest)
        winner = (-largest[0][0], -largest[0][1]) if largest else None
        open_from = offset
    return out


def _append(out: list[StateBatch], first: int, last: int, winner: _Priority) -> None:
    count, state = winner
    if out:
        tail = out[-1]
        if (
            tail.last_offset + 1 == first
            and tail.delivery_state == state
            and tail.delivery_count == count
        ):
            out[-1] = StateBatch(tail.first_offset, last, state, count)
            return
    out.append(StateBatch(first, last, state, count))
