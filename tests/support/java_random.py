# java.util.Random's bounded draws and Collections.shuffle, over the generator of Kafka's test
# MockRandom, so that lockgate's placement (cluster/controller.py) can be fed the very draws
# Kafka's StripedReplicaPlacer gets in Kafka's tests and in the reference parity test.
from __future__ import annotations

from collections.abc import MutableSequence
from typing import Any

MASK64 = (1 << 64) - 1
MULTIPLIER = 2862933555777941757
INCREMENT = 3037000493


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


class JavaRandom:
    """state = state * 2862933555777941757 + 3037000493 (mod 2^64) at each draw, next(bits)
    the top `bits` bits of the state as a Java int (Kafka's MockRandom; 17 is its seed)."""

    def __init__(self, state: int = 17) -> None:
        self.state = state & MASK64

    def _next(self, bits: int) -> int:
        self.state = (self.state * MULTIPLIER + INCREMENT) & MASK64
        return _int32(self.state >> (64 - bits))

    def randrange(self, bound: int, /) -> int:
        """Random.nextInt(bound): a power of two takes the high bits, any other bound
        rejects the draws that would favour low values (Java's int overflow test)."""
        r = self._next(31)
        m = bound - 1
        if bound & m == 0:
            return _int32((bound * r) >> 31)
        u = r
        while True:
            r = u % bound
            if _int32(u - r + m) >= 0:
                return r
            u = self._next(31)

    def shuffle(self, x: MutableSequence[Any], /) -> None:
        """Collections.shuffle(list, random): from the end, each place swapped with a
        random earlier one (or itself)."""
        for i in range(len(x), 1, -1):
            j = self.randrange(i)
            x[i - 1], x[j] = x[j], x[i - 1]
