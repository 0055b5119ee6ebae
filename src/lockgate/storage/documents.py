# One small document of cluster-wide state (ACLs, client quotas, SCRAM credentials): a file of
# the single node's storage engine, or one etcd key /lockgate/<namespace>/<name> changed only
# by compare-and-swap and, when asked, followed by a watch so every broker sees a change made
# through any of them. `value` is the latest content seen (None: absent), and every new value
# is passed to `listeners`. A change is a pure function of the current content (it may run
# again after a lost race); it writes whole or not at all and raises with nothing changed.
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from lockgate.storage.engine import StorageEngine

log = logging.getLogger(__name__)

Compute = Callable[[bytes | None], bytes | None]  # current content → new content (None: as is)
Listener = Callable[[bytes | None], None]
RPC_TIMEOUT = 5.0
CAS_ATTEMPTS = 50
DEFAULT_NAMESPACE = "lockgate"  # of a cluster URL without one


def parse_cluster_url(url: str) -> tuple[list[str], str]:
    """`etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]` → (endpoints, namespace)."""
    parts = urlsplit(url)
    if parts.scheme != "etcd" or not parts.netloc:
        raise ValueError(f"{url!r} is not etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE]")
    endpoints = [e.strip() for e in parts.netloc.split(",") if e.strip()]
    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{endpoint!r} in {url!r} is not HOST:PORT")
    namespace = parts.path.strip("/") or DEFAULT_NAMESPACE
    if "/" in namespace:
        raise ValueError(f"the namespace of {url!r} must be one path segment")
    return endpoints, namespace


class Document(Protocol):
    value: bytes | None
    listeners: list[Listener]

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def read(self) -> bytes | None:
        """The content now: read afresh from etcd (never a watched copy that may lag)."""

    async def change(self, compute: Compute) -> bytes | None:
        """Stores what `compute` makes of the current content; returns the content after."""


class _Seen:
    """The latest content seen, and who hears of each new one."""

    def __init__(self, value: bytes | None) -> None:
        self.value = value
        self.listeners: list[Listener] = []

    def _set(self, value: bytes | None) -> None:
        if value != self.value:
            self.value = value
            for listener in list(self.listeners):
                listener(value)


class LocalDocument(_Seen):
    """A file of the storage engine, replaced atomically: a crash leaves the old or the new
    content. Also used offline by the tools, while the broker is not running."""

    def __init__(self, storage: StorageEngine, path: str) -> None:
        super().__init__(storage.read_all(path))
        self.storage = storage
        self.path = path

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def read(self) -> bytes | None:
        return self.value

    def change_now(self, compute: Compute) -> bytes | None:
        new = compute(self.value)
        if new is not None and new != self.value:
            self.storage.write_atomic(self.path, new)  # raises: nothing changed
            self._set(new)
        return self.value

    async def change(self, compute: Compute) -> bytes | None:
        return self.change_now(compute)


class EtcdDocument(_Seen):
    """One etcd key through a client of its own. With `watch`, `value` follows the key from
    start() on (a compacted history means reading it again); without, it is only what the
    last read or change saw. A successful change is in `value` before change() returns, so
    the writer's next request reads its own write."""

    def __init__(self, endpoints: Sequence[str], namespace: str, name: str, *, watch: bool) -> None:
        from etcd3aio import Etcd3Client

        super().__init__(None)
        self.key = f"/lockgate/{namespace}/{name}".encode()
        self.watch = watch
        self._client = Etcd3Client(list(endpoints), rpc_max_attempts=3)
        self._seen = 0  # the store revision `value` is as of
        self._task: asyncio.Task[None] | None = None

    @property
    def _kv(self) -> Any:
        assert self._client.kv is not None, "start() first"
        return self._client.kv

    async def start(self) -> None:
        await self._client.connect()
        if self.watch:
            await self._get(timeout=30)
            self._task = asyncio.create_task(self._follow(), name=f"etcd-watch-{self.key.decode()}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._client.close()

    def _take(self, value: bytes | None, revision: int) -> None:
        if revision > self._seen:  # an answer older than what `value` holds changes nothing
            self._seen = revision
            self._set(value)

    async def _get(self, timeout: float = RPC_TIMEOUT) -> Any:
        """The key's item (None: absent), also taken as the latest value seen."""
        got = await self._kv.get(self.key, timeout=timeout)
        item = got.kvs[0] if got.kvs else None
        self._take(bytes(item.value) if item is not None else None, int(got.header.revision))
        return item

    async def _follow(self) -> None:
        backoff = 0.1
        while True:
            try:
                assert self._client.watch is not None
                async for response in self._client.watch.watch(
                    self.key, start_revision=self._seen + 1
                ):
                    if response.compact_revision:
                        # etcd ends this watch: read the key, then watch on from that read
                        await self._get()
                        break
                    for event in response.events:
                        put = int(event.type) == 0
                        self._take(
                            bytes(event.kv.value) if put else None, int(event.kv.mod_revision)
                        )
                    backoff = 0.1
            except Exception as exc:  # any failure of the stream: resume where it stopped
                log.warning("etcd watch of %s interrupted (%s); resuming", self.key, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def read(self) -> bytes | None:
        item = await self._get()
        return bytes(item.value) if item is not None else None

    async def change(self, compute: Compute) -> bytes | None:
        from etcd3aio._protobuf import Compare

        for _attempt in range(CAS_ATTEMPTS):
            item = await self._get()
            current = bytes(item.value) if item is not None else None
            new = compute(current)
            if new is None or new == current:
                return current
            if item is None:
                compare = Compare(
                    result=Compare.EQUAL, target=Compare.CREATE, key=self.key, create_revision=0
                )
            else:
                revision = int(item.mod_revision)
                compare = Compare(
                    result=Compare.EQUAL, target=Compare.MOD, key=self.key, mod_revision=revision
                )
            put = self._kv.txn_op_put(self.key, new)
            response = await self._kv.txn([compare], [put], timeout=RPC_TIMEOUT)
            if response.succeeded:
                self._take(new, int(response.header.revision))
                return new
        raise TimeoutError(f"{self.key.decode()} changed by others {CAS_ATTEMPTS} times in a row")


def open_document(storage: StorageEngine, cluster_url: str, key: str, path: str) -> Document:
    """The cluster's etcd key `key` (watched) when lockgate.cluster names one, else the
    single node's file `path` of the storage engine (read at once)."""
    if cluster_url:
        endpoints, namespace = parse_cluster_url(cluster_url)
        return EtcdDocument(endpoints, namespace, key, watch=True)
    return LocalDocument(storage, path)
