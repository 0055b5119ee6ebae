# The per-topic settings the log layer obeys, resolved from topic overrides and broker defaults.
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    # cleanup.policy: "delete" (retention applies) and/or "compact" (the cleaner keeps the
    # latest record per key). The internal topics are compact only, whatever is configured:
    # their records are the coordinators' state (a group's offsets, a prepared transaction)
    # however old they are.
    delete_policy: bool = True
    compact: bool = False
    delete_retention_ms: int = 24 * 3600 * 1000  # how long tombstones and empty markers stay
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    index_interval_bytes: int = 4096
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime
    max_message_bytes: int = 1048588
    # replication (cluster mode): acks=all needs this many in-sync replicas; whether a
    # replica outside the ISR may be elected leader when no ISR member is left
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    # compression.type: the codec id every appended batch is re-encoded with when it arrives
    # with another one; None ("producer") keeps each batch as its producer compressed it
    compression_codec: int | None = None
