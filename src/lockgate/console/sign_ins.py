# console/sign_ins.py — how often an address may try the console's password. After
# FREE_FAILURES wrong passwords in a row, each further attempt from that address must wait a
# delay that doubles with every failure, up to MAX_WAIT_S; a right password clears the count.
# Invariant: bounded memory (at most MAX_ADDRESSES addresses, the least recent forgotten first),
# so a flood of addresses cannot grow it.
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

FREE_FAILURES = 5
FIRST_WAIT_S = 1.0
MAX_WAIT_S = 60.0
MAX_ADDRESSES = 10_000


@dataclass(slots=True)
class _Failures:
    count: int
    last: float


class SignInThrottle:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures: OrderedDict[str, _Failures] = OrderedDict()

    def wait_s(self, address: str) -> float:
        """Seconds before `address` may try again (0: now)."""
        failures = self._failures.get(address)
        if failures is None or failures.count < FREE_FAILURES:
            return 0.0
        delay = min(MAX_WAIT_S, FIRST_WAIT_S * 2.0 ** (failures.count - FREE_FAILURES))
        return max(0.0, failures.last + delay - self._clock())

    def failed(self, address: str) -> None:
        failures = self._failures.pop(address, None) or _Failures(0, 0.0)
        failures.count += 1
        failures.last = self._clock()
        self._failures[address] = failures
        while len(self._failures) > MAX_ADDRESSES:
            self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)
