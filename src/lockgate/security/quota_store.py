# Where client quotas live. A single node keeps the whole table in one file of its storage
# engine (`client-quotas.json`, replaced atomically, so a crash leaves the old table or the new
# one); a cluster keeps it in one etcd key changed only by compare-and-swap on the key's mod
# revision and followed by every broker through a watch, so an AlterClientQuotas answered by
# one broker applies on all. Both hold the table in memory (`table`) and call `listeners` with
# every new table they see, which is how a change reaches connected clients at once.
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lockgate.security.quotas import Alteration, QuotaEntity, QuotaTable, apply_alterations
from lockgate.storage.engine import StorageEngine

log = logging.getLogger(__name__)

QUOTAS_FILE = "client-quotas.json"
RPC_TIMEOUT = 5.0
Listener = Callable[[QuotaTable], None]


def encode_table(table: QuotaTable) -> bytes:
    entries = [
        {"entity": entity.as_dict(), "values": dict(sorted(values.items()))}
        for entity, values in sorted(table.items(), key=lambda item: item[0].describe())
    ]
    return json.dumps({"version": 1, "entries": entries}, sort_keys=True).encode()


def decode_table(data: bytes) -> QuotaTable:
    document = json.loads(data)
    return {
        QuotaEntity.of(entry["entity"]): {str(k): float(v) for k, v in entry["values"].items()}
        for entry in document["entries"]
    }


class QuotaStore(Protocol):
    table: QuotaTable
    listeners: list[Listener]

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def alter(self, alterations: Sequence[Alteration]) -> None:
        """Applies every alteration, all or none, and returns once this broker enforces them."""


class LocalQuotaStore:
    """The single node's quotas, in its storage engine; loaded when built, so a broker
    enforces them from its first request."""

    def __init__(self, storage: StorageEngine) -> None:
        self.storage = storage
        data = storage.read_all(QUOTAS_FILE)
        self.table: QuotaTable = decode_table(data) if data else {}
        self.listeners: list[Listener] = []

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def alter(self, alterations: Sequence[Alteration]) -> None:
        table = apply_alterations(self.table, alterations)
        if table == self.table:
            return
        self.storage.write_atomic(QUOTAS_FILE, encode_table(table))  # raises: nothing changed
        self.table = table
        for listener in list(self.listeners):
            listener(table)


class EtcdQuotaStore:
    """The cluster's quotas: key /lockgate/<namespace>/client-quotas. An alteration reads the
    key, writes the new table only if the key is still at the revision read (else reads
    again), and waits until this broker's watch has applied its own write."""

    def __init__(self, endpoints: Sequence[str], namespace: str) -> None:
        from etcd3aio import Etcd3Client

        self.key = f"/lockgate/{namespace}/client-quotas".encode()
        self.table: QuotaTable = {}
        self.listeners: list[Listener] = []
        self._client = Etcd3Client(list(endpoints), rpc_max_attempts=3)
        self._seen = 0  # the store revision the view has applied up to
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def from_url(cls, url: str) -> EtcdQuotaStore:
        from lockgate.cluster.etcd import parse_cluster_url

        endpoints, namespace = parse_cluster_url(url)
        return cls(endpoints, namespace)

    @property
    def _kv(self) -> Any:
        assert self._client.kv is not None, "start() first"
        return self._client.kv

    async def start(self) -> None:
        await self._client.connect()
        got = await self._kv.get(self.key, timeout=30)
        self._take(got.kvs[0] if got.kvs else None, int(got.header.revision))
        self._task = asyncio.create_task(self._follow(), name="etcd-client-quotas-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._client.close()

    def _take(self, item: Any, revision: int) -> None:
        """The key's value (None: absent or deleted) as of store revision `revision`."""
        self._seen = max(self._seen, revision)
        table = decode_table(bytes(item.value)) if item is not None else {}
        if table != self.table:
            self.table = table
            for listener in list(self.listeners):
                listener(table)

    async def _follow(self) -> None:
        from etcd3aio import prefix_range_end

        backoff = 0.1
        while True:
            try:
                assert self._client.watch is not None
                stream = self._client.watch.watch(
                    self.key, prefix_range_end(self.key), start_revision=self._seen + 1
                )
                async for response in stream:
                    if response.compact_revision:  # the history is gone: read the key again
                        got = await self._kv.get(self.key, timeout=RPC_TIMEOUT)
                        self._take(got.kvs[0] if got.kvs else None, int(got.header.revision))
                    for event in response.events:
                        revision = int(event.kv.mod_revision)
                        if bytes(event.kv.key) == self.key and revision > self._seen:
                            self._take(event.kv if int(event.type) == 0 else None, revision)
                    async with self._changed:
                        self._changed.notify_all()
                    backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure of the stream: resume where it stopped
                log.warning("etcd client-quota watch interrupted (%s); resuming", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def alter(self, alterations: Sequence[Alteration]) -> None:
        from etcd3aio._protobuf import Compare

        while True:
            got = await self._kv.get(self.key, timeout=RPC_TIMEOUT)
            item = got.kvs[0] if got.kvs else None
            current = decode_table(bytes(item.value)) if item is not None else {}
            table = apply_alterations(current, alterations)
            if table == current:
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
            put = self._kv.txn_op_put(self.key, encode_table(table))
            response = await self._kv.txn([compare], [put], timeout=RPC_TIMEOUT)
            if response.succeeded:
                await self._reach(int(response.header.revision))
                return

    async def _reach(self, revision: int) -> None:
        """Until the watch has applied `revision` (this broker then enforces the write)."""
        async with asyncio.timeout(30), self._changed:
            await self._changed.wait_for(lambda: self._seen >= revision)


def open_quota_store(storage: StorageEngine, cluster_url: str) -> LocalQuotaStore | EtcdQuotaStore:
    """The cluster's store when lockgate.cluster names one, else the single node's."""
    if cluster_url:
        return EtcdQuotaStore.from_url(cluster_url)
    return LocalQuotaStore(storage)
