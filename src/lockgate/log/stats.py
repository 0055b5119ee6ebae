# Cheap statistics for hot paths: a cumulative histogram that the Prometheus collector reads at
# scrape time. It is only touched from the event loop that owns the broker, so it takes no
# lock (prometheus_client's own metrics lock on every increment and resolve labels per call,
# which costs more than the work measured on the produce path). Counts only grow.
from __future__ import annotations

import bisect
from collections.abc import Sequence

# Latency in seconds: from half a millisecond (a cached fetch) to ten seconds (a long poll).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
)  # fmt: skip
# Sizes (partitions in one group commit, ...): powers of two up to 1024.
SIZE_BUCKETS: tuple[float, ...] = tuple(float(1 << n) for n in range(11))


class Histogram:
    """Per-bucket counts (not cumulative until exported) and the sum of observations."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus's buckets: (upper bound, observations at or below it), +Inf last."""
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else _bound(bound), running))
        return buckets


def _bound(value: float) -> str:
    return repr(float(value))
