# client/loop_thread.py — an asyncio event loop in a daemon thread, for the blocking facades:
# the caller's thread submits coroutines and waits for them with a bound; only the loop's thread
# touches the asyncio objects.
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from lockgate.client.errors import KafkaError, KafkaTimeoutError

T = TypeVar("T")


class _Startable(Protocol):
    async def start(self) -> None: ...


C = TypeVar("C", bound=_Startable)
# Seconds added to a call's own timeout before the caller stops waiting for the loop.
GRACE_SECONDS = 5.0


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self.stopped = False

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None) -> T:
        """Runs the coroutine on the loop; KafkaTimeoutError (and the coroutine cancelled)
        if it takes more than `timeout` plus a grace period."""
        if self.stopped:
            coroutine.close()
            raise KafkaError("the client is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(None if timeout is None else timeout + GRACE_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise KafkaTimeoutError(f"no answer within {timeout} s") from None

    def start_client(self, make: Callable[[], C], timeout: float | None) -> C:
        """Makes an asyncio client on the loop's thread (its events belong to that loop) and
        starts it; if either fails, the thread stops too and the error goes to the caller (a
        facade's constructor that then has nothing to close)."""

        async def started() -> C:
            client = make()
            await client.start()
            return client

        try:
            return self.run(started(), timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self.stopped = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()
