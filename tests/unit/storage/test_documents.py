# The document ACLs, client quotas and SCRAM credentials are kept in: the storage engine's file
# (written only when the content changes, unchanged by a failed write, read back after a
# restart) and the etcd key (compare-and-swap under concurrent writers, the writer reading its
# own write, a watch that sees other writers and reads the key again after a compaction, fresh
# reads without a watch).
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from lockgate.storage.disk import DiskEngine
from lockgate.storage.documents import EtcdDocument, LocalDocument, parse_cluster_url
from tests.support.etcd import EtcdCluster


def increment(data: bytes | None) -> bytes:
    return str(int(data or b"0") + 1).encode()


async def test_local_document_writes_only_changes_and_survives_a_restart(tmp_path: Path) -> None:
    engine = DiskEngine(str(tmp_path))
    document = LocalDocument(engine, "counter.json")
    seen: list[bytes | None] = []
    document.listeners.append(seen.append)
    assert await document.read() is None
    assert await document.change(increment) == b"1"
    writes: list[bytes] = []
    write = engine.write_atomic

    def counted(path: str, data: bytes) -> None:
        writes.append(data)
        write(path, data)

    engine.write_atomic = counted  # type: ignore[method-assign]
    assert await document.change(lambda data: data) == b"1"  # the same bytes
    assert await document.change(lambda data: None) == b"1"  # nothing to change
    assert writes == [] and seen == [b"1"]
    assert await LocalDocument(DiskEngine(str(tmp_path)), "counter.json").read() == b"1"


async def test_local_document_keeps_the_old_value_when_the_write_fails(tmp_path: Path) -> None:
    engine = DiskEngine(str(tmp_path))
    document = LocalDocument(engine, "counter.json")
    document.change_now(increment)
    seen: list[bytes | None] = []
    document.listeners.append(seen.append)

    def refuse(path: str, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    engine.write_atomic = refuse  # type: ignore[method-assign]
    with pytest.raises(OSError):
        await document.change(increment)
    assert document.value == b"1" and seen == []
    assert LocalDocument(DiskEngine(str(tmp_path)), "counter.json").value == b"1"


def on_etcd(etcd: EtcdCluster, name: str, count: int, watch: bool = True) -> list[EtcdDocument]:
    """`count` documents on one key, as on `count` brokers."""
    endpoints, namespace = parse_cluster_url(etcd.url + "/documents-test")
    return [EtcdDocument(endpoints, namespace, name, watch=watch) for _ in range(count)]


@contextlib.asynccontextmanager
async def started(*documents: EtcdDocument) -> AsyncIterator[None]:
    for document in documents:
        await document.start()
    try:
        yield
    finally:
        for document in documents:
            await document.close()


async def eventually(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.02)
    assert condition()


async def test_compare_and_swap_loses_no_concurrent_change(one_etcd: EtcdCluster) -> None:
    first, second = on_etcd(one_etcd, "counter", 2)
    async with started(first, second):
        await asyncio.gather(*(document.change(increment) for document in [first, second] * 10))
        assert await first.read() == b"20"
        await eventually(lambda: first.value == second.value == b"20")


async def test_the_watch_sees_other_writers_and_a_writer_its_own_write(
    one_etcd: EtcdCluster,
) -> None:
    watching, writer = on_etcd(one_etcd, "watched", 2)
    seen: list[bytes | None] = []
    watching.listeners.append(seen.append)
    async with started(watching, writer):
        assert watching.value is None
        assert await writer.change(increment) == b"1"
        assert writer.value == b"1"  # at once, not when its watch catches up
        await eventually(lambda: watching.value == b"1")
        assert await writer.change(lambda data: data) == b"1"  # the same bytes: no write
        await writer.change(increment)
        await eventually(lambda: watching.value == b"2")
        assert seen == [b"1", b"2"]
        stored = await writer._kv.get(writer.key)
        assert stored.kvs[0].version == 2


async def test_the_watch_reads_the_key_again_after_a_compaction(one_etcd: EtcdCluster) -> None:
    watching, writer = on_etcd(one_etcd, "compacted", 2)
    async with started(watching, writer):
        await writer.change(increment)
        await eventually(lambda: watching.value == b"1")
        # the watcher's stream is down while the key changes and etcd drops the history
        assert watching._task is not None
        watching._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching._task
        await writer.change(increment)
        await writer.change(increment)
        now = await writer._kv.get(writer.key)
        await writer._kv.compact(int(now.header.revision), physical=True)
        watching._task = asyncio.create_task(watching._follow())
        await eventually(lambda: watching.value == b"3")
        await writer.change(increment)  # and it watches on from the read
        await eventually(lambda: watching.value == b"4")


async def test_without_a_watch_every_read_is_fresh(one_etcd: EtcdCluster) -> None:
    reader, writer = on_etcd(one_etcd, "fresh", 2, watch=False)
    async with started(reader, writer):
        assert await reader.read() is None
        await writer.change(increment)
        assert reader.value is None  # nothing follows the key
        assert await reader.read() == b"1"
