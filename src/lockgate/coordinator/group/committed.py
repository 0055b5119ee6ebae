# A group's committed offsets, held as their __consumer_offsets records: offset commit key →
# offset value, the very bytes the log and a snapshot of it hold. A load moves them in with no
# object per offset but the records' own bytes (the replay decodes a record only to check it
# and to find its group: a million live offsets would otherwise be a million tuples and names
# to build, and to scan in every collection); readers ask by (topic, partition) and decode what
# they read (records.decode_offset_value).
#
# Invariant: every key is the one lockgate writes for its (topic, partition) (records.offset_key,
# version 1): a record read in another form (version 0, a null name) is held under that key,
# so that a partition has one entry whatever form its records took.
from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING

from lockgate.coordinator.group.records import offset_key
from lockgate.protocol.fastpath import unpack_fields

if TYPE_CHECKING:
    from lockgate.coordinator.group.group import TopicPartition


class CommittedOffsets(MutableMapping["TopicPartition", bytes]):
    """(topic, partition) → the offset's record value, for one group."""

    __slots__ = ("group_id", "records")

    def __init__(self, group_id: str, offsets: Mapping[TopicPartition, bytes] | None = None):
        self.group_id = group_id
        self.records: dict[bytes, bytes] = {}  # key (lockgate's form) → value
        if offsets:
            self.update(offsets)

    def __getitem__(self, tp: TopicPartition) -> bytes:
        return self.records[offset_key(self.group_id, *tp)]

    def __setitem__(self, tp: TopicPartition, value: bytes) -> None:
        self.records[offset_key(self.group_id, *tp)] = value

    def __delitem__(self, tp: TopicPartition) -> None:
        del self.records[offset_key(self.group_id, *tp)]

    def __contains__(self, tp: object) -> bool:
        if not isinstance(tp, tuple) or len(tp) != 2:
            return False
        topic, partition = tp
        return offset_key(self.group_id, topic, partition) in self.records

    def __iter__(self) -> Iterator[TopicPartition]:
        return map(partition_of, self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return f"CommittedOffsets({self.group_id!r}, {dict(self)!r})"

    def get(self, tp: TopicPartition, default: bytes | None = None) -> bytes | None:  # type: ignore[override]
        return self.records.get(offset_key(self.group_id, *tp), default)

    def pop(self, tp: TopicPartition, default: bytes | None = None) -> bytes | None:  # type: ignore[override]
        return self.records.pop(offset_key(self.group_id, *tp), default)


def partition_of(key: bytes) -> TopicPartition:
    """The (topic, partition) of an offset commit key (one CommittedOffsets holds)."""
    _version, _group, topic, partition = unpack_fields(key, "hssi")
    return (topic or "", partition)
