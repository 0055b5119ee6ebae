# Part of a message body that lies in a file: a Fetch answer's record bytes as they are in a
# segment file, so that the connection can hand them to the socket with sendfile instead of
# reading them into Python (copying path: read() them when the socket cannot take them).
#
# Invariants: a FileRange holds its descriptor open until close(): the storage engine lends it
# pinned (its handle cache neither evicts nor closes a pinned handle, even when the segment is
# deleted by retention meanwhile: the descriptor then closes at the last release), or the range
# owns it outright (a descriptor of its own, closed by close()). close() is idempotent, so the
# descriptor is never given back twice (the number may be someone else's by then). Whoever
# drops a range unwritten closes it; a range garbage-collected still open is closed then, as a
# safety net, never as the plan.
# Truncation: a file cut back below the range's end and grown again would give other bytes at
# the same positions (a follower truncating a divergent log, then appending its leader's). The
# file's Truncations tell: a stale range must not be written.
from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeAlias


class RangeCut(Exception):
    """The file no longer holds the range's bytes: it was cut back below its end since the
    range was made (and may have grown again with other bytes)."""


class Truncations:
    """The cuts of one file, shared with the ranges made of it. The file holds the newest
    record and starts a new one at each cut; a range keeps the record current when it was
    made and follows the chain to see every cut since."""

    __slots__ = ("cut_to", "following")

    def __init__(self) -> None:
        self.cut_to: int | None = None  # set when the file was cut to this size
        self.following: Truncations | None = None

    def cut(self, size: int) -> Truncations:
        """Records a cut to `size`; returns the record for ranges made from now on."""
        self.cut_to = size
        self.following = Truncations()
        return self.following

    def lowest_since(self) -> int | None:
        """The smallest size the file was cut to since this record was the newest."""
        lowest: int | None = None
        record: Truncations | None = self
        while record is not None and record.cut_to is not None:
            lowest = record.cut_to if lowest is None else min(lowest, record.cut_to)
            record = record.following
        return lowest


class FileRange:
    """`size` bytes at `position` of the file open as `fd`, held until close(): `release`
    gives a lent descriptor back; without it the range owns `fd` and close() closes it."""

    __slots__ = ("_open", "_release", "_truncations", "fd", "position", "size")

    def __init__(
        self,
        fd: int,
        position: int,
        size: int,
        truncations: Truncations,
        release: Callable[[], None] | None = None,
    ) -> None:
        self.fd = fd
        self.position = position
        self.size = size
        self._truncations = truncations
        self._release = release
        self._open = True

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"FileRange(fd={self.fd}, position={self.position}, size={self.size}, {state})"

    @property
    def stale(self) -> bool:
        """True when the file was cut below the range's end since it was made."""
        lowest = self._truncations.lowest_since()
        return lowest is not None and lowest < self.position + self.size

    def read(self, skip: int = 0) -> bytes:
        """The range's bytes from `skip` on (the copying path). Raises RangeCut when the file
        was cut back: never fewer bytes than the range promised."""
        if self.stale:
            raise RangeCut(f"{self!r}: the file was cut back below its end")
        want = self.size - skip
        data = os.pread(self.fd, want, self.position + skip)
        if len(data) != want:
            raise RangeCut(f"{self!r}: read {len(data)} of {want} bytes at {skip}")
        return data

    def close(self) -> None:
        if self._open:
            self._open = False
            if self._release is None:
                os.close(self.fd)
            else:
                self._release()

    def __del__(self) -> None:
        # the safety net (see the module header); at interpreter exit os may be gone already
        if getattr(self, "_open", False):
            self.close()


# A piece of an encoded body written in turn: bytes built by an encoder, a view of bytes read,
# or a range of a file sent from there.
Part: TypeAlias = bytes | memoryview | FileRange


def close_ranges(parts: object) -> None:
    """Closes every FileRange among `parts` (a list of parts; anything else: nothing to do)."""
    if isinstance(parts, list):
        for part in parts:
            if isinstance(part, FileRange):
                part.close()
