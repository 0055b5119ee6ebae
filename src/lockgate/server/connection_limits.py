# Limits on what clients may make the broker hold: how many connections (in all and per
# address, Kafka's max.connections, max.connections.per.ip and its overrides) and how many bytes
# of requests being read or waiting to be handled (Kafka's queued.max.request.bytes).
#
# Invariants: `ConnectionLimits.open` counts exactly the admitted connections not yet released;
# `RequestMemory.used` is the sum of reservations not yet released and never passes the
# capacity, except for one request larger than the whole capacity, which may run alone.
from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque

from lockgate.config.properties import BrokerConfig, ConfigError

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_S = 10.0


def parse_overrides(text: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: "host:count,host:count"."""
    overrides: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, _, count = item.rpartition(":")
        if not host or not count.strip().lstrip("-").isdigit():
            raise ConfigError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        overrides[host.strip().strip("[]")] = int(count)
    return overrides


class ConnectionLimits:
    def __init__(self, config: BrokerConfig) -> None:
        self.max_total = config.integer("max.connections")
        self.max_per_ip = config.integer("max.connections.per.ip")
        self.overrides = parse_overrides(config.get("max.connections.per.ip.overrides"))
        self.open = 0
        self.by_address: Counter[str] = Counter()
        self.refused = 0
        self._last_report = -REFUSAL_LOG_INTERVAL_S
        self._unreported = 0

    def admit(self, address: str) -> bool:
        """Counts a new connection from `address` in, or refuses it (False, logged)."""
        allowed = self.overrides.get(address, self.max_per_ip)
        if self.by_address[address] >= allowed:
            self._refuse(f"{address} already has {allowed} (max.connections.per.ip)")
            return False
        if self.open >= self.max_total:
            self._refuse(f"the broker already has {self.open} (max.connections)")
            return False
        self.open += 1
        self.by_address[address] += 1
        return True

    def release(self, address: str) -> None:
        self.open -= 1
        self.by_address[address] -= 1
        if not self.by_address[address]:
            del self.by_address[address]

    def _refuse(self, why: str) -> None:
        # one line, then at most one per interval: a client retrying in a loop must not flood
        self.refused += 1
        now = time.monotonic()
        if now - self._last_report < REFUSAL_LOG_INTERVAL_S:
            self._unreported += 1
            return
        log.warning(
            "refused a connection: %s connections already (%d more refused since the last report)",
            why,
            self._unreported,
        )
        self._last_report = now
        self._unreported = 0


class RequestMemory:
    """Bytes reserved for requests before their bodies are read: a connection whose next
    frame does not fit waits (and stops reading: the socket's buffers fill and its client
    blocks) until handled requests give memory back. Capacity <= 0: unlimited."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self, size: int) -> None:
        if self.capacity <= 0:
            return
        while self.used and self.used + size > self.capacity:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.used += size

    def release(self, size: int) -> None:
        if self.capacity <= 0:
            return
        self.used -= size
        while self._waiters:  # each re-checks; the ones that still do not fit wait again
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
