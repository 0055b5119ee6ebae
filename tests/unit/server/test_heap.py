"""The heap keeper: what a start made and what survives a full collection is frozen, so the
next full pass walks only what is new; every UNFREEZE_EVERY_S it all goes back, so that
frozen objects that became cyclic garbage are reclaimed; a stopped keeper leaves nothing
frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from lockgate.server.heap import HeapKeeper


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> Node:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a


@pytest.fixture
def now() -> Iterator[list[float]]:
    clock = [100.0]
    yield clock
    gc.unfreeze()


def test_a_start_freezes_what_exists_and_a_stop_unfreezes_it(now: list[float]) -> None:
    keeper = HeapKeeper(clock=lambda: now[0], unfreeze_every_s=60)
    kept = [cycle() for _ in range(100)]
    keeper.start()
    assert gc.get_freeze_count() >= len(kept) * 2
    keeper.stop()
    assert gc.get_freeze_count() == 0
    assert keeper._after_collection not in gc.callbacks


def test_survivors_of_a_full_collection_are_frozen_and_only_they(now: list[float]) -> None:
    keeper = HeapKeeper(clock=lambda: now[0], unfreeze_every_s=60)
    keeper.start()
    try:
        frozen = gc.get_freeze_count()
        kept = [cycle() for _ in range(1000)]
        for _ in range(1000):
            cycle()  # garbage: reclaimed by the full pass, never frozen
        gc.collect()
        grown = gc.get_freeze_count() - frozen
        assert len(kept) * 2 <= grown < len(kept) * 3
    finally:
        keeper.stop()


def test_the_frozen_objects_go_back_every_so_often(now: list[float]) -> None:
    keeper = HeapKeeper(clock=lambda: now[0], unfreeze_every_s=60)
    keeper.start()
    try:
        assert gc.get_freeze_count() > 0
        now[0] += 30
        gc.collect()
        assert gc.get_freeze_count() > 0
        now[0] += 31  # a full pass after the interval unfreezes: cyclic garbage among them
        gc.collect()  # is reclaimed by the next one
        assert gc.get_freeze_count() == 0
        gc.collect()  # and that one's survivors are frozen again
        assert gc.get_freeze_count() > 0
    finally:
        keeper.stop()
