# The broker's wall clock in milliseconds, defined once. It lives in log/, low in the layering,
# because the log itself (retention, producer expiry) and everything above it (replication, the
# coordinators, the server) read time in the same unit; state machines take it injected as a
# `Callable[[], int]` so tests can drive time by hand.
from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the Unix epoch, as Kafka's record and state timestamps count them."""
    return int(time.time() * 1000)
