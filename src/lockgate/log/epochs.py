# Leader epoch history of one partition: (epoch, first offset written in it), persisted in
# Kafka's leader-epoch-checkpoint text layout. Epochs and start offsets only grow.
from __future__ import annotations

import bisect
import logging

from lockgate.storage.engine import StorageEngine
from lockgate.storage.errors import StorageError

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, storage: StorageEngine, path: str) -> None:
        self.storage = storage
        self.path = path
        self.epochs: list[int] = []
        self.start_offsets: list[int] = []
        self.unsaved = False  # a change not written yet (deferred, or refused for lack of space)
        raw = storage.read_all(path)
        # the file on storage says exactly what is in memory (missing or damaged: it does not)
        self.intact = raw is not None and self._parse(raw.decode("ascii", errors="replace"))

    def _parse(self, text: str) -> bool:
        """Reads the history; False if any of it was damaged or out of order."""
        lines = text.split("\n")
        entries: list[tuple[int, int]] = []
        try:
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, start = (int(x) for x in line.split())  # ValueError unless two ints
                entries.append((epoch, start))
        except (IndexError, ValueError):
            return False  # damaged: start a fresh history; the next epoch is still persisted
        for epoch, start in entries:
            if (not self.epochs or epoch > self.epochs[-1]) and (
                not self.start_offsets or start >= self.start_offsets[-1]
            ):
                self.epochs.append(epoch)
                self.start_offsets.append(start)
        return len(self.epochs) == len(entries) == count

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1] if self.epochs else UNDEFINED_EPOCH

    def begin_epoch(self, epoch: int, start_offset: int, defer: bool = False) -> None:
        """Records that leadership at `epoch` starts at `start_offset`, and persists it, or
        with `defer` only before the first append (ensure_saved). A single node's new term at
        start is deferred: a broker with many partitions would otherwise write and fsync a file
        per partition before it serves anything. An epoch that dies unwritten (a crash or a
        stop before any append in it) marks no record, so the next start may use its number
        again."""
        assert epoch > self.latest_epoch
        self.epochs.append(epoch)
        self.start_offsets.append(start_offset)
        if defer:
            self.unsaved = True
        else:
            self._save()

    def truncate_after(self, log_end_offset: int) -> None:
        """Drops epochs that start past the log end (after a torn tail was cut)."""
        changed = False
        while len(self.epochs) > 1 and self.start_offsets[-1] > log_end_offset:
            self.epochs.pop()
            self.start_offsets.pop()
            changed = True
        if self.start_offsets and self.start_offsets[-1] > log_end_offset:
            self.start_offsets[-1] = log_end_offset
            changed = True
        if changed:
            self._save()

    def clear(self) -> None:
        """Forgets every epoch (a log emptied to start at a later offset)."""
        self.epochs.clear()
        self.start_offsets.clear()
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= `epoch`, the offset where it ended)."""
        if not self.epochs or epoch < self.epochs[0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        i = bisect.bisect_right(self.epochs, epoch) - 1
        if i == len(self.epochs) - 1:
            return self.epochs[i], log_end_offset
        return self.epochs[i], self.start_offsets[i + 1]

    def ensure_saved(self) -> None:
        """Called before anything is appended: no batch is written under an epoch that is
        not persisted. Raises StorageError while storage still refuses it."""
        if self.unsaved:
            self._write()
            self.unsaved = False

    def _save(self) -> None:
        """Persists the history. Out of space (a broker starting on a full disk), the change
        is kept in memory and persisted before the next append: reads go on meanwhile."""
        self.intact = False  # until written
        try:
            self._write()
            self.unsaved, self.intact = False, True
        except StorageError as exc:
            if not exc.recoverable:
                raise
            self.unsaved = True
            log.warning("%s not written (%s): appends wait until it is", self.path, exc)

    def _write(self) -> None:
        lines = ["0", str(len(self.epochs))]
        lines += [f"{e} {s}" for e, s in zip(self.epochs, self.start_offsets, strict=True)]
        self.storage.write_atomic(self.path, ("\n".join(lines) + "\n").encode())
