# tools/remote.py — the tools' view of tiered storage: the `--remote-config FILE` option (the
# object store's settings: the broker's rsm.config.s3.* lines or the unprefixed s3.* names,
# credentials from the file or the AWS environment variables) and each partition's remote
# segments as its manifests in the store say, the same truth a leader rebuilds its remote log
# from (tiered.listing.scan_objects, RemoteLog.load). Kafka's DescribeLogDirs has no remote
# size, so the tools ask the store rather than invent a wire field.
#
# Invariants: the store is only read (lists and gets): orphans are reported, never deleted;
# the secret access key is never printed (S3Settings' repr hides it, S3ObjectStore scrubs it
# from its errors), and an object store failure is one line on stderr, not a traceback.
from __future__ import annotations

import argparse
import base64
import binascii
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lockgate.client.admin import Admin
from lockgate.config.properties import ConfigError, parse_properties
from lockgate.storage.object_store import (
    ObjectInfo,
    ObjectStore,
    ObjectStoreError,
    S3ObjectStore,
    S3Settings,
)
from lockgate.tiered.layout import RemoteSegment, partition_prefix, topic_prefix
from lockgate.tiered.listing import scan_objects
from lockgate.tiered.remote_log import RemoteLog
from lockgate.tools.common import AsyncCommand, ToolError, run

# The broker's default remote.log.storage.manager.impl.prefix; a file that sets another one
# (the broker's own properties file) is read with its own.
IMPL_PREFIX_PROPERTY = "remote.log.storage.manager.impl.prefix"
DEFAULT_IMPL_PREFIX = "rsm.config."
_S3_NAMES = "s3."
_TOPIC_ID_CHARS = 22  # a 16-byte id in unpadded url-safe base64 (layout.topic_prefix)
PartitionKey = tuple[str, int]


