# The follower's side of replication, pure: where a follower cuts its log after a leader change
# (KIP-101, with KIP-279's rounds), before it fetches from the new leader. The follower asks
# OffsetForLeaderEpoch for its latest epoch; the leader answers the largest epoch it has at or
# below that one and where it ended on its log. Whatever the follower has past that point was
# never acknowledged under the leader's history and goes.
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

UNDEFINED = -1


@dataclass(frozen=True, slots=True)
class Truncate:
    offset: int  # the follower's new log end offset


@dataclass(frozen=True, slots=True)
class AskAgain:
    """The follower lacks the leader's epoch: cut to where its own older epoch ends (nothing
    past it can be shared history) and ask again about that one."""

    epoch: int
    offset: int


def after_leader_answer(
    asked_epoch: int,
    leader_epoch: int,
    leader_end_offset: int,
    local_end_offset: int,
    local_epoch_end: Callable[[int], tuple[int, int]],
    high_watermark: int,
) -> Truncate | AskAgain:
    """`local_epoch_end(e)` is the follower's own (largest epoch <= e, where it ended), as
    LeaderEpochCache.end_offset_for gives it.

    - The leader has the asked epoch: cut to where it ended on the leader, if that is earlier.
    - The leader's answer is an older epoch the follower also has: cut to where either copy
      of that epoch ends, whichever is earlier.
    - The follower does not have the leader's epoch: cut to the end of its own largest epoch
      below it and ask again about that one (KIP-279), until the cut is at an epoch both know.
    - The follower has no epoch that old: the leader's end of it bounds what can be shared.
    - The leader knows no epoch that old (its log starts later): keep what the follower's
      high watermark vouches for, as Kafka did before KIP-101."""
    if leader_epoch == UNDEFINED or leader_end_offset == UNDEFINED:
        return Truncate(min(high_watermark, local_end_offset))
    if leader_epoch == asked_epoch:
        return Truncate(min(leader_end_offset, local_end_offset))
    own_epoch, own_end = local_epoch_end(leader_epoch)
    if own_epoch == leader_epoch:
        return Truncate(min(leader_end_offset, own_end, local_end_offset))
    if own_epoch == UNDEFINED:
        return Truncate(min(leader_end_offset, local_end_offset))
    return AskAgain(own_epoch, min(own_end, local_end_offset))
