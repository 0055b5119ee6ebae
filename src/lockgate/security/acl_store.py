# Where ACLs live: one document (lockgate.storage.documents) holding the JSON list of bindings.
# A single node keeps it in its storage engine (`acls.json`); a cluster keeps it in the etcd
# key `acls`, which every broker watches, so a change made on one broker applies on all. The
# store holds the whole set in memory (`bindings`) and calls `listeners` after every change.
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from lockgate.security.acls import AclBinding, AclBindingFilter, decode_bindings, encode_bindings
from lockgate.storage.documents import (
    Compute,
    Document,
    EtcdDocument,
    LocalDocument,
    parse_cluster_url,
)
from lockgate.storage.engine import StorageEngine

ACLS_FILE = "acls.json"
Bindings = frozenset[AclBinding]


def _decode(data: bytes | None) -> Bindings:
    return frozenset(decode_bindings(data) if data else ())


def _changing(change: Callable[[Bindings], Bindings]) -> Compute:
    def compute(data: bytes | None) -> bytes | None:
        current = _decode(data)
        new = change(current)
        return None if new == current else encode_bindings(new)

    return compute


def _adding(bindings: Iterable[AclBinding]) -> Compute:
    """Adds the bindings (ones already present stay once), all or none."""
    added = frozenset(bindings)
    return _changing(lambda current: current | added)


def _removing(filters: Sequence[AclBindingFilter], removed: list[list[AclBinding]]) -> Compute:
    """Removes what each filter matches, and leaves in `removed` each filter's bindings."""

    def change(current: Bindings) -> Bindings:
        removed[:] = [sorted(b for b in current if f.matches(b)) for f in filters]
        return current - {b for found in removed for b in found}

    return _changing(change)


class AclStore:
    def __init__(self, document: Document) -> None:
        self.document = document
        self.bindings: Bindings = frozenset()
        self.listeners: list[Callable[[], None]] = []
        document.listeners.append(self._take)
        self._take(document.value)

    def _take(self, data: bytes | None) -> None:
        bindings = _decode(data)
        if bindings != self.bindings:
            self.bindings = bindings
            for listener in list(self.listeners):
                listener()

    async def start(self) -> None:
        await self.document.start()

    async def close(self) -> None:
        await self.document.close()

    async def create(self, bindings: Sequence[AclBinding]) -> None:
        await self.document.change(_adding(bindings))

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Removes what each filter matches; returns each filter's removed bindings."""
        removed: list[list[AclBinding]] = []
        await self.document.change(_removing(filters, removed))
        return removed


class LocalAclStore(AclStore):
    """The single node's ACLs, in its storage engine (also used offline by `lockgate acls
    --data-dir`, while the broker is not running)."""

    def __init__(self, storage: StorageEngine) -> None:
        self.local = LocalDocument(storage, ACLS_FILE)
        super().__init__(self.local)

    def create_now(self, bindings: Iterable[AclBinding]) -> None:
        self.local.change_now(_adding(bindings))

    def delete_now(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        removed: list[list[AclBinding]] = []
        self.local.change_now(_removing(filters, removed))
        return removed


class EtcdAclStore(AclStore):
    """The cluster's ACLs: key /lockgate/<namespace>/acls, followed by a watch."""

    def __init__(self, endpoints: Sequence[str], namespace: str) -> None:
        super().__init__(EtcdDocument(endpoints, namespace, "acls", watch=True))

    @classmethod
    def from_url(cls, url: str) -> EtcdAclStore:
        return cls(*parse_cluster_url(url))
