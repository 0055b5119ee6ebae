"""The storage error contract: appends land whole or not at all, the errno is named, a file
that cannot be cut back refuses appends, a failed fsync takes the engine offline, and a failed
write_atomic leaves the old content and no temporary file. Disk and memory engines alike."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.storage.disk import DiskEngine
from lockgate.storage.errors import OfflineError, StorageError
from lockgate.storage.memory import MemoryEngine, MemoryFaults
from tests.support.tmpfs import mounted_tmpfs


def test_storage_error_is_an_os_error_naming_its_kind() -> None:
    error = StorageError(errno.ENOSPC, "append to x")
    assert isinstance(error, OSError)
    assert error.errno == errno.ENOSPC
    assert error.kind == "ENOSPC"
    assert error.recoverable
    assert not StorageError(errno.EIO, "fsync x").recoverable
    assert StorageError(errno.EMFILE, "open x").kind == "EMFILE"


# -- memory engine with injected faults ---------------------------------------------------------


def test_memory_append_past_capacity_fails_whole_and_succeeds_once_space_returns() -> None:
    faults = MemoryFaults(capacity=10)
    engine = MemoryEngine(faults)
    file = engine.open_append("a.log")
    file.append(b"123456")
    with pytest.raises(StorageError) as caught:
        file.append(b"abcdef")
    assert caught.value.kind == "ENOSPC"
    assert file.size == 6 and file.read(0, 100) == b"123456"
    faults.capacity = None
    assert file.append(b"abcdef") == 6
    assert file.read(0, 100) == b"123456abcdef"


def test_memory_file_that_cannot_be_cut_back_refuses_appends() -> None:
    faults = MemoryFaults(capacity=8, truncate_errno=errno.EIO)
    engine = MemoryEngine(faults)
    file = engine.open_append("a.log")
    file.append(b"1234")
    with pytest.raises(StorageError) as caught:
        file.append(b"abcdefgh")
    assert caught.value.kind == "ENOSPC"
    faults.capacity = None
    faults.truncate_errno = None
    with pytest.raises(StorageError) as again:
        file.append(b"x")
    assert again.value.kind == "EIO"


def test_memory_failed_sync_takes_the_engine_offline() -> None:
    faults = MemoryFaults(sync_errno=errno.EIO)
    engine = MemoryEngine(faults, durable=True)
    file = engine.open_append("a.log")
    file.append(b"data")
    with pytest.raises(StorageError):
        file.sync()
    assert engine.offline is not None
    faults.sync_errno = None  # a later fsync "succeeding" proves nothing: stay offline
    with pytest.raises(OfflineError):
        file.sync()
    with pytest.raises(OfflineError):
        file.append(b"more")
    with pytest.raises(OfflineError):
        engine.write_atomic("x", b"y")


def test_memory_open_failure_is_emfile() -> None:
    engine = MemoryEngine(MemoryFaults(opens_left=1))
    engine.open_append("a")
    with pytest.raises(StorageError) as caught:
        engine.open_append("b")
    assert caught.value.kind == "EMFILE"


# -- disk engine, failures simulated at the system-call boundary ---------------------------------


def test_disk_short_write_then_enospc_is_cut_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = DiskEngine(str(tmp_path))
    file = engine.open_append("a.log")
    file.append(b"good")
    real_pwrite = os.pwrite
    calls = []

    def half_then_full(fd: int, data: bytes, offset: int) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_pwrite(fd, bytes(data)[: len(data) // 2], offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", half_then_full)
    with pytest.raises(StorageError) as caught:
        file.append(b"0123456789")
    assert caught.value.kind == "ENOSPC"
    monkeypatch.undo()
    assert file.size == 4
    assert os.path.getsize(tmp_path / "a.log") == 4  # no partial batch left at the tail
    assert file.append(b"next") == 4
    assert (tmp_path / "a.log").read_bytes() == b"goodnext"


def test_disk_file_that_cannot_be_cut_back_is_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = DiskEngine(str(tmp_path))
    file = engine.open_append("a.log")
    real_pwrite = os.pwrite

    def partial(fd: int, data: bytes, offset: int) -> int:
        if offset == 0:
            return real_pwrite(fd, bytes(data)[:3], offset)
        raise OSError(errno.EIO, "Input/output error")

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pwrite", partial)
    monkeypatch.setattr(os, "ftruncate", no_truncate)
    with pytest.raises(StorageError):
        file.append(b"abcdef")
    monkeypatch.undo()
    with pytest.raises(StorageError):
        file.append(b"x")  # would land after bytes we could not remove
    assert file.size == 0


def test_disk_failed_fsync_takes_the_engine_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = DiskEngine(str(tmp_path))
    file = engine.open_append("a.log")
    file.append(b"data")

    def failing(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(StorageError) as caught:
        file.sync()
    assert caught.value.kind == "ENOSPC"  # ENOSPC from fsync is as final as EIO
    monkeypatch.undo()
    assert engine.offline is not None
    with pytest.raises(OfflineError):
        file.sync()
    with pytest.raises(OfflineError):
        file.append(b"x")
    assert file.read(0, 4) == b"data"  # the engine still reads (recovery needs it)


def test_disk_failed_write_atomic_keeps_the_old_content_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = DiskEngine(str(tmp_path))
    engine.write_atomic("snap", b"old")

    def failing(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(StorageError) as caught:
        engine.write_atomic("snap", b"new")
    monkeypatch.undo()
    assert caught.value.kind == "ENOSPC"
    assert engine.read_all("snap") == b"old"
    assert sorted(os.listdir(tmp_path)) == ["snap"]


# -- disk engine on a real full filesystem ------------------------------------------------------


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "tiny", "1m") as mount_point:
        yield mount_point


def test_disk_full_filesystem_appends_whole_or_not_at_all(tiny_fs: Path) -> None:
    engine = DiskEngine(str(tiny_fs / "data"))
    file = engine.open_append("a.log")
    chunk = b"x" * 100_000
    with pytest.raises(StorageError) as caught:
        for _ in range(20):
            file.append(chunk)
    assert caught.value.kind == "ENOSPC"
    assert file.size % len(chunk) == 0
    assert os.path.getsize(tiny_fs / "data" / "a.log") == file.size
    with pytest.raises(StorageError):
        engine.write_atomic("snap", b"s" * 200_000)
    assert not (tiny_fs / "data" / "snap.tmp").exists()
    file.truncate(0)  # space returns: the next append simply succeeds
    assert file.append(chunk) == 0
