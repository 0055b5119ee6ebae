"""The disk engine's file-handle budget: descriptors stay bounded however many files exist,
evicted files reopen transparently, the recently used ones stay cached, and running out of
descriptors frees cached handles instead of failing."""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

import pytest

from lockgate.storage.disk import DiskEngine
from lockgate.storage.handles import (
    CLEAN_SEARCH,
    MIN_BUDGET,
    HandleCache,
    default_budget,
    raise_nofile_limit,
)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_descriptors_stay_within_the_budget(tmp_path: Path) -> None:
    before = open_fds()
    engine = DiskEngine(str(tmp_path), max_open_files=MIN_BUDGET)
    files = [engine.open_append(f"f{i}.log") for i in range(300)]
    for round_ in range(3):
        for i, file in enumerate(files):
            file.append(b"%d-%d;" % (round_, i))
            assert open_fds() - before <= MIN_BUDGET + 1
    for i, file in enumerate(files):
        assert file.read(0, file.size) == b"".join(b"%d-%d;" % (r, i) for r in range(3))
        file.sync()
    assert engine.handles.open_count <= MIN_BUDGET
    assert engine.handles.peak <= MIN_BUDGET + 1
    for file in files:
        file.close()
    assert engine.handles.open_count == 0
    assert open_fds() == before


def test_recently_used_handles_stay_cached(tmp_path: Path) -> None:
    engine = DiskEngine(str(tmp_path), max_open_files=MIN_BUDGET)
    hot = engine.open_append("hot.log")
    cold = [engine.open_append(f"c{i}.log") for i in range(MIN_BUDGET * 2)]
    hot.append(b"x")
    opened = engine.handles.opened
    for file in cold:
        file.read(0, 1)
        hot.append(b"x")  # the active segment, touched between every other use
    # every cold file was reopened once; the hot file never was
    assert engine.handles.opened - opened == len(cold)


def test_a_closed_file_in_use_keeps_its_handle_until_released(tmp_path: Path) -> None:
    engine = DiskEngine(str(tmp_path), max_open_files=MIN_BUDGET)
    file = engine.open_append("a.log")
    file.append(b"abc")
    fd = engine.handles.acquire(file)  # as an fsync in a worker thread would
    file.close()
    os.fdatasync(fd)  # still valid
    engine.handles.release(file)
    assert engine.handles.open_count == 0


def test_out_of_descriptors_frees_cached_handles_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = DiskEngine(str(tmp_path), max_open_files=64)
    files = [engine.open_append(f"f{i}.log") for i in range(40)]
    assert engine.handles.open_count == 40
    real_open = os.open
    failures = [1]

    def emfile_once(path: str, flags: int, mode: int = 0o777) -> int:
        if failures:
            failures.pop()
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", emfile_once)
    extra = engine.open_append("extra.log")
    monkeypatch.undo()
    assert engine.handles.open_count <= 21
    extra.append(b"ok")
    for file in files:
        file.append(b"still fine")


def test_emfile_that_persists_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = DiskEngine(str(tmp_path), max_open_files=MIN_BUDGET)

    def emfile(path: str, flags: int, mode: int = 0o777) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "open", emfile)
    with pytest.raises(OSError) as caught:
        engine.open_append("a.log")
    assert getattr(caught.value, "kind", None) == "EMFILE"


def test_nofile_limit_is_raised_to_the_hard_limit() -> None:
    soft_before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if soft_before == hard and hard != resource.RLIM_INFINITY and hard > 64:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard // 2, hard))
        soft, reported_hard = raise_nofile_limit()
        assert reported_hard == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == soft
        assert hard == resource.RLIM_INFINITY or soft == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft_before, hard))


def test_default_budget_leaves_room_for_sockets() -> None:
    assert default_budget(1024) == 512
    assert default_budget(256) == 128
    assert default_budget(10) == MIN_BUDGET


def test_the_broker_engine_takes_its_budget_from_the_config_or_the_limit(tmp_path: Path) -> None:
    from lockgate.config.properties import BrokerConfig
    from lockgate.storage.disk import open_disk_engine

    soft_before, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        given = BrokerConfig({"log.dirs": str(tmp_path / "a"), "lockgate.max.open.files": "40"})
        assert open_disk_engine(given).handles.budget == 40
        derived = open_disk_engine(BrokerConfig({"log.dirs": str(tmp_path / "b")}))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert derived.handles.budget == default_budget(soft)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft_before, hard))


class _File:
    def __init__(self, path: str, dirty: bool) -> None:
        self.path = path
        self.dirty = dirty


def test_a_cache_full_of_dirty_handles_closes_one_without_searching_them_all(
    tmp_path: Path,
) -> None:
    budget = CLEAN_SEARCH * 3
    cache = HandleCache(budget)
    files = [_File(str(tmp_path / f"f{i}"), dirty=True) for i in range(budget)]
    for file in files:
        cache.acquire(file)
        cache.release(file)
    clean = _File(str(tmp_path / "clean"), dirty=False)
    cache.acquire(clean)
    cache.release(clean)
    newest = _File(str(tmp_path / "new"), dirty=True)
    cache.acquire(newest)
    cache.release(newest)
    # the clean one is too recent to be found within CLEAN_SEARCH handles: the least recently
    # used dirty handle after those looked at is closed, not the clean one after a full search
    assert cache.open_count == budget
    assert clean in cache._open
    assert files[CLEAN_SEARCH] not in cache._open
    assert all(file in cache._open for file in files[:CLEAN_SEARCH])
    for file in [*files, clean, newest]:
        cache.forget(file)


def test_a_clean_handle_among_the_least_recently_used_is_closed_before_a_dirty_one(
    tmp_path: Path,
) -> None:
    cache = HandleCache(MIN_BUDGET)
    files = [_File(str(tmp_path / f"f{i}"), dirty=i != 3) for i in range(MIN_BUDGET + 1)]
    for file in files:
        cache.acquire(file)
        cache.release(file)
    assert files[3] not in cache._open
    assert all(file in cache._open for i, file in enumerate(files) if i != 3)
    for file in files:
        cache.forget(file)
