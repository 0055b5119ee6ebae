# Where client quotas live: one document (lockgate.storage.documents) holding the whole table.
# A single node keeps it in its storage engine (`client-quotas.json`); a cluster keeps it in
# the etcd key `client-quotas`, which every broker watches, so an AlterClientQuotas answered by
# one broker applies on all. The store holds the table in memory (`table`) and calls
# `listeners` with every new table it sees, which is how a change reaches connected clients.
from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from lockgate.security.quotas import Alteration, QuotaEntity, QuotaTable, apply_alterations
from lockgate.storage.documents import Document, EtcdDocument, LocalDocument, parse_cluster_url
from lockgate.storage.engine import StorageEngine

QUOTAS_FILE = "client-quotas.json"
Listener = Callable[[QuotaTable], None]


def encode_table(table: QuotaTable) -> bytes:
    entries = [
        {"entity": entity.as_dict(), "values": dict(sorted(values.items()))}
        for entity, values in sorted(table.items(), key=lambda item: item[0].describe())
    ]
    return json.dumps({"version": 1, "entries": entries}, sort_keys=True).encode()


def decode_table(data: bytes | None) -> QuotaTable:
    if not data:
        return {}
    document = json.loads(data)
    return {
        QuotaEntity.of(entry["entity"]): {str(k): float(v) for k, v in entry["values"].items()}
        for entry in document["entries"]
    }


class QuotaStore:
    def __init__(self, document: Document) -> None:
        self.document = document
        self.table: QuotaTable = {}
        self.listeners: list[Listener] = []
        document.listeners.append(self._take)
        self._take(document.value)

    def _take(self, data: bytes | None) -> None:
        table = decode_table(data)
        if table != self.table:
            self.table = table
            for listener in list(self.listeners):
                listener(table)

    async def start(self) -> None:
        await self.document.start()

    async def close(self) -> None:
        await self.document.close()

    async def alter(self, alterations: Sequence[Alteration]) -> None:
        """Applies every alteration, all or none, and returns once this broker enforces them."""

        def compute(data: bytes | None) -> bytes | None:
            current = decode_table(data)
            table = apply_alterations(current, alterations)
            return None if table == current else encode_table(table)

        await self.document.change(compute)


class LocalQuotaStore(QuotaStore):
    """The single node's quotas, in its storage engine; loaded when built, so a broker
    enforces them from its first request."""

    def __init__(self, storage: StorageEngine) -> None:
        super().__init__(LocalDocument(storage, QUOTAS_FILE))


class EtcdQuotaStore(QuotaStore):
    """The cluster's quotas: key /lockgate/<namespace>/client-quotas, followed by a watch."""

    def __init__(self, endpoints: Sequence[str], namespace: str) -> None:
        super().__init__(EtcdDocument(endpoints, namespace, "client-quotas", watch=True))

    @classmethod
    def from_url(cls, url: str) -> EtcdQuotaStore:
        return cls(*parse_cluster_url(url))


def open_quota_store(storage: StorageEngine, cluster_url: str) -> QuotaStore:
    """The cluster's store when lockgate.cluster names one, else the single node's."""
    if cluster_url:
        return EtcdQuotaStore.from_url(cluster_url)
    return LocalQuotaStore(storage)
