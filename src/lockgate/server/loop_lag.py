# The event loop's lag: how late a timer fires after the moment it was due. A broker runs on one
# event loop, so anything that holds it (a long encode, a scan of every partition, a scrape)
# delays every request on every connection by as much. The probe wakes every INTERVAL_S and
# records how late it woke: a histogram and the worst lag for the metrics, and a count of
# stalls (a lag of STALL_S or more), logged at most once per LOG_EVERY_S so a slow spell is one
# line, not hundreds. It runs only while metrics are on (lockgate.metrics.port): ~100 wake-ups
# a second are cheap but not free.
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from lockgate.log.stats import LATENCY_BUCKETS, Histogram

log = logging.getLogger(__name__)

INTERVAL_S = 0.01  # a stall of D shows as a lag of at least D - INTERVAL_S
STALL_S = 0.05  # what counts as a stall: Kafka's clients see it as latency
LOG_EVERY_S = 10.0


class LoopLagProbe:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.lag = Histogram(LATENCY_BUCKETS)
        self.worst_s = 0.0
        # the loop thread's CPU time between two wake-ups: what the broker's own work held the
        # loop for, whatever else the machine runs (a lag beyond it is time spent waiting for
        # a core, or for the interpreter lock a worker thread held)
        self.hold = Histogram(LATENCY_BUCKETS)
        self.worst_hold_s = 0.0
        self.stalls = 0
        self._logged_at = -LOG_EVERY_S
        self._unlogged = 0  # stalls since the last line

    async def run(self) -> None:
        cpu = self.cpu_clock()
        while True:
            due = self.clock() + INTERVAL_S
            await asyncio.sleep(INTERVAL_S)
            lag = max(self.clock() - due, 0.0)
            cpu, previous = self.cpu_clock(), cpu
            self.observe(lag, cpu - previous)

    def observe(self, lag_s: float, hold_s: float = 0.0) -> None:
        self.lag.observe(lag_s)
        self.worst_s = max(self.worst_s, lag_s)
        self.hold.observe(hold_s)
        self.worst_hold_s = max(self.worst_hold_s, hold_s)
        if lag_s < STALL_S:
            return
        self.stalls += 1
        self._unlogged += 1
        now = self.clock()
        if now - self._logged_at >= LOG_EVERY_S:
            others = (
                f" ({self._unlogged - 1} more since the last report)" if self._unlogged > 1 else ""
            )
            log.warning(
                "event loop stalled for %.0f ms, %.0f ms of it the loop's own work%s",
                lag_s * 1000,
                min(hold_s, lag_s + INTERVAL_S) * 1000,
                others,
            )
            self._logged_at = now
            self._unlogged = 0
