# Where ACLs live. A single node keeps them in one file of its storage engine (`acls.json`,
# replaced atomically on every change, so a crash leaves the old set or the new one); a cluster
# keeps them in one etcd key changed by compare-and-swap on its mod revision, and every broker
# follows it through a watch, so a change made on one broker applies on all. Both stores hold
# the whole set in memory (`bindings`) and call `listeners` after every change they see.
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from lockgate.security.acls import AclBinding, AclBindingFilter, decode_bindings, encode_bindings
from lockgate.storage.engine import StorageEngine

log = logging.getLogger(__name__)

ACLS_FILE = "acls.json"
RPC_TIMEOUT = 5.0


class AclStore(Protocol):
    bindings: frozenset[AclBinding]
    listeners: list[Callable[[], None]]

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        """Adds the bindings (ones already present stay once), all or none."""

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Removes what each filter matches; returns each filter's removed bindings."""


def _apply_delete(
    current: frozenset[AclBinding], filters: Sequence[AclBindingFilter]
) -> tuple[frozenset[AclBinding], list[list[AclBinding]]]:
    removed = [sorted(b for b in current if f.matches(b)) for f in filters]
    gone = {b for found in removed for b in found}
    return current - gone, removed


class LocalAclStore:
    """The single node's ACLs, in its storage engine (also used offline by `lockgate acls
    --data-dir`, while the broker is not running)."""

    def __init__(self, storage: StorageEngine) -> None:
        self.storage = storage
        data = storage.read_all(ACLS_FILE)
        self.bindings: frozenset[AclBinding] = frozenset(decode_bindings(data) if data else ())
        self.listeners: list[Callable[[], None]] = []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def _replace(self, bindings: frozenset[AclBinding]) -> None:
        if bindings == self.bindings:
            return
        self.storage.write_atomic(ACLS_FILE, encode_bindings(bindings))  # raises: nothing changes
        self.bindings = bindings
        for listener in list(self.listeners):
            listener()

    def create_now(self, bindings: Iterable[AclBinding]) -> None:
        self._replace(self.bindings | frozenset(bindings))

    def delete_now(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        remaining, removed = _apply_delete(self.bindings, filters)
        self._replace(remaining)
        return removed

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        self.create_now(bindings)

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        return self.delete_now(filters)


class EtcdAclStore:
    """The cluster's ACLs: key /lockgate/<namespace>/acls, a JSON list of bindings. A change
    reads the key, computes the new set and writes it only if the key is still at the
    revision read (else reads again), then waits until its own watch has applied the write, so
    the caller's next request sees it."""

    def __init__(self, endpoints: Sequence[str], namespace: str) -> None:
        from etcd3aio import Etcd3Client

        self.key = f"/lockgate/{namespace}/acls".encode()
        self.bindings: frozenset[AclBinding] = frozenset()
        self.listeners: list[Callable[[], None]] = []
        self._client = Etcd3Client(list(endpoints), rpc_max_attempts=3)
        self._revision = 0  # the key's mod revision the view holds (0: absent)
        self._seen = 0  # the store revision the watch has applied up to
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_url(cls, url: str) -> EtcdAclStore:
        from lockgate.cluster.etcd import parse_cluster_url

        endpoints, namespace = parse_cluster_url(url)
        return cls(endpoints, namespace)

    @property
    def _kv(self) -> Any:
        assert self._client.kv is not None, "start() first"
        return self._client.kv

    async def start(self) -> None:
        await self._client.connect()
        response = await self._kv.get(self.key, timeout=30)
        self._take(response.kvs[0] if response.kvs else None, int(response.header.revision))
        self._task = asyncio.create_task(self._watch_loop(), name="etcd-acls-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._client.close()

    def _take(self, item: Any, revision: int) -> None:
        """The key's value (None: deleted or absent) as of store revision `revision`."""
        bindings = frozenset(decode_bindings(bytes(item.value))) if item is not None else None
        self._revision = int(item.mod_revision) if item is not None else 0
        self._seen = max(self._seen, revision)
        new = bindings or frozenset()
        if new != self.bindings:
            self.bindings = new
            for listener in list(self.listeners):
                listener()

    async def _watch_loop(self) -> None:
        from etcd3aio import prefix_range_end

        backoff = 0.1
        while True:
            try:
                assert self._client.watch is not None
                stream = self._client.watch.watch(
                    self.key, prefix_range_end(self.key), start_revision=self._seen + 1
                )
                async for response in stream:
                    if response.compact_revision:  # history gone: read the key again
                        got = await self._kv.get(self.key, timeout=RPC_TIMEOUT)
                        self._take(got.kvs[0] if got.kvs else None, int(got.header.revision))
                    for event in response.events:
                        if bytes(event.kv.key) != self.key:
                            continue  # a longer key under the same prefix
                        revision = int(event.kv.mod_revision)
                        if revision > self._seen:
                            self._take(event.kv if int(event.type) == 0 else None, revision)
                    async with self._changed:
                        self._changed.notify_all()
                    backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure of the stream: resume it
                log.warning("etcd ACL watch interrupted (%s); resuming", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _change(
        self, compute: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]
    ) -> None:
        from etcd3aio._protobuf import Compare

        while True:
            got = await self._kv.get(self.key, timeout=RPC_TIMEOUT)
            item = got.kvs[0] if got.kvs else None
            current = frozenset(decode_bindings(bytes(item.value))) if item is not None else None
            new = compute(current or frozenset())
            if new == (current or frozenset()):
                return
            if item is None:
                compare = Compare(
                    result=Compare.EQUAL, target=Compare.CREATE, key=self.key, create_revision=0
                )
            else:
                compare = Compare(
                    result=Compare.EQUAL,
                    target=Compare.MOD,
                    key=self.key,
                    mod_revision=int(item.mod_revision),
                )
            put = self._kv.txn_op_put(self.key, encode_bindings(new))
            response = await self._kv.txn([compare], [put], timeout=RPC_TIMEOUT)
            if response.succeeded:
                await self._reach(int(response.header.revision))
                return

    async def _reach(self, revision: int) -> None:
        """Until the watch has applied `revision`: the writer reads its own write."""
        async with asyncio.timeout(30), self._changed:
            await self._changed.wait_for(lambda: self._seen >= revision)

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        await self._change(lambda current: current | frozenset(bindings))

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        removed: list[list[AclBinding]] = []

        def compute(current: frozenset[AclBinding]) -> frozenset[AclBinding]:
            nonlocal removed
            remaining, removed = _apply_delete(current, filters)
            return remaining

        await self._change(compute)
        return removed
