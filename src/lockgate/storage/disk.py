# Local-disk storage: plain files under a root directory; fsync for durability.
from __future__ import annotations

import contextlib
import os
import shutil


class DiskFile:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self.path = path

    @property
    def size(self) -> int:
        return self._size

    def append(self, data: bytes | bytearray | memoryview) -> int:
        position = self._size
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(data)
        return position

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self._size = size

    def sync(self) -> None:
        # fdatasync: the data and the file size, without the timestamps fsync would also write
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class DiskEngine:
    durable = True

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path)

    def open_append(self, path: str) -> DiskFile:
        return DiskFile(self._path(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(self._path(path))

    def list_dir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self._path(path)))
        except FileNotFoundError:
            return []

    def make_dirs(self, path: str) -> None:
        os.makedirs(self._path(path), exist_ok=True)

    def read_all(self, path: str) -> bytes | None:
        try:
            with open(self._path(path), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def write_atomic(self, path: str, data: bytes) -> None:
        target = self._path(path)
        temporary = target + ".tmp"
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

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._path(path))

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(self._path(path), ignore_errors=True)

    def rename(self, source: str, target: str) -> None:
        os.replace(self._path(source), self._path(target))
