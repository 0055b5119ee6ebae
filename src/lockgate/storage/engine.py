# The storage interface the log layer writes through. Paths are relative to the engine's root
# and use "/" separators. `sync` is the only blocking call that may be slow: callers run it in
# a worker thread; everything else is cheap enough for the event loop.
#
# Error contract: every failure is raised as storage.errors.StorageError (an OSError) naming
# the errno. An append lands whole or not at all; a file that could not be cut back after a
# failed append is marked failed and refuses appends. A failed fsync takes the engine offline
# (`offline` holds the cause): appends, syncs and write_atomic then refuse until a restart.
from __future__ import annotations

from typing import Protocol

from lockgate.protocol.file_range import FileRange
from lockgate.storage.errors import StorageError


class AppendFile(Protocol):
    """A file that grows by appends and can be cut back (torn-tail recovery, truncation)."""

    @property
    def size(self) -> int: ...

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Appends and returns the position the data starts at."""

    def read(self, position: int, size: int) -> bytes: ...

    def file_range(self, position: int, size: int) -> FileRange | None:
        """`size` bytes at `position` as a FileRange the caller owns (to send with
        sendfile), or None when the file has no descriptor to send from (memory)."""

    def truncate(self, size: int) -> None: ...

    def sync(self) -> None:
        """Makes every append so far durable (fsync). Safe to call from a worker thread."""

    def close(self) -> None: ...


class StorageEngine(Protocol):
    durable: bool  # False when sync() cannot make data outlive the process (memory)
    offline: StorageError | None  # set by the first failed fsync; cleared only by a restart

    def check_online(self) -> None:
        """Raises OfflineError once the engine is offline."""

    def go_offline(self, cause: StorageError) -> None: ...

    def open_append(self, path: str) -> AppendFile: ...

    def exists(self, path: str) -> bool: ...

    def list_dir(self, path: str) -> list[str]: ...

    def make_dirs(self, path: str) -> None: ...

    def read_all(self, path: str) -> bytes | None:
        """The whole file, or None when it does not exist."""

    def write_atomic(self, path: str, data: bytes) -> None:
        """Replaces the file so that a crash leaves either the old or the new content; on
        failure the old content stays and no temporary file is left behind."""

    def remove(self, path: str) -> None: ...

    def remove_tree(self, path: str) -> None: ...

    def rename(self, source: str, target: str) -> None: ...

    def local_path(self, path: str) -> str | None:
        """The file's path in the machine's file system (for a client that reads the file
        itself, as the object store's does), or None when it has none (memory)."""
