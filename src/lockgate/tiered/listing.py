# Reading a partition's remote log from the object store: the manifests under its prefix
# (each one a committed segment) and the objects no manifest owns (orphans: what an
# interrupted copy or delete left). The leader rebuilding its remote log, a follower following
# its leader's copies and the tools (log-dirs, dump-log --remote-list) read it the same way.
from __future__ import annotations

import logging
from collections.abc import Sequence

from lockgate.storage.object_store import ObjectInfo, ObjectNotFound, ObjectStore
from lockgate.tiered.layout import MANIFEST, RemoteSegment, stem_of

log = logging.getLogger(__name__)


async def scan(
    store: ObjectStore, prefix: str, known: dict[str, RemoteSegment] | None = None
) -> tuple[list[RemoteSegment], list[str]]:
    """The manifests under `prefix` and the keys of the objects no manifest owns (orphans:
    what an interrupted copy or delete left). `known` (manifests by key, kept up to date
    here) spares reading again the manifests read before."""
    return await scan_objects(store, await store.list(prefix), known)


async def scan_objects(
    store: ObjectStore,
    objects: Sequence[ObjectInfo],
    known: dict[str, RemoteSegment] | None = None,
) -> tuple[list[RemoteSegment], list[str]]:
    """`scan` of objects already listed (the tools list a whole store once)."""
    known = {} if known is None else known
    manifests = [o.key for o in objects if o.key.endswith(MANIFEST)]
    for key in set(known) - set(manifests):
        del known[key]  # deleted since
    found: list[RemoteSegment] = []
    for key in manifests:
        segment = known.get(key)
        if segment is None:
            try:
                segment = known[key] = RemoteSegment.decode(await store.get(key))
            except ObjectNotFound:
                continue  # deleted since the listing (by the leader's retention)
            except ValueError as exc:
                log.warning("%s: not a manifest this broker reads (%s): left alone", key, exc)
                continue
        found.append(segment)
    owned = {s.stem for s in found} | {k[: -len(MANIFEST)] for k in manifests}
    orphans = [o.key for o in objects if stem_of(o.key) not in owned]
    return found, orphans
