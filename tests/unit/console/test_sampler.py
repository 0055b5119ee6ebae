"""The live series' ring buffers: bounded, sampled at most once per interval however many
viewers ask, dropped when nobody has viewed them for a while; rates from counters."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from lockgate.console.sampler import Sample, Sampler, levels, rates


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def counter() -> tuple[list[int], object]:
    calls: list[int] = []

    async def measure() -> Mapping[str, float]:
        calls.append(1)
        return {"messages": 10.0 * len(calls)}

    return calls, measure


async def test_samples_at_most_once_per_interval() -> None:
    clock = Clock()
    sampler = Sampler(min_interval_s=2.0, clock=clock)
    calls, measure = counter()
    await sampler.sample("t", measure)  # type: ignore[arg-type]
    clock.now += 1.0
    await sampler.sample("t", measure)  # type: ignore[arg-type]
    assert len(calls) == 1
    clock.now += 1.5
    samples = await sampler.sample("t", measure)  # type: ignore[arg-type]
    assert len(calls) == 2 and [s.values["messages"] for s in samples] == [10.0, 20.0]


async def test_concurrent_viewers_share_one_measurement() -> None:
    sampler = Sampler(clock=Clock())
    release = asyncio.Event()
    calls: list[int] = []

    async def slow() -> Mapping[str, float]:
        calls.append(1)
        await release.wait()
        return {"messages": 1.0}

    first = asyncio.create_task(sampler.sample("t", slow))
    second = asyncio.create_task(sampler.sample("t", slow))
    await asyncio.sleep(0)
    release.set()
    assert len(await first) == 1 and len(await second) == 1 and calls == [1]


async def test_buffers_are_bounded_and_idle_keys_dropped() -> None:
    clock = Clock()
    sampler = Sampler(capacity=3, min_interval_s=0.0, idle_s=60.0, max_keys=2, clock=clock)
    _calls, measure = counter()
    for _ in range(5):
        clock.now += 1
        samples = await sampler.sample("a", measure)  # type: ignore[arg-type]
    assert len(samples) == 3
    await sampler.sample("b", measure)  # type: ignore[arg-type]
    await sampler.sample("c", measure)  # type: ignore[arg-type]
    assert "a" not in sampler and len(sampler) == 2  # the least recently viewed went first
    clock.now += 61
    await sampler.sample("d", measure)  # type: ignore[arg-type]
    assert "b" not in sampler and "c" not in sampler and "d" in sampler


async def test_a_failed_measurement_records_nothing() -> None:
    sampler = Sampler(clock=Clock())

    async def broken() -> Mapping[str, float]:
        raise OSError("down")

    with pytest.raises(OSError):
        await sampler.sample("t", broken)
    assert sampler.samples("t") == []


def test_rates_and_levels() -> None:
    samples = [
        Sample(0.0, {"messages": 0.0, "lag": 5.0}),
        Sample(2.0, {"messages": 10.0, "lag": 3.0}),
        Sample(4.0, {"messages": 4.0, "lag": 1.0}),  # truncated: no negative rate
    ]
    assert rates(samples, "messages") == [(2.0, 5.0), (4.0, 0.0)]
    assert levels(samples, "lag") == [(0.0, 5.0), (2.0, 3.0), (4.0, 1.0)]
