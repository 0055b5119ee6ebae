# client/partitioner.py — choosing a partition for a record: murmur2 of the key exactly as
# Kafka's Java client (Utils.murmur2 + toPositive) and librdkafka's murmur2/murmur2_random
# partitioners compute it, so that a key lands on the same partition whichever client wrote it;
# round robin for records without a key.
from __future__ import annotations

import itertools
from collections.abc import Iterator

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


# Keys repeat: the producer's fast path (both twins) remembers up to this many keys' partitions.
KEY_CACHE_SIZE = 16_384


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed int
    like Java's. The tail switch reads bytes at length & ~3, which is what the Java code's
    fall-through cases do."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    body_end = length & ~3
    for i in range(0, body_end, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    remaining = length & 3
    if remaining == 3:
        h ^= data[body_end + 2] << 16
    if remaining >= 2:
        h ^= data[body_end + 1] << 8
    if remaining >= 1:
        h ^= data[body_end]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Java's Utils.toPositive: clears the sign bit (not abs(), which differs for MIN_VALUE)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition the Java client's default partitioner (and librdkafka's murmur2 ones)
    picks for a non-null key."""
    if partition_count <= 0:
        raise ValueError(f"a topic with {partition_count} partitions")
    return to_positive(murmur2(key)) % partition_count


class DefaultPartitioner:
    """Keyed records: murmur2. Records without a key: round robin per topic (the counter is
    per topic so that topics do not skew each other's spread)."""

    def __init__(self) -> None:
        self._counters: dict[str, Iterator[int]] = {}

    def __call__(self, topic: str, key: bytes | None, partition_count: int) -> int:
        # The producer partitions in its fast path and uses only counter(); this is for callers.
        if key is not None:
            return partition_for_key(key, partition_count)
        return next(self.counter(topic)) % partition_count

    def counter(self, topic: str) -> Iterator[int]:
        """The topic's round-robin counter (shared with the producer's fast path)."""
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._counters[topic] = itertools.count()
        return counter
