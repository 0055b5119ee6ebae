# The remote part of one partition's log, in memory: its copied segments in offset order
# (rebuilt from the manifests in the object store whenever this broker starts leading the
# partition). Pure: the manager (manager.py) does the I/O and tells it what happened.
#
# Invariants: segments are sorted by base offset and do not overlap (a manifest whose range
# overlaps one already held, from a copy repeated after a crash or by a deposed leader, is
# not held: `load` reports it as superseded, to be deleted); end_offset is the next offset
# after the last copied one, so the copier resumes there and local segments below it may go.
from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from lockgate.tiered.layout import RemoteSegment


@dataclass(slots=True)
class RemoteLog:
    segments: list[RemoteSegment] = field(default_factory=list)

    @classmethod
    def load(cls, found: Iterable[RemoteSegment]) -> tuple[RemoteLog, list[RemoteSegment]]:
        """The remote log of these manifests, and the manifests it leaves out: those
        overlapping one of a newer leadership (or, in the same one, an earlier copy)."""
        ranked = sorted(found, key=lambda s: (-s.leader_epoch, s.created_ms, s.base_offset))
        kept: list[RemoteSegment] = []
        superseded: list[RemoteSegment] = []
        for segment in ranked:
            if any(_overlap(segment, other) for other in kept):
                superseded.append(segment)
            else:
                kept.append(segment)
        kept.sort(key=lambda s: s.base_offset)
        return cls(kept), superseded

    @property
    def start_offset(self) -> int | None:
        return self.segments[0].base_offset if self.segments else None

    @property
    def end_offset(self) -> int | None:
        """The offset after the last one copied (None: nothing is)."""
        return self.segments[-1].next_offset if self.segments else None

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def add(self, segment: RemoteSegment) -> None:
        if self.segments and segment.base_offset < self.segments[-1].next_offset:
            raise ValueError(
                f"segment {segment.base_offset} overlaps the remote log's end "
                f"{self.segments[-1].next_offset}"
            )
        self.segments.append(segment)

    def remove(self, segment: RemoteSegment) -> None:
        self.segments.remove(segment)

    def segment_for(self, offset: int) -> RemoteSegment | None:
        """The segment holding `offset`, or the first one after it (a gap left by compaction
        or an aborted transaction's markers holds nothing to read), or None."""
        at = bisect.bisect_right(self.segments, offset, key=lambda s: s.base_offset) - 1
        at = max(at, 0)
        for segment in self.segments[at:]:
            if segment.end_offset >= offset:
                return segment
        return None

    def segments_from(self, segment: RemoteSegment) -> list[RemoteSegment]:
        """`segment` and the ones after it."""
        return self.segments[self.segments.index(segment) :]

    def first_at_or_after_time(self, timestamp: int) -> RemoteSegment | None:
        return next((s for s in self.segments if s.max_timestamp >= timestamp), None)


def _overlap(a: RemoteSegment, b: RemoteSegment) -> bool:
    return a.base_offset <= b.end_offset and b.base_offset <= a.end_offset
