# Tiered storage's counters, fed by the copier, the deletes and the remote reads, read by the
# broker's metrics (server/metrics.py) at each scrape.
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TieredStats:
    """Counters for the metrics (Kafka's RemoteCopy*/RemoteFetch*/RemoteDelete* meters)."""

    copied_segments: int = 0
    copied_bytes: int = 0
    copy_errors: int = 0
    deleted_segments: int = 0
    delete_errors: int = 0
    fetch_requests: int = 0
    fetch_bytes: int = 0
    fetch_errors: int = 0
