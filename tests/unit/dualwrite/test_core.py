"""The dual writers' shared steps (lockgate.dualwrite.core) are generators that yield the calls
to make: the blocking driver makes them, the asyncio driver awaits them. Both must hand each
step the call's result, throw a call's exception in at the yield (so that the step's own
try/except decides), run a step's finally, and return what the step returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lockgate.dualwrite.core import Steps, run_async, run_blocking

Factory = Callable[[str], Callable[[], Any]]


class Refused(Exception):
    pass


def blocking(made: list[str]) -> Factory:
    """Calls that note their name, fail when it ends in -fails, and return it with a '!'."""

    def call_for(name: str) -> Callable[[], str]:
        def call() -> str:
            made.append(name)
            if name.endswith("-fails"):
                raise Refused(name)
            return name + "!"

        return call

    return call_for


def asynchronous(made: list[str]) -> Factory:
    """The same calls as coroutine functions, as the asyncio writer's are."""

    def call_for(name: str) -> Callable[[], Any]:
        call = blocking(made)(name)

        async def awaitable() -> Any:
            return call()

        return awaitable

    return call_for


def failing_recipe(call: Factory, results: list[Any]) -> Steps[None]:
    """The shapes the writers' steps use: a result used later, a handled failure, an unhandled
    one re-raised after a clean-up call, and a finally that makes a call."""
    try:
        results.append((yield call("first")))
        try:
            yield call("second-fails")
        except Refused:
            yield call("handled")
        try:
            yield call("third-fails")
        except Refused:
            yield call("clean-up")
            raise
    finally:
        yield call("finally")


def returning_recipe(call: Factory) -> Steps[int]:
    first = yield call("a")
    second = yield call("bc")
    return len(first) + len(second)


MADE = ["first", "second-fails", "handled", "third-fails", "clean-up", "finally"]


def test_the_blocking_driver() -> None:
    made: list[str] = []
    results: list[Any] = []
    with pytest.raises(Refused, match="third-fails"):
        run_blocking(failing_recipe(blocking(made), results))
    assert made == MADE and results == ["first!"]
    assert run_blocking(returning_recipe(blocking([]))) == 5


async def test_the_asyncio_driver_awaits_each_call_and_decides_the_same() -> None:
    made: list[str] = []
    results: list[Any] = []
    with pytest.raises(Refused, match="third-fails"):
        await run_async(failing_recipe(asynchronous(made), results))
    assert made == MADE and results == ["first!"]
    assert await run_async(returning_recipe(asynchronous([]))) == 5
