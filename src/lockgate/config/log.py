# The per-topic settings the log layer obeys, resolved from topic overrides and broker defaults.
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000  # compacted: at most max.compaction.lag.ms
    # segment.jitter.ms: a segment rolls by time up to this much earlier (spread per segment)
    segment_jitter_ms: int = 0
    # segment.index.bytes: a segment whose offset (8 bytes an entry) or time index (12) would
    # outgrow it rolls, as Kafka's does when an index is full
    segment_index_bytes: int = 10 * 1024 * 1024
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
    # a record older than this is cleaned even below min.cleanable.dirty.ratio
    max_compaction_lag_ms: int = 2**63 - 1
    index_interval_bytes: int = 4096
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime
    # message.timestamp.before/after.max.ms: a CreateTime record further from the broker's
    # clock is refused (INVALID_TIMESTAMP)
    timestamp_before_max_ms: int = 2**63 - 1
    timestamp_after_max_ms: int = 3600 * 1000
    max_message_bytes: int = 1048588
    # a record of a compressed batch larger than this once decompressed: INVALID_RECORD
    max_decompressed_message_bytes: int = 2147483639
    # replication (cluster mode): acks=all needs this many in-sync replicas; whether a
    # replica outside the ISR may be elected leader when no ISR member is left
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    # compression.type: the codec id every appended batch is re-encoded with when it arrives
    # with another one; None ("producer") keeps each batch as its producer compressed it
    compression_codec: int | None = None
    # compression.{gzip,lz4,zstd}.level for that codec; None: the codec library's default
    compression_level: int | None = None
    # tiered storage (KIP-405): remote.storage.enable, and what stays on the local disk
    # (local.retention.ms/bytes, -2 resolved to retention.ms/bytes); remote.log.copy.disable
    # stops new copies while the remote segments stay readable
    remote_storage: bool = False
    local_retention_ms: int = 7 * 24 * 3600 * 1000
    local_retention_bytes: int = -1
    remote_copy_disabled: bool = False
    # remote.log.delete.on.disable: a topic whose remote.storage.enable was turned off with it
    # set loses its remote segments
    remote_delete_on_disable: bool = False

    def roll_jitter_ms(self, base_offset: int) -> int:
        """How much earlier than segment.ms the segment at `base_offset` rolls: Kafka draws
        it at random per segment; here it is spread by the base offset, so that a restart
        keeps it."""
        if self.segment_jitter_ms <= 0:
            return 0
        bound = min(self.segment_jitter_ms, self.segment_ms)
        return ((base_offset + 1) * 2654435761) % bound if bound > 0 else 0
