# In-memory storage for tests: same interface, nothing survives the process.
from __future__ import annotations


class MemoryFile:
    def __init__(self, data: bytearray) -> None:
        self._data = data

    @property
    def size(self) -> int:
        return len(self._data)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        position = len(self._data)
        self._data += data
        return position

    def read(self, position: int, size: int) -> bytes:
        return bytes(self._data[position : position + size])

    def truncate(self, size: int) -> None:
        del self._data[size:]

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


class MemoryEngine:
    durable = False

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        self.dirs: set[str] = {""}

    def open_append(self, path: str) -> MemoryFile:
        return MemoryFile(self.files.setdefault(path, bytearray()))

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
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.dirs.add("/".join(parts[:i]))

    def read_all(self, path: str) -> bytes | None:
        data = self.files.get(path)
        return None if data is None else bytes(data)

    def write_atomic(self, path: str, data: bytes) -> None:
        self.files[path] = bytearray(data)

    def remove(self, path: str) -> None:
        self.files.pop(path, None)

    def remove_tree(self, path: str) -> None:
        prefix = path.rstrip("/") + "/"
        for name in [n for n in self.files if n.startswith(prefix)]:
            del self.files[name]
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(prefix)}

    def rename(self, source: str, target: str) -> None:
        if source in self.files:
            self.files[target] = self.files.pop(source)
            return
        prefix = source.rstrip("/") + "/"
        for name in [n for n in self.files if n.startswith(prefix)]:
            self.files[target + "/" + name[len(prefix) :]] = self.files.pop(name)
        moved = {d for d in self.dirs if d == source or d.startswith(prefix)}
        self.dirs -= moved
        self.dirs |= {target + d[len(source) :] for d in moved}
