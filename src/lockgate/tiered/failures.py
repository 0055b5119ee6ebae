# The log lines of tiered storage's failures: a pass runs every few hundred milliseconds and a
# consumer retries its fetch at once, so a failure that goes on (the object store down) must
# not write a line each time: a warning when it begins, again at most every REPEAT_LOG_MS while
# it goes on, and one line when it ends.
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from lockgate.log.partition import Partition

log = logging.getLogger(__name__)

REPEAT_LOG_MS = 60_000  # a failure that goes on is logged again at most this often


@dataclass(slots=True)
class _Failing:
    first_ms: int
    logged_ms: int
    count: int = 1


class FailureLog:
    """The log lines of a failure that repeats on every pass or fetch: a warning when it
    begins, again at most every REPEAT_LOG_MS while it goes on, and one line when it ends."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self._failing: dict[tuple[str, str, int], _Failing] = {}

    def failed(self, what: str, partition: Partition, error: BaseException) -> None:
        key = (what, partition.topic, partition.index)
        now = self.clock()
        failing = self._failing.get(key)
        if failing is None:
            self._failing[key] = _Failing(now, now)
            log.warning("%s-%d: %s failed (retried until the object store answers): %s",
                        partition.topic, partition.index, what, error)  # fmt: skip
            return
        failing.count += 1
        if now - failing.logged_ms >= REPEAT_LOG_MS:
            failing.logged_ms = now
            log.warning("%s-%d: %s still failing (%d times in %d s): %s", partition.topic,
                        partition.index, what, failing.count, (now - failing.first_ms) // 1000,
                        error)  # fmt: skip

    def succeeded(self, what: str, partition: Partition) -> None:
        failing = self._failing.pop((what, partition.topic, partition.index), None)
        if failing is not None:
            log.info("%s-%d: %s works again (after %d failures in %d s)", partition.topic,
                     partition.index, what, failing.count,
                     (self.clock() - failing.first_ms) // 1000)  # fmt: skip
