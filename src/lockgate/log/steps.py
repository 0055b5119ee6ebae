# log/steps.py — work done in steps: a generator that yields between pieces and returns its
# result, so that the event loop can serve others in between (a CreateTopics of thousands of
# partitions, a metrics scrape's walk of every partition). Run to its end at once, or giving
# the loop back after each piece.
from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")
Steps = Generator[None, None, T]


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
