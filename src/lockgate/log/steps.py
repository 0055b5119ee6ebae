# log/steps.py — work done in steps: a generator that yields between pieces and returns its
# result, so that the event loop can serve others in between (a CreateTopics of thousands of
# partitions, a metrics scrape's walk of every partition). Run to its end at once, or giving
# the loop back after each piece.
from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")
Steps = Generator[None, None, T]

STEP_S = 0.010  # what a piece of stepped work may hold the event loop for


class Pace:
    """Pieces cut by time rather than by count, for work whose units cost what the file
    system makes them cost: creating a partition's files took 0.1 ms on one machine and
    2.5 ms on another, so 32 of them held the loop 3 ms or 80 ms."""

    def __init__(self, step_s: float = STEP_S) -> None:
        self.step_s = step_s
        self._began = time.perf_counter()

    def pause(self) -> Steps[None]:
        """Yields if this piece has had its time; the next one's starts when resumed."""
        if time.perf_counter() - self._began >= self.step_s:
            yield
            self._began = time.perf_counter()


def run(steps: Steps[T]) -> T:
    """The stepped work run to its end at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: T = done.value
            return result


async def run_yielding(steps: Steps[T]) -> T:
    """The stepped work run with the event loop given back after each piece; cancelled
    meanwhile, the generator is closed (its cleanup runs)."""
    try:
        while True:
            try:
                next(steps)
            except StopIteration as done:
                result: T = done.value
                return result
            await asyncio.sleep(0)
    finally:
        steps.close()