def remote_options() -> argparse.ArgumentParser:
    """`--remote-config FILE`, as a parent parser (after the subcommand, like the connection
    options)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--remote-config",
        type=Path,
        metavar="FILE",
        help="tiered storage: the object store's properties (the broker's rsm.config.s3.* "
        "lines or s3.bucket, s3.endpoint, ...; credentials from it or the AWS_* environment)",
    )
    return parent


def remote_settings(path: Path, environ: Mapping[str, str] | None = None) -> S3Settings:
    """The object store settings of a --remote-config file: its s3.* names, overridden by the
    same names under the remote storage manager's prefix (rsm.config.s3.bucket, ...)."""
    try:
        properties = parse_properties(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ToolError(f"--remote-config: {exc}") from None
    except ConfigError as exc:
        raise ToolError(f"--remote-config {path}: {exc}") from None
    prefix = properties.get(IMPL_PREFIX_PROPERTY, DEFAULT_IMPL_PREFIX)
    names = {k: v for k, v in properties.items() if k.startswith(_S3_NAMES)}
    names.update({k[len(prefix) :]: v for k, v in properties.items() if k.startswith(prefix)})
    try:
        return S3Settings.from_properties(names, environ)
    except ValueError as exc:
        raise ToolError(f"--remote-config {path}: {exc}") from None


def open_store(args: argparse.Namespace) -> ObjectStore | None:
    """The store of --remote-config, or None without it."""
    if args.remote_config is None:
        return None
    with store_errors():
        return S3ObjectStore(remote_settings(args.remote_config))


@contextmanager
def store_errors() -> Iterator[None]:
    """An object store failure as a ToolError: `lockgate <tool>: error: object store: ...`."""
    try:
        yield
    except ObjectStoreError as exc:
        raise ToolError(f"object store: {exc}") from None


def remote_tool(command: AsyncCommand) -> Callable[[argparse.Namespace], int]:
    """`common.tool` for a command that may use the object store."""

    def entry(args: argparse.Namespace) -> int:
        code = run(command, args)
        if getattr(args, "remote_config", None) is not None:
            # the object store client's threads may still be handing a finished request back
            # to Python; one doing so while the interpreter finalizes aborts the process
            # (SIGABRT), so the process lingers a moment before it exits
            time.sleep(0.1)
        return code

    return entry


@dataclass(frozen=True, slots=True)
class RemotePartition:
    """What the object store holds of one partition."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    segments: tuple[RemoteSegment, ...]  # the remote log, in offset order, as a leader holds it
    superseded: tuple[RemoteSegment, ...]  # overlapped by a newer copy: a leader deletes them
    orphans: tuple[str, ...]  # keys no manifest owns: a leader deletes them

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def start_offset(self) -> int | None:
        return self.segments[0].base_offset if self.segments else None

    @property
    def end_offset(self) -> int | None:
        """The last offset copied (None: none is)."""
        return self.segments[-1].end_offset if self.segments else None

    def segment_holding(self, offset: int) -> RemoteSegment | None:
        return next((s for s in self.segments if s.base_offset <= offset <= s.end_offset), None)


async def remote_partitions(
    store: ObjectStore, topics: Mapping[str, uuid.UUID]
) -> dict[PartitionKey, RemotePartition]:
    """The remote part of every partition of these topics (name → id: a topic recreated under
    the same name has other objects) that has anything in the store. One listing: the
    topic's prefix for one topic, the whole store for several."""
    owners = {topic_prefix(name, topic_id): (name, topic_id) for name, topic_id in topics.items()}
    if not owners:
        return {}
    with store_errors():
        objects = await store.list(next(iter(owners)) if len(owners) == 1 else "")
        return await _partitions(store, objects, owners)


async def remote_partition(
    store: ObjectStore, topic: str, topic_id: uuid.UUID, partition: int
) -> RemotePartition:
    """One partition's remote part (empty when the store holds nothing of it)."""
    with store_errors():
        objects = await store.list(partition_prefix(topic, topic_id, partition))
        owner = {topic_prefix(topic, topic_id): (topic, topic_id)}
        found = await _partitions(store, objects, owner)
    return found.get((topic, partition)) or RemotePartition(topic, topic_id, partition, (), (), ())


async def _partitions(
    store: ObjectStore,
    objects: list[ObjectInfo],
    owners: Mapping[str, tuple[str, uuid.UUID]],
) -> dict[PartitionKey, RemotePartition]:
    listed: dict[tuple[str, uuid.UUID, int], list[ObjectInfo]] = defaultdict(list)
    for info in objects:
        head, _sep, rest = info.key.partition("/")
        owner = owners.get(head + "/")
        number = rest.split("/", 1)[0]
        if owner is not None and number.isdigit():
            listed[(*owner, int(number))].append(info)
    result: dict[PartitionKey, RemotePartition] = {}
    for (name, topic_id, partition), infos in sorted(listed.items()):
        found, orphans = await scan_objects(store, infos)
        remote, superseded = RemoteLog.load(found)
        result[(name, partition)] = RemotePartition(
            name, topic_id, partition, tuple(remote.segments), tuple(superseded), tuple(orphans)
        )
    return result


async def topic_ids(admin: Admin, names: set[str]) -> dict[str, uuid.UUID]:
    """The ids of the topics that exist now (a name whose topic is gone, or whose broker
    does not say its id, is left out)."""
    if not names:
        return {}
    metadata = await admin.cluster.refresh_metadata(sorted(names))
    return {
        name: info.topic_id
        for name, info in metadata.topics.items()
        if name in names and info.topic_id is not None and info.topic_id.int != 0
    }


async def stored_topic_ids(store: ObjectStore, topic: str) -> list[uuid.UUID]:
    """The ids under which the store holds objects of a topic named `topic` (offline: no
    broker to ask; more than one when an earlier topic of that name left objects behind)."""
    with store_errors():
        objects = await store.list(f"{topic}-")
    found: set[uuid.UUID] = set()
    for info in objects:
        head = info.key.split("/", 1)[0]
        if head[: -_TOPIC_ID_CHARS - 1] != topic or len(head) != len(topic) + _TOPIC_ID_CHARS + 1:
            continue
        try:
            topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(head[-_TOPIC_ID_CHARS:] + "=="))
        except (ValueError, binascii.Error):
            continue
        if topic_prefix(topic, topic_id) == head + "/":
            found.add(topic_id)
    return sorted(found, key=str)
