# In-memory storage for tests: same interface and the same error contract as the disk engine,
# nothing survives the process. `faults` injects the failures a disk can have (a capacity
# limit, failing writes, truncates, opens, fsyncs) so the log's all-or-nothing rules can be
# tested without a real full disk.
from __future__ import annotations

import errno
from dataclasses import dataclass

from lockgate.storage.errors import OfflineError, StorageError


@dataclass
class MemoryFaults:
    capacity: int | None = None  # total bytes over every file; an append past it gets ENOSPC
    write_errno: int | None = None  # every append fails with this errno (after a partial write)
    truncate_errno: int | None = None  # cutting a file back fails with this errno
    sync_errno: int | None = None  # fsync fails with this errno
    atomic_errno: int | None = None  # write_atomic fails with this errno
    opens_left: int | None = None  # open_append calls that succeed before EMFILE
    make_dirs_errno: int | None = None
    rename_errno: int | None = None  # renames fail with this errno
    remove_errno: int | None = None  # removing a directory tree fails with this errno


class MemoryFile:
    def __init__(self, engine: MemoryEngine, path: str, data: bytearray) -> None:
        self._engine = engine
        self._data = data
        self.path = path
        self.failed: StorageError | None = None
        self.syncs = 0

    @property
    def size(self) -> int:
        return len(self._data)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        if self.failed is not None:
            raise self.failed
        self._engine.check_online()
        faults = self._engine.faults
        position = len(self._data)
        code = faults.write_errno
        room = None if faults.capacity is None else faults.capacity - self._engine.used_bytes()
        if code is None and room is not None and room < len(data):
            code = errno.ENOSPC
        if code is None:
            self._data += data
            return position
        # A real disk writes what fits before failing: do the same, then cut back like disk.py.
        self._data += bytes(memoryview(data)[: max(0, min(room or 0, len(data) - 1))])
        if faults.truncate_errno is not None:
            self.failed = StorageError(faults.truncate_errno, f"{self.path} could not be cut back")
        else:
            del self._data[position:]
        raise StorageError(code, f"append to {self.path}")

    def read(self, position: int, size: int) -> bytes:
        return bytes(self._data[position : position + size])

    def file_range(self, position: int, size: int) -> None:
        """None: no descriptor to send from (readers take the bytes: read)."""
        return None

    def truncate(self, size: int) -> None:
        code = self._engine.faults.truncate_errno
        if code is not None:
            self.failed = StorageError(code, f"truncate {self.path}")
            raise self.failed
        del self._data[size:]

    def sync(self) -> None:
        self._engine.check_online()
        code = self._engine.faults.sync_errno
        if code is not None:
            error = StorageError(code, f"fsync {self.path}")
            self._engine.offline = error
            raise error
        self.syncs += 1

    def close(self) -> None:
        pass


class MemoryEngine:
    durable = False

    def __init__(self, faults: MemoryFaults | None = None, durable: bool = False) -> None:
        self.files: dict[str, bytearray] = {}
        self.dirs: set[str] = {""}
        self.faults = faults or MemoryFaults()
        self.offline: StorageError | None = None
        # durable=True makes the group commit call sync(): for tests of fsync failures
        self.durable = durable

    def used_bytes(self) -> int:
        return sum(len(data) for data in self.files.values())

    def check_online(self) -> None:
        if self.offline is not None:
            raise OfflineError(self.offline.strerror or "a failed fsync")

    def go_offline(self, cause: StorageError) -> None:
        if self.offline is None:
            self.offline = cause

    def open_append(self, path: str) -> MemoryFile:
        left = self.faults.opens_left
        if left is not None:
            if left <= 0:
                raise StorageError(errno.EMFILE, f"open {path}")
            self.faults.opens_left = left - 1
        return MemoryFile(self, path, self.files.setdefault(path, bytearray()))

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs

    def list_dir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/" if path else ""
        names = {
            name[len(prefix) :].split("/", 1)[0]
            for name in (*self.files, *self.dirs)
            if name.startswith(prefix) and name != path
        }
        return sorted(n for n in names if n)

    def make_dirs(self, path: str) -> None:
        if self.faults.make_dirs_errno is not None:
            raise StorageError(self.faults.make_dirs_errno, f"create directory {path}")
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.dirs.add("/".join(parts[:i]))

    def local_path(self, path: str) -> str | None:
        return None

    def read_all(self, path: str) -> bytes | None:
        data = self.files.get(path)
        return None if data is None else bytes(data)

    def write_atomic(self, path: str, data: bytes) -> None:
        self.check_online()
        code = self.faults.atomic_errno
        room = None if self.faults.capacity is None else self.faults.capacity - self.used_bytes()
        if code is None and room is not None and room < len(data) - len(self.files.get(path, b"")):
            code = errno.ENOSPC
        if code is not None:
            raise StorageError(code, f"write {path}")
        self.files[path] = bytearray(data)

    def remove(self, path: str) -> None:
        self.files.pop(path, None)

    def remove_tree(self, path: str) -> None:
        if self.faults.remove_errno is not None:
            raise StorageError(self.faults.remove_errno, f"remove {path}")
        prefix = path.rstrip("/") + "/"
        for name in [n for n in self.files if n.startswith(prefix)]:
            del self.files[name]
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(prefix)}

    def rename(self, source: str, target: str) -> None:
        if self.faults.rename_errno is not None:
            raise StorageError(self.faults.rename_errno, f"rename {source}")
        if source in self.files:
            self.files[target] = self.files.pop(source)
            return
        prefix = source.rstrip("/") + "/"
        for name in [n for n in self.files if n.startswith(prefix)]:
            self.files[target + "/" + name[len(prefix) :]] = self.files.pop(name)
        moved = {d for d in self.dirs if d == source or d.startswith(prefix)}
        self.dirs -= moved
        self.dirs |= {target + d[len(source) :] for d in moved}
