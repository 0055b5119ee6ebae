# Where a partition's tiered segments live in the object store, and the manifest that makes
# one of them exist (KIP-405's RemoteLogSegmentMetadata, kept beside the data).
#
# Objects of one copied segment: {topic}-{topic id}/{partition}/{base offset}-{segment id}
# followed by ".log", ".index", ".timeindex", ".txnindex", ".snapshot" (the producer state at
# the segment's end, when the broker still had it) and, written last, ".manifest" (JSON: the
# offsets, size, timestamps and leader epochs of the segment). The manifest is the commit
# point: a segment is remote once its manifest exists, and is deleted manifest first, so a
# crash at any step leaves either a whole segment or data files with no manifest (orphans,
# which a later pass deletes), never a manifest whose data is missing.
from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass

MANIFEST = ".manifest"
LOG = ".log"
INDEX = ".index"
TIME_INDEX = ".timeindex"
TXN_INDEX = ".txnindex"
PRODUCER_SNAPSHOT = ".snapshot"
DATA_SUFFIXES = (LOG, INDEX, TIME_INDEX, TXN_INDEX, PRODUCER_SNAPSHOT)
MANIFEST_VERSION = 1


def topic_prefix(topic: str, topic_id: uuid.UUID) -> str:
    """A topic's objects: the name for people, the id so that a topic recreated under the
    same name never reads the old one's segments."""
    encoded = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return f"{topic}-{encoded}/"


def partition_prefix(topic: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{topic_prefix(topic, topic_id)}{partition}/"


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One copied segment: offsets base_offset..end_offset (inclusive), `size` bytes of
    batches, the largest record timestamp, and the leader epochs that wrote it as
    (epoch, first offset) pairs."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    segment_id: uuid.UUID
    base_offset: int
    end_offset: int
    size: int
    max_timestamp: int
    epochs: tuple[tuple[int, int], ...]
    broker_id: int
    leader_epoch: int  # the copier's leadership
    created_ms: int
    files: tuple[str, ...]  # the data suffixes uploaded

    @property
    def next_offset(self) -> int:
        return self.end_offset + 1

    @property
    def stem(self) -> str:
        prefix = partition_prefix(self.topic, self.topic_id, self.partition)
        return f"{prefix}{self.base_offset:020d}-{self.segment_id}"

    def key(self, suffix: str) -> str:
        return self.stem + suffix

    def object_keys(self) -> list[str]:
        """Every object of the segment, the manifest first (the order a delete takes)."""
        return [self.key(MANIFEST), *(self.key(s) for s in self.files)]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": MANIFEST_VERSION,
                "topic": self.topic,
                "topic_id": str(self.topic_id),
                "partition": self.partition,
                "segment_id": str(self.segment_id),
                "base_offset": self.base_offset,
                "end_offset": self.end_offset,
                "size": self.size,
                "max_timestamp": self.max_timestamp,
                "epochs": [list(pair) for pair in self.epochs],
                "broker_id": self.broker_id,
                "leader_epoch": self.leader_epoch,
                "created_ms": self.created_ms,
                "files": list(self.files),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> RemoteSegment:
        """A manifest read back; ValueError when it is not one this version can read."""
        try:
            doc = json.loads(raw)
            if doc.get("version") != MANIFEST_VERSION:
                raise ValueError(f"manifest version {doc.get('version')!r}")
            return cls(
                topic=str(doc["topic"]),
                topic_id=uuid.UUID(doc["topic_id"]),
                partition=int(doc["partition"]),
                segment_id=uuid.UUID(doc["segment_id"]),
                base_offset=int(doc["base_offset"]),
                end_offset=int(doc["end_offset"]),
                size=int(doc["size"]),
                max_timestamp=int(doc["max_timestamp"]),
                epochs=tuple((int(e), int(o)) for e, o in doc["epochs"]),
                broker_id=int(doc["broker_id"]),
                leader_epoch=int(doc["leader_epoch"]),
                created_ms=int(doc["created_ms"]),
                files=tuple(str(s) for s in doc["files"]),
            )
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a segment manifest: {exc}") from None


def stem_of(key: str) -> str | None:
    """The segment stem of an object key of a partition prefix, or None if the key is not
    one of a segment's objects."""
    for suffix in (MANIFEST, *DATA_SUFFIXES):
        if key.endswith(suffix):
            return key[: -len(suffix)]
    return None
