"""The storage interface behaves the same on disk and in memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lockgate.storage.disk import DiskEngine
from lockgate.storage.engine import StorageEngine
from lockgate.storage.memory import MemoryEngine

EngineFactory = Callable[[], StorageEngine]


@pytest.fixture(params=["disk", "memory"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> StorageEngine:
    if request.param == "disk":
        return DiskEngine(str(tmp_path / "root"))
    return MemoryEngine()


def test_durable_flag(tmp_path: Path) -> None:
    assert DiskEngine(str(tmp_path)).durable is True
    assert MemoryEngine().durable is False


def test_append_read_and_size(engine: StorageEngine) -> None:
    engine.make_dirs("p")
    file = engine.open_append("p/a.log")
    assert file.size == 0
    assert file.append(b"hello") == 0
    assert file.append(bytearray(b" big")) == 5
    assert file.append(memoryview(b"xx world")[2:]) == 9
    assert file.size == 15
    assert file.read(0, 15) == b"hello big world"
    assert file.read(6, 3) == b"big"
    assert file.read(10, 100) == b"world"  # short read at the end
    assert file.read(15, 10) == b""
    assert file.read(100, 10) == b""
    file.sync()
    file.close()


def test_reopening_sees_earlier_appends(engine: StorageEngine) -> None:
    engine.make_dirs("p")
    first = engine.open_append("p/a.log")
    first.append(b"abc")
    first.close()
    again = engine.open_append("p/a.log")
    assert again.size == 3
    assert again.append(b"def") == 3
    assert again.read(0, 6) == b"abcdef"
    assert engine.read_all("p/a.log") == b"abcdef"


def test_truncate_then_append_continues_at_the_cut(engine: StorageEngine) -> None:
    engine.make_dirs("p")
    file = engine.open_append("p/a.log")
    file.append(b"0123456789")
    file.truncate(4)
    assert file.size == 4
    assert file.read(0, 100) == b"0123"
    assert file.append(b"xy") == 4
    assert file.read(0, 100) == b"0123xy"
    file.truncate(0)
    assert file.size == 0
    assert engine.read_all("p/a.log") == b""
    file.close()
    assert engine.open_append("p/a.log").size == 0


def test_exists_and_directories(engine: StorageEngine) -> None:
    assert not engine.exists("a")
    engine.make_dirs("a/b/c")
    engine.make_dirs("a/b/c")  # idempotent
    for path in ("a", "a/b", "a/b/c"):
        assert engine.exists(path)
    engine.open_append("a/b/file.log").close()
    engine.write_atomic("a/top.json", b"{}")
    assert engine.exists("a/b/file.log")
    assert engine.list_dir("a") == ["b", "top.json"]
    assert engine.list_dir("a/b") == ["c", "file.log"]
    assert engine.list_dir("a/b/c") == []
    assert engine.list_dir("missing") == []
    assert "a" in engine.list_dir("")


def test_list_dir_is_sorted_and_not_prefix_confused(engine: StorageEngine) -> None:
    engine.make_dirs("t-1")
    engine.make_dirs("t-10")
    for name in ("00000000000000000010.log", "00000000000000000000.log", "leader"):
        engine.write_atomic(f"t-1/{name}", b"x")
    engine.write_atomic("t-10/other", b"y")
    assert engine.list_dir("t-1") == [
        "00000000000000000000.log",
        "00000000000000000010.log",
        "leader",
    ]
    assert engine.list_dir("t-10") == ["other"]


def test_read_all_and_write_atomic(engine: StorageEngine) -> None:
    engine.make_dirs("d")
    assert engine.read_all("d/state") is None
    engine.write_atomic("d/state", b"one")
    assert engine.read_all("d/state") == b"one"
    engine.write_atomic("d/state", b"two, longer")
    assert engine.read_all("d/state") == b"two, longer"
    engine.write_atomic("d/state", b"")
    assert engine.read_all("d/state") == b""
    assert engine.list_dir("d") == ["state"]  # no temporary file left behind


def test_remove(engine: StorageEngine) -> None:
    engine.make_dirs("d")
    engine.write_atomic("d/f", b"x")
    engine.remove("d/f")
    assert not engine.exists("d/f")
    assert engine.read_all("d/f") is None
    engine.remove("d/f")  # removing what is gone is fine
    engine.remove("d/never")
    assert engine.exists("d")


def test_remove_tree(engine: StorageEngine) -> None:
    engine.make_dirs("t-0/sub")
    engine.make_dirs("t-00")
    engine.write_atomic("t-0/a", b"1")
    engine.write_atomic("t-0/sub/b", b"2")
    engine.write_atomic("t-00/keep", b"3")
    engine.remove_tree("t-0")
    assert not engine.exists("t-0")
    assert not engine.exists("t-0/sub")
    assert engine.read_all("t-0/a") is None
    assert engine.read_all("t-0/sub/b") is None
    assert engine.read_all("t-00/keep") == b"3"  # a sibling sharing the prefix survives
    engine.remove_tree("t-0")  # and again: nothing to do
    engine.remove_tree("never")


def test_rename_file(engine: StorageEngine) -> None:
    engine.make_dirs("d")
    engine.write_atomic("d/a", b"A")
    engine.write_atomic("d/b", b"B")
    engine.rename("d/a", "d/b")  # replaces the target
    assert engine.read_all("d/b") == b"A"
    assert engine.read_all("d/a") is None
    assert engine.list_dir("d") == ["b"]


def test_rename_directory(engine: StorageEngine) -> None:
    engine.make_dirs("t-0/sub")
    engine.write_atomic("t-0/a", b"1")
    engine.write_atomic("t-0/sub/b", b"2")
    engine.rename("t-0", "t-0.deleted")
    assert not engine.exists("t-0")
    assert engine.exists("t-0.deleted")
    assert engine.exists("t-0.deleted/sub")
    assert engine.read_all("t-0.deleted/a") == b"1"
    assert engine.read_all("t-0.deleted/sub/b") == b"2"
    assert engine.list_dir("t-0.deleted") == ["a", "sub"]
    engine.remove_tree("t-0.deleted")
    assert engine.list_dir("") == []


def test_an_open_file_keeps_writing_after_a_reopen_elsewhere(engine: StorageEngine) -> None:
    engine.make_dirs("d")
    writer = engine.open_append("d/x")
    writer.append(b"12")
    reader = engine.open_append("d/x")
    assert reader.read(0, 10) == b"12"
    writer.append(b"34")
    assert reader.read(0, 10) == b"1234"
    assert engine.read_all("d/x") == b"1234"


def test_disk_engine_keeps_files_under_its_root(tmp_path: Path) -> None:
    engine = DiskEngine(str(tmp_path / "nested" / "root"))
    engine.make_dirs("t-0")
    engine.open_append("t-0/00000000000000000000.log").append(b"data")
    engine.write_atomic("meta", b"m")
    assert (tmp_path / "nested" / "root" / "t-0" / "00000000000000000000.log").read_bytes() == (
        b"data"
    )
    assert (tmp_path / "nested" / "root" / "meta").read_bytes() == b"m"
    # A second engine on the same root sees the same data (the disk is the state).
    assert DiskEngine(str(tmp_path / "nested" / "root")).read_all("meta") == b"m"
