"""Stepped work: run to its end at once or with the event loop given back after each piece
(cancelled, the generator's cleanup runs), and pieces cut by time."""

from __future__ import annotations

import asyncio

import pytest

from lockgate.log.steps import Pace, Steps, run, run_yielding


def counting(pieces: int, log: list[str]) -> Steps[int]:
    try:
        for piece in range(pieces):
            log.append(f"piece {piece}")
            yield
        return pieces
    finally:
        log.append("cleanup")


def test_run_does_every_piece_at_once() -> None:
    log: list[str] = []
    assert run(counting(2, log)) == 2
    assert log == ["piece 0", "piece 1", "cleanup"]


async def test_run_yielding_serves_others_between_pieces_and_cleans_up_when_cancelled() -> None:
    log: list[str] = []

    async def other() -> None:
        log.append("other")

    both = asyncio.gather(run_yielding(counting(2, log)), other())
    assert (await both)[0] == 2
    assert log.index("other") < log.index("piece 1")
    log.clear()
    task = asyncio.ensure_future(run_yielding(counting(1_000_000, log)))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log[-1] == "cleanup" and len(log) < 10


def test_a_pace_yields_once_a_piece_had_its_time() -> None:
    def paced(step_s: float, units: int) -> Steps[None]:
        pace = Pace(step_s)
        for _ in range(units):
            yield from pace.pause()

    assert sum(1 for _ in paced(0, 3)) == 3  # no time: a piece a unit
    assert sum(1 for _ in paced(3600, 1000)) == 0  # all of it in one piece
