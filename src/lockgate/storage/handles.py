# The disk engine's budget of open file descriptors: a least-recently-used cache of handles
# shared by every segment file, so fd use stays bounded whatever the partition count.
#
# Invariants: at most `budget` handles are open, except handles in use right now (pinned by a
# read, an append or an fsync running in a worker thread). Eviction closes the least recently
# used handles of files without unsynced writes first (one passed over, dirty or in use, counts
# as used again; at most CLEAN_SEARCH are looked at); only when those are not enough does it
# close a dirty one: its pages stay in the page cache, the next fsync reopens the file and
# flushes them, and since Linux 4.16 a writeback error nobody has seen yet is reported to that
# fsync even through a new descriptor.
# Every method takes the lock: fsyncs run in worker threads while the event loop appends.
# Handles lent to file ranges (a Fetch answer holds its segment's handle pinned until it is
# written: see protocol/file_range.py) are bounded too: at most a quarter of the budget at
# once; past that, readers read the bytes instead.
from __future__ import annotations

import errno
import logging
import os
import resource
import threading
from collections import OrderedDict
from typing import Protocol

log = logging.getLogger(__name__)

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
MIN_BUDGET = 16
CLEAN_SEARCH = 32  # handles looked at for a clean one before a dirty one is closed


class CachedFile(Protocol):
    path: str

    @property
    def dirty(self) -> bool: ...


class HandleCache:
    def __init__(self, budget: int) -> None:
        self.budget = max(MIN_BUDGET, budget)
        self._lock = threading.Lock()
        self._open: OrderedDict[CachedFile, int] = OrderedDict()
        self._pins: dict[CachedFile, int] = {}
        self._closing: set[CachedFile] = set()
        self.opened = 0  # handles opened since start (reopens after eviction included)
        self.peak = 0
        self.range_budget = max(MIN_BUDGET, self.budget // 4)
        self.ranges_out = 0  # handles lent to file ranges and not yet given back

    @property
    def open_count(self) -> int:
        return len(self._open)

    def acquire(self, file: CachedFile) -> int:
        """The file's descriptor, opened if needed; pinned until `release`."""
        with self._lock:
            fd = self._open.get(file)
            if fd is None:
                fd = self._open_locked(file)
                self._open[file] = fd
                self.opened += 1
                self._pins[file] = self._pins.get(file, 0) + 1  # before evicting: not this one
                self._evict_locked()
                self.peak = max(self.peak, len(self._open))
                return fd
            self._open.move_to_end(file)
            self._pins[file] = self._pins.get(file, 0) + 1
            return fd

    def release(self, file: CachedFile) -> None:
        with self._lock:
            left = self._pins[file] - 1
            if left:
                self._pins[file] = left
                return
            del self._pins[file]
            if file in self._closing:
                self._close_locked(file)

    def lend(self, file: CachedFile) -> int | None:
        """The file's descriptor, pinned for a file range until `give_back`; None when the
        handles lent to ranges are at their budget (the caller reads the bytes instead)."""
        with self._lock:
            if self.ranges_out >= self.range_budget:
                return None
            self.ranges_out += 1
        try:
            return self.acquire(file)
        except BaseException:
            with self._lock:
                self.ranges_out -= 1
            raise

    def give_back(self, file: CachedFile) -> None:
        """A file range is done with the descriptor `lend` gave it."""
        with self._lock:
            self.ranges_out -= 1
        self.release(file)

    def forget(self, file: CachedFile) -> None:
        """The file is closed for good: its handle goes now, or when its last user is done."""
        with self._lock:
            if file in self._pins:
                self._closing.add(file)
            else:
                self._close_locked(file)

    def _open_locked(self, file: CachedFile) -> int:
        try:
            return os.open(file.path, _OPEN_FLAGS, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
        # Out of descriptors (sockets count too): give back half of ours and try once more.
        freed = self._evict_locked(keep=len(self._open) // 2)
        log.warning(
            "out of file descriptors opening %s: closed %d cached handles of %d and retrying",
            file.path,
            freed,
            len(self._open) + freed,
        )
        return os.open(file.path, _OPEN_FLAGS, 0o644)

    def _evict_locked(self, keep: int | None = None) -> int:
        limit = self.budget if keep is None else keep
        freed = 0
        if len(self._open) <= limit:
            return 0
        for allow_dirty in (False, True):
            # From the least recently used on; one passed over (in use, or dirty on the first
            # round) goes to the back, so that the next eviction does not look at it again
            # first. The search for a clean one stops after CLEAN_SEARCH handles: when
            # every handle is dirty (no fsync yet, or page-cache durability) a full search
            # on each new file made creating 1,000 partitions past the budget take minutes.
            passed = 0
            most = min(len(self._open), CLEAN_SEARCH) if not allow_dirty else len(self._open)
            while len(self._open) > limit and passed < most:
                candidate = next(iter(self._open))
                if candidate in self._pins or (candidate.dirty and not allow_dirty):
                    self._open.move_to_end(candidate)
                    passed += 1
                    continue
                os.close(self._open.pop(candidate))
                freed += 1
            if len(self._open) <= limit:
                break
        return freed

    def _close_locked(self, file: CachedFile) -> None:
        self._closing.discard(file)
        fd = self._open.pop(file, None)
        if fd is not None:
            os.close(fd)


def raise_nofile_limit() -> tuple[int, int]:
    """Raises the soft RLIMIT_NOFILE to the hard one; returns (soft, hard) afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open file limit from %d to %d: %s", soft, target, exc)
    return soft, hard


def default_budget(soft_limit: int) -> int:
    """Half the descriptors for segment files: the rest is for sockets, snapshots, metadata."""
    return max(MIN_BUDGET, soft_limit // 2)
