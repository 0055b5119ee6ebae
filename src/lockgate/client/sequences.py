# client/sequences.py — the idempotent producer's bookkeeping, sans-IO: sequence numbers per
# partition, which batches may be in flight, and what each Produce error means for a batch.
#
# Invariants:
# - Sequences of one partition are handed out contiguously, in the order batches are sent for
#   the first time; a resent batch keeps its sequence until the sequences are reset (an epoch
#   bump), when every unacknowledged batch is numbered again from 0 in its original order.
# - A sequence never wraps (KAFKA-12207): a batch that would go past the overflow threshold
#   waits for an epoch bump, after which the partition starts at 0 again.
# - The unacknowledged sequences of a partition span at most DUPLICATE_WINDOW + 1 numbers, and
#   at most MAX_IN_FLIGHT batches: lockgate's broker keeps only the latest batch per producer
#   and recognises a resend up to 1000 sequences behind it (answered with the original
#   offset while the batch is in its log, else DUPLICATE_SEQUENCE_NUMBER), so a resend of
#   any unacknowledged batch is recognised as a duplicate rather than taken for a gap.
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from lockgate.client.errors import ErrorCode

# The largest sequence number a batch may carry; past it the producer bumps its epoch.
SEQUENCE_LIMIT = (1 << 31) - 1
# Kafka's limit for idempotent producers (the broker remembered five batches before KAFKA-12207).
MAX_IN_FLIGHT = 5
# How far behind the latest sequence lockgate's broker still recognises a duplicate.
DUPLICATE_WINDOW = 1000


@dataclass(slots=True)
class PartitionSequences:
    """Sequence numbers of one partition for the current producer id and epoch."""

    next_sequence: int = 0
    last_acknowledged: int = -1
    # (base sequence, record count) of every batch numbered but not yet acknowledged, in order.
    unacknowledged: deque[tuple[int, int]] = field(default_factory=deque)

    def fits(self, count: int, threshold: int = SEQUENCE_LIMIT) -> bool:
        """Whether a batch of `count` records can be numbered without passing `threshold`."""
        return self.next_sequence + count - 1 <= threshold

    def within_window(self, count: int, window: int = DUPLICATE_WINDOW) -> bool:
        """Whether numbering a batch of `count` records keeps the unacknowledged span within
        the broker's duplicate window. A partition with nothing unacknowledged always may."""
        if not self.unacknowledged:
            return True
        oldest = self.unacknowledged[0][0]
        return self.next_sequence + count - 1 - oldest <= window

    def assign(self, count: int) -> int:
        """Numbers the next batch; returns its base sequence."""
        if count <= 0:
            raise ValueError("a batch has at least one record")
        base = self.next_sequence
        self.next_sequence += count
        self.unacknowledged.append((base, count))
        return base

    def acknowledge(self, base: int) -> None:
        """The broker has the batch starting at `base` (appended, or a duplicate)."""
        for entry in self.unacknowledged:
            if entry[0] == base:
                self.unacknowledged.remove(entry)
                self.last_acknowledged = max(self.last_acknowledged, base + entry[1] - 1)
                return
        raise KeyError(f"no unacknowledged batch starts at sequence {base}")

    def forget(self, base: int) -> None:
        """The batch starting at `base` failed for good: its sequences leave a gap that only
        an epoch bump closes (the caller bumps)."""
        for entry in self.unacknowledged:
            if entry[0] == base:
                self.unacknowledged.remove(entry)
                return

    def is_next_expected(self, base: int) -> bool:
        """Whether the broker, knowing every acknowledged batch, should accept `base` next.
        An OUT_OF_ORDER_SEQUENCE_NUMBER for such a batch means the broker lost state; for a
        later batch it only means an earlier one has not arrived yet."""
        return base == self.last_acknowledged + 1

    def reset(self) -> None:
        """A new producer id or epoch: sequences start at 0 again."""
        self.next_sequence = 0
        self.last_acknowledged = -1
        self.unacknowledged.clear()


class Outcome(enum.Enum):
    """What a Produce answer means for one batch."""

    DELIVERED = "delivered"  # appended, or DUPLICATE_SEQUENCE_NUMBER: appended before
    RETRY = "retry"  # resend the batch, keeping its sequence
    REFRESH_AND_RETRY = "refresh"  # stale metadata (leader, leader epoch): refresh, resend
    RESET_SEQUENCES = "reset"  # the broker lost our state: bump the epoch, renumber, resend
    ABORTABLE = "abortable"  # the open transaction can only be aborted
    FATAL = "fatal"  # another producer fenced this one: it must not be used any more
    FAILED = "failed"  # this batch fails for good (too large, corrupt...)


STALE_METADATA = frozenset(
    {
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
    }
)
SEQUENCE_TROUBLE = frozenset(
    {ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id}
)
FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced})


def classify(
    code: int | ErrorCode, *, idempotent: bool, transactional: bool, next_expected: bool
) -> Outcome:
    """The outcome of a Produce partition answer. `next_expected`: the batch is the one the
    broker should accept next (PartitionSequences.is_next_expected)."""
    try:
        error = ErrorCode(code)
    except ValueError:
        return Outcome.ABORTABLE if transactional else Outcome.FAILED
    if error == ErrorCode.none:
        return Outcome.DELIVERED
    if idempotent and error == ErrorCode.duplicate_sequence_number:
        return Outcome.DELIVERED
    if error in STALE_METADATA:
        return Outcome.REFRESH_AND_RETRY
    if idempotent and error in SEQUENCE_TROUBLE:
        if not next_expected:
            return Outcome.RETRY  # an earlier batch failed and will be resent first
        return Outcome.ABORTABLE if transactional else Outcome.RESET_SEQUENCES
    if idempotent and error in FENCED:
        # A transactional producer was fenced by a newer instance; an idempotent one only
        # sees this for batches of an epoch it has left behind: it renumbers them.
        return Outcome.FATAL if transactional else Outcome.RESET_SEQUENCES
    if transactional and error in (ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state):
        return Outcome.ABORTABLE
    if error.retriable:
        return Outcome.RETRY
    return Outcome.ABORTABLE if transactional else Outcome.FAILED
