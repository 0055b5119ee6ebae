# The order of one producer's batches to one partition when some of them cannot be appended at
# once: a transactional batch waiting for its transaction coordinator (another broker's answer,
# or the previous transaction's markers) is appended later, and every later batch of that
# producer to that partition waits behind it, so the partition sees them in arrival order
# (their sequences would otherwise be out of order). Batches with nothing waiting ahead of them
# are appended synchronously and never pass through here.
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

# (topic, partition, producer id)
AppendKey = tuple[str, int, int]


class AppendOrder:
    def __init__(self) -> None:
        self._tails: dict[AppendKey, asyncio.Task[Any]] = {}

    def waiting(self, key: AppendKey) -> bool:
        """Whether a batch of this (topic, partition, producer id) is still waiting."""
        return key in self._tails

    def in_order(self, key: AppendKey, step: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """Runs `step` once the earlier steps of `key` have finished."""
        previous = self._tails.get(key)

        async def run() -> T:
            if previous is not None:
                await asyncio.wait({previous})
            return await step()

        task = asyncio.get_running_loop().create_task(run())
        self._tails[key] = task
        task.add_done_callback(lambda done: self._release(key, done))
        return task

    def _release(self, key: AppendKey, task: asyncio.Task[Any]) -> None:
        if self._tails.get(key) is task:
            del self._tails[key]
