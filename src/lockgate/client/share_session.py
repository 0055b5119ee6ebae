# client/share_session.py — the pure parts of a share consumer (KIP-932) towards one broker:
# acknowledgement types and how a partition's acknowledgements become the wire's
# AcknowledgementBatches, and the share session (ShareFetch / ShareAcknowledge epochs and the
# partitions the broker's session holds). No I/O: share_consumer.py sends what these plan.
#
# Invariants:
# - A share session is keyed by (group, member) on the broker; the client only tracks its epoch:
#   0 opens a new one (the broker then expects 1), N > 0 must be the broker's expected epoch and
#   moves it to N+1 (after 2^31-1 it wraps to 1), -1 closes it. ShareFetch and ShareAcknowledge
#   draw from the same sequence, so at most one request per session is in flight.
# - A request that opens a session (epoch 0) carries no acknowledgements (the broker refuses
#   them); acknowledgements wait for the next request. ShareAcknowledge cannot open a session.
# - In an incremental request (epoch > 0) Topics lists only partitions the session does not hold
#   yet, plus partitions that carry acknowledgements; a partition listed only for its
#   acknowledgements and not wanted is also listed as forgotten, so that the session does not
#   start fetching it (listing a partition adds it to the session).
# - The session's partition set changes only when the broker answered without a top-level
#   error; a session error or a broken connection resets to epoch 0 with no partitions.
# - Acknowledgements of one partition go out as ascending, non-overlapping batches, one per
#   contiguous run of offsets, with a single type when the run has one type and one type per
#   offset otherwise.
from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1


class AcknowledgeType(enum.IntEnum):
    """What the consumer says about a delivered record (KIP-932; RENEW is KIP-1222)."""

    GAP = 0  # wire only: the offset held no record for the consumer (control record, compacted)
    ACCEPT = 1  # processed: never delivered again
    RELEASE = 2  # give it back: delivered again (to anyone), its delivery count kept
    REJECT = 3  # unprocessable: never delivered again (archived)
    RENEW = 4  # keep it: restart the acquisition lock (ShareFetch/ShareAcknowledge v2)


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One AcknowledgementBatch: offsets first..last, and one type for all of them or one
    type per offset."""

    first_offset: int
    last_offset: int
    types: tuple[AcknowledgeType, ...]

    def wire(self) -> dict[str, Any]:
        return {
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "acknowledge_types": [int(t) for t in self.types],
        }


def ack_batches(acks: Mapping[int, AcknowledgeType]) -> list[AckBatch]:
    """offset → type for one partition → the AcknowledgementBatches that say the same."""
    batches: list[AckBatch] = []
    run: list[tuple[int, AcknowledgeType]] = []

    def close_run() -> None:
        types = tuple(t for _offset, t in run)
        uniform = all(t == types[0] for t in types)
        batches.append(AckBatch(run[0][0], run[-1][0], types[:1] if uniform else types))

    for offset in sorted(acks):
        if run and offset != run[-1][0] + 1:
            close_run()
            run = []
        run.append((offset, acks[offset]))
    if run:
        close_run()
    return batches


def batches_offsets(batches: Iterable[AckBatch]) -> dict[int, AcknowledgeType]:
    """The inverse of ack_batches (for tests and for putting acknowledgements back)."""
    result: dict[int, AcknowledgeType] = {}
    for batch in batches:
        count = batch.last_offset - batch.first_offset + 1
        types = batch.types if len(batch.types) == count else batch.types * count
        for index, kind in enumerate(types):
            result[batch.first_offset + index] = kind
    return result


def next_epoch(epoch: int) -> int:
    """The epoch after a successful request under `epoch` (0 → 1, wrapping to 1)."""
    return 1 if epoch >= MAX_EPOCH or epoch < 0 else epoch + 1


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """One ShareFetch's session part: the epoch, the partitions listed in Topics (each with the
    acknowledgements it carries, maybe none) and the forgotten ones."""

    epoch: int
    topics: Mapping[TopicIdPartition, tuple[AckBatch, ...]]
    forgotten: frozenset[TopicIdPartition]

    @property
    def acknowledged(self) -> frozenset[TopicIdPartition]:
        return frozenset(p for p, batches in self.topics.items() if batches)

    def wire(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(topics, forgotten_topics_data) in kio's request shape."""
        topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
        for p in sorted(self.topics):
            topics.setdefault(p.topic_id, []).append(
                {
                    "partition_index": p.partition,
                    "acknowledgement_batches": [b.wire() for b in self.topics[p]],
                }
            )
        forgotten: dict[uuid.UUID, list[int]] = {}
        for p in sorted(self.forgotten):
            forgotten.setdefault(p.topic_id, []).append(p.partition)
        return (
            [{"topic_id": t, "partitions": parts} for t, parts in topics.items()],
            [{"topic_id": t, "partitions": parts} for t, parts in forgotten.items()],
        )


def acknowledge_wire(acks: Mapping[TopicIdPartition, Iterable[AckBatch]]) -> list[dict[str, Any]]:
    """ShareAcknowledge's Topics."""
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for p in sorted(acks):
        topics.setdefault(p.topic_id, []).append(
            {
                "partition_index": p.partition,
                "acknowledgement_batches": [b.wire() for b in acks[p]],
            }
        )
    return [{"topic_id": t, "partitions": parts} for t, parts in topics.items()]


@dataclass(slots=True)
class ShareSession:
    """The client's side of one broker's share session."""

    epoch: int = INITIAL_EPOCH
    partitions: frozenset[TopicIdPartition] = field(default_factory=frozenset)

    @property
    def open(self) -> bool:
        """Whether the broker holds a session for us (acknowledgements may be sent)."""
        return self.epoch > INITIAL_EPOCH

    def plan_fetch(
        self,
        wanted: Iterable[TopicIdPartition],
        acks: Mapping[TopicIdPartition, Iterable[AckBatch]],
    ) -> FetchPlan:
        """The next ShareFetch for fetching `wanted` and carrying `acks` (ignored, to be kept by
        the caller, when the request opens the session: see plan.acknowledged)."""
        want = frozenset(wanted)
        if not self.open:
            return FetchPlan(INITIAL_EPOCH, {p: () for p in sorted(want)}, frozenset())
        carried = {p: tuple(batches) for p, batches in acks.items()}
        carried = {p: batches for p, batches in carried.items() if batches}
        listed = sorted((want - self.partitions) | carried.keys())
        forgotten = (self.partitions - want) | (carried.keys() - want)
        return FetchPlan(self.epoch, {p: carried.get(p, ()) for p in listed}, forgotten)

    def fetched(self, plan: FetchPlan) -> None:
        """The broker answered `plan` without a top-level error."""
        held = frozenset() if plan.epoch == INITIAL_EPOCH else self.partitions
        self.partitions = (held | frozenset(plan.topics)) - plan.forgotten
        self.epoch = next_epoch(plan.epoch)

    def plan_acknowledge(self) -> int | None:
        """The epoch of a ShareAcknowledge now, or None without a session (it cannot open
        one)."""
        return self.epoch if self.open else None

    def acknowledged(self, epoch: int) -> None:
        """The broker answered a ShareAcknowledge sent under `epoch` without a top-level error."""
        if epoch == FINAL_EPOCH:
            self.reset()
        else:
            self.epoch = next_epoch(epoch)

    def reset(self) -> None:
        """A session error, a closed session or a broken connection: the next request opens a
        new session."""
        self.epoch = INITIAL_EPOCH
        self.partitions = frozenset()
