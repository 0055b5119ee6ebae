# console/sampler.py — live series sampled on demand: for each key (a topic, a group) a bounded
# ring buffer of samples, taken while a page showing it is viewed (its refresh asks) and at
# most once per `min_interval_s` however many browsers ask; a key nobody asked about for
# `idle_s` is dropped, and at most `max_keys` are kept (the least recently viewed go first),
# so memory stays bounded whatever is browsed. Values are cumulative counters (end offsets,
# bytes); `rates` turns two neighbours into a per-second rate.
from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # the sampler's clock (monotonic seconds)
    values: Mapping[str, float]


@dataclass(slots=True)
class _Series:
    samples: deque[Sample]
    viewed_at: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


Measure = Callable[[], Awaitable[Mapping[str, float]]]


class Sampler:
    def __init__(
        self,
        *,
        capacity: int = 120,
        min_interval_s: float = 2.0,
        idle_s: float = 120.0,
        max_keys: int = 200,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity = capacity
        self.min_interval_s = min_interval_s
        self.idle_s = idle_s
        self.max_keys = max_keys
        self.clock = clock
        self._series: OrderedDict[str, _Series] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._series

    def __len__(self) -> int:
        return len(self._series)

    async def sample(self, key: str, measure: Measure) -> list[Sample]:
        """The key's samples after taking a new one if the last is older than min_interval_s
        (`measure` is awaited then; if it raises, nothing is recorded)."""
        now = self.clock()
        self._evict(now)
        series = self._series.get(key)
        if series is None:
            series = _Series(deque(maxlen=self.capacity), now)
            self._series[key] = series
            while len(self._series) > self.max_keys:
                self._series.popitem(last=False)
        series.viewed_at = now
        self._series.move_to_end(key)
        async with series.lock:  # two viewers at once: one measures, the other reuses it
            last = series.samples[-1] if series.samples else None
            if last is None or self.clock() - last.at >= self.min_interval_s:
                values = await measure()
                series.samples.append(Sample(self.clock(), dict(values)))
        return list(series.samples)

    def samples(self, key: str) -> list[Sample]:
        series = self._series.get(key)
        return [] if series is None else list(series.samples)

    def _evict(self, now: float) -> None:
        stale = [key for key, s in self._series.items() if now - s.viewed_at > self.idle_s]
        for key in stale:
            del self._series[key]


def rates(samples: list[Sample], name: str) -> list[tuple[float, float]]:
    """(time, per-second increase of `name`) between neighbouring samples; a counter that went
    down (records deleted, a partition's log truncated) counts as no increase."""
    points = []
    for before, after in itertools.pairwise(samples):
        elapsed = after.at - before.at
        if elapsed <= 0 or name not in before.values or name not in after.values:
            continue
        points.append((after.at, max(0.0, after.values[name] - before.values[name]) / elapsed))
    return points


def levels(samples: list[Sample], name: str) -> list[tuple[float, float]]:
    """(time, value of `name`): a gauge such as a group's lag, as sampled."""
    return [(s.at, s.values[name]) for s in samples if name in s.values]
