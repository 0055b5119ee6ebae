# Local-disk storage: plain files under a root directory; fsync for durability.
#
# Invariants: an append lands whole or not at all (a short or failed write is cut back to the
# last good size; a file that cannot be cut back is marked failed and refuses appends). Files
# hold no descriptor of their own: they borrow one from the engine's HandleCache, so fd use is
# bounded. After a failed fsync the engine is offline (see `health`): data written since the
# last good fsync may be lost in the page cache, so nothing more is written until a restart.
from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import resource
import shutil
from typing import Protocol

from lockgate.protocol.file_range import FileRange, Truncations
from lockgate.storage.errors import OfflineError, StorageError, as_storage_error
from lockgate.storage.handles import HandleCache, default_budget, raise_nofile_limit

log = logging.getLogger(__name__)


class DiskFile:
    def __init__(self, engine: DiskEngine, path: str) -> None:
        self.path = path
        self._engine = engine
        self._cache = engine.handles
        self._writes = 0  # appends so far; an fsync clears `dirty` only if none came during it
        self._synced_writes = 0
        self.failed: StorageError | None = None
        self.closed = False
        self._truncations = Truncations()  # ranges made of this file learn of later cuts
        fd = self._cache.acquire(self)
        try:
            self._size = os.fstat(fd).st_size
        finally:
            self._cache.release(self)

    @property
    def size(self) -> int:
        return self._size

    @property
    def dirty(self) -> bool:
        return self._writes != self._synced_writes

    def append(self, data: bytes | bytearray | memoryview) -> int:
        if self.failed is not None:
            raise self.failed
        self._engine.check_online()
        position = self._size
        view = memoryview(data)
        try:
            fd = self._cache.acquire(self)
        except OSError as exc:
            raise as_storage_error(exc, f"open {self.path}") from None
        try:
            written = 0
            try:
                while written < len(view):
                    count = os.pwrite(fd, view[written:], position + written)
                    if count == 0:
                        raise OSError(errno.ENOSPC, "short write")
                    written += count
            except OSError as exc:
                self._cut_back(fd, position, written)
                raise as_storage_error(exc, f"append to {self.path}") from None
            self._size = position + written
            self._writes += 1
            return position
        finally:
            self._cache.release(self)

    def _cut_back(self, fd: int, size: int, written: int) -> None:
        if written == 0 and os.fstat(fd).st_size == size:
            return
        self._truncations = self._truncations.cut(size)
        try:
            os.ftruncate(fd, size)
        except OSError as exc:
            self.failed = StorageError(
                exc.errno or errno.EIO, f"{self.path} could not be cut back to {size} bytes"
            )
            log.critical("%s; the file refuses appends until a restart recovers it", self.failed)

    def read(self, position: int, size: int) -> bytes:
        if self.closed:  # reopening by path would read (or create) whatever is there now
            raise StorageError(errno.EBADF, f"read {self.path} after close")
        fd = self._cache.acquire(self)
        try:
            return os.pread(fd, size, position)
        finally:
            self._cache.release(self)

    def file_range(self, position: int, size: int) -> FileRange | None:
        """`size` bytes at `position` as a range holding the file's handle pinned (neither
        evicted nor closed, even by close() or the file's removal, until the range is closed:
        see FileRange). None when the handles lent to ranges are at their budget."""
        if self.closed:
            raise StorageError(errno.EBADF, f"read {self.path} after close")
        cache = self._cache
        try:
            fd = cache.lend(self)
        except OSError as exc:
            raise as_storage_error(exc, f"open {self.path}") from None
        if fd is None:
            return None
        return FileRange(
            fd, position, size, self._truncations, functools.partial(cache.give_back, self)
        )

    def truncate(self, size: int) -> None:
        fd = self._cache.acquire(self)
        try:
            # recorded before the cut: if the cut fails halfway a range must not trust the file
            self._truncations = self._truncations.cut(size)
            os.ftruncate(fd, size)
        except OSError as exc:
            self.failed = as_storage_error(exc, f"truncate {self.path}")
            raise self.failed from None
        finally:
            self._cache.release(self)
        self._size = size
        self._writes += 1

    def sync(self) -> None:
        self._engine.check_online()
        writes = self._writes
        fd = self._cache.acquire(self)
        try:
            # fdatasync: the data and the file size, without the timestamps fsync would also write
            os.fdatasync(fd)
        except OSError as exc:
            error = as_storage_error(exc, f"fsync {self.path}")
            self._engine.go_offline(error)
            raise error from None
        finally:
            self._cache.release(self)
        self._synced_writes = writes

    def close(self) -> None:
        self.closed = True
        self._cache.forget(self)


class DiskEngine:
    durable = True

    def __init__(self, root: str, max_open_files: int = 0) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        if max_open_files <= 0:
            max_open_files = default_budget(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        self.handles = HandleCache(max_open_files)
        self.offline: StorageError | None = None

    def check_online(self) -> None:
        if self.offline is not None:
            raise OfflineError(self.offline.strerror or "a failed fsync")

    def go_offline(self, cause: StorageError) -> None:
        if self.offline is None:
            self.offline = cause
            log.critical(
                "log directory %s is offline: %s. Data written since the last good fsync cannot "
                "be trusted; produce and fetch answer KAFKA_STORAGE_ERROR until a restart, whose "
                "recovery cuts anything torn",
                self.root,
                cause,
            )

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path)

    def local_path(self, path: str) -> str | None:
        return self._path(path)

    def open_append(self, path: str) -> DiskFile:
        try:
            return DiskFile(self, self._path(path))
        except OSError as exc:
            raise as_storage_error(exc, f"open {path}") from None

    def exists(self, path: str) -> bool:
        return os.path.exists(self._path(path))

    def list_dir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self._path(path)))
        except FileNotFoundError:
            return []

    def make_dirs(self, path: str) -> None:
        try:
            os.makedirs(self._path(path), exist_ok=True)
        except OSError as exc:
            raise as_storage_error(exc, f"create directory {path}") from None

    def read_all(self, path: str) -> bytes | None:
        try:
            with open(self._path(path), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def write_atomic(self, path: str, data: bytes) -> None:
        self.check_online()
        target = self._path(path)
        temporary = target + ".tmp"
        try:
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, target)
            directory = os.open(os.path.dirname(target), os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(temporary)
            raise as_storage_error(exc, f"write {path}") from None

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._path(path))

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(self._path(path), ignore_errors=True)

    def rename(self, source: str, target: str) -> None:
        os.replace(self._path(source), self._path(target))


class _BrokerSettings(Protocol):
    def get(self, name: str) -> str: ...

    def integer(self, name: str) -> int: ...


def open_disk_engine(config: _BrokerSettings) -> DiskEngine:
    """The broker's engine: raises the open file limit first, then sizes the handle budget."""
    soft, hard = raise_nofile_limit()
    budget = config.integer("lockgate.max.open.files")
    engine = DiskEngine(config.get("log.dirs"), budget if budget > 0 else default_budget(soft))
    log.info(
        "open file limit %d (hard %d); segment files may keep %d descriptors open",
        soft,
        hard,
        engine.handles.budget,
    )
    return engine
