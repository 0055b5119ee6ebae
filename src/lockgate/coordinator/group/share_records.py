# Share groups' records in __consumer_offsets, in Kafka 4.4's layout (record types 10–15 of
# the group coordinator's message schemas, ShareGroup*.json), so that Kafka's tools can read them
# and a share group survives a restart: keys are an int16 record type then classic strings
# (key version 0, not flexible); values an int16 value version (0) then a flexible struct
# (compact strings and arrays, tagged fields). A tombstone has no value.
#
# Invariant: assignments are written by topic id; a topic unknown when a record is read back
# (deleted since) is left out of the assignment. Record 15 carries each topic's id and name
# itself and is read back whole.
from __future__ import annotations

import uuid
from collections.abc import Mapping

from lockgate.coordinator.group.assignors import Assignment

# (the compact-encoding reader and writer of the consumer-protocol records)
from lockgate.coordinator.group.consumer_records import _In, _Out
from lockgate.coordinator.group.share_group import (
    ShareMember,
    ShareRecord,
    ShareRecordKind,
    StatePartitions,
    TopicInit,
)

VALUE_VERSION = 0
ASSIGNMENT_TIMESTAMP_TAG = 0  # ShareGroupTargetAssignmentMetadataValue (KIP-1263, Kafka 4.3+)
SHARE_KEY_VERSIONS = frozenset(int(k) for k in ShareRecordKind)
WITH_MEMBER = frozenset(
    {ShareRecordKind.MEMBER, ShareRecordKind.TARGET_MEMBER, ShareRecordKind.CURRENT_ASSIGNMENT}
)


def _array_size(out: _Out, size: int) -> None:
    out.uvarint(size + 1)


def _assignment(out: _Out, assignment: Assignment, ids: Mapping[str, uuid.UUID]) -> None:
    known = [(t, parts) for t, parts in sorted(assignment.items()) if t in ids]
    _array_size(out, len(known))
    for topic, parts in known:
        out.data += ids[topic].bytes
        _array_size(out, len(parts))
        for p in sorted(parts):
            out.fixed(">i", p)
        out.no_tags()


def _read_assignment(reader: _In, names: Mapping[uuid.UUID, str]) -> Assignment:
    result: dict[str, frozenset[int]] = {}
    for _ in range(max(reader.uvarint() - 1, 0)):
        topic_id = uuid.UUID(bytes=reader.take(16))
        parts = frozenset(reader.fixed(">i") for _ in range(max(reader.uvarint() - 1, 0)))
        reader.skip_tags()
        name = names.get(topic_id)
        if name is not None:
            result[name] = parts
    return result


def _topics(out: _Out, entries: Mapping[uuid.UUID, TopicInit]) -> None:
    ordered = sorted(entries.items(), key=lambda item: (item[1].name, item[0].bytes))
    _array_size(out, len(ordered))
    for topic_id, entry in ordered:
        out.data += topic_id.bytes
        out.compact_string(entry.name)
        _array_size(out, len(entry.partitions))
        for p in sorted(entry.partitions):
            out.fixed(">i", p)
        out.no_tags()


def _read_topics(reader: _In) -> dict[uuid.UUID, TopicInit]:
    result: dict[uuid.UUID, TopicInit] = {}
    for _ in range(max(reader.uvarint() - 1, 0)):
        topic_id = uuid.UUID(bytes=reader.take(16))
        name = reader.compact_string() or ""
        parts = frozenset(reader.fixed(">i") for _ in range(max(reader.uvarint() - 1, 0)))
        reader.skip_tags()
        result[topic_id] = TopicInit(name, parts)
    return result


def encode(record: ShareRecord, ids: Mapping[str, uuid.UUID]) -> tuple[bytes, bytes | None]:
    """(key, value) of a record; `ids`: topic name → topic id."""
    key = _Out()
    key.fixed(">h", int(record.kind))
    key.string(record.group_id)
    if record.kind in WITH_MEMBER:
        key.string(record.member_id or "")
    value = record.value
    if value is None:
        return bytes(key.data), None
    out = _Out()
    out.fixed(">h", VALUE_VERSION)
    if record.kind == ShareRecordKind.MEMBER:
        assert isinstance(value, ShareMember)
        out.compact_string(value.rack_id)
        out.compact_string(value.client_id)
        out.compact_string(value.client_host)
        _array_size(out, len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            out.compact_string(name)
    elif record.kind == ShareRecordKind.GROUP_EPOCH:
        assert isinstance(value, tuple)
        out.fixed(">i", value[0])
        out.fixed(">q", value[1])
    elif record.kind == ShareRecordKind.TARGET_EPOCH:
        assert isinstance(value, tuple)
        epoch, timestamp = value
        out.fixed(">i", epoch)
        if timestamp:  # a tagged field is written only when it is not its default (0)
            tagged = _Out()
            tagged.fixed(">q", timestamp)
            out.uvarint(1)
            out.uvarint(ASSIGNMENT_TIMESTAMP_TAG)
            out.uvarint(len(tagged.data))
            out.data += tagged.data
            return bytes(key.data), bytes(out.data)
    elif record.kind == ShareRecordKind.TARGET_MEMBER:
        assert isinstance(value, dict)
        _assignment(out, value, ids)
    elif record.kind == ShareRecordKind.CURRENT_ASSIGNMENT:
        assert isinstance(value, ShareMember)
        out.fixed(">i", value.member_epoch)
        out.fixed(">i", value.previous_member_epoch)
        out.fixed(">b", value.state)
        _assignment(out, value.assigned, ids)
    else:  # STATE_PARTITIONS
        assert isinstance(value, StatePartitions)
        _topics(out, value.initializing)
        _topics(out, value.initialized)
        deleting = sorted(value.deleting.items(), key=lambda item: (item[1], item[0].bytes))
        _array_size(out, len(deleting))
        for topic_id, name in deleting:
            out.data += topic_id.bytes
            out.compact_string(name)
            out.no_tags()
    out.no_tags()
    return bytes(key.data), bytes(out.data)


def record_kind(key: bytes) -> ShareRecordKind | None:
    """The share record type of a key, None for a record of another kind."""
    if len(key) < 2:
        return None
    version = int.from_bytes(key[:2], "big", signed=True)
    return ShareRecordKind(version) if version in SHARE_KEY_VERSIONS else None


def decode(key: bytes, value: bytes | None, names: Mapping[uuid.UUID, str]) -> ShareRecord:
    """A record read back; `names`: topic id → topic name. Raises ValueError when damaged."""
    reader = _In(key)
    kind = ShareRecordKind(reader.fixed(">h"))
    group_id = reader.string()
    member_id = reader.string() if kind in WITH_MEMBER else None
    if value is None:
        return ShareRecord(kind, group_id, member_id, None)
    data = _In(value)
    data.fixed(">h")  # the value version: newer fields are tagged
    decoded: object
    if kind == ShareRecordKind.MEMBER:
        rack = data.compact_string()
        client_id = data.compact_string() or ""
        client_host = data.compact_string() or ""
        topics = tuple(data.compact_string() or "" for _ in range(max(data.uvarint() - 1, 0)))
        decoded = ShareMember(
            member_id or "", rack_id=rack, client_id=client_id, client_host=client_host,
            subscribed_topic_names=topics,
        )  # fmt: skip
    elif kind == ShareRecordKind.GROUP_EPOCH:
        decoded = (data.fixed(">i"), data.fixed(">q"))
    elif kind == ShareRecordKind.TARGET_EPOCH:
        epoch = data.fixed(">i")
        timestamp = 0
        for _ in range(data.uvarint()):
            tag, raw = data.uvarint(), data.take(data.uvarint())
            if tag == ASSIGNMENT_TIMESTAMP_TAG:
                timestamp = _In(raw).fixed(">q")
        decoded = (epoch, timestamp)
        return ShareRecord(kind, group_id, member_id, decoded)
    elif kind == ShareRecordKind.TARGET_MEMBER:
        decoded = dict(_read_assignment(data, names))
    elif kind == ShareRecordKind.CURRENT_ASSIGNMENT:
        epoch = data.fixed(">i")
        previous = data.fixed(">i")
        state = data.fixed(">b")
        decoded = ShareMember(
            member_id or "", member_epoch=epoch, previous_member_epoch=previous, state=state,
            assigned=_read_assignment(data, names),
        )  # fmt: skip
    else:
        initializing = _read_topics(data)
        initialized = _read_topics(data)
        deleting: dict[uuid.UUID, str] = {}
        for _ in range(max(data.uvarint() - 1, 0)):
            topic_id = uuid.UUID(bytes=data.take(16))
            deleting[topic_id] = data.compact_string() or ""
            data.skip_tags()
        decoded = StatePartitions(initializing, initialized, deleting)
    data.skip_tags()
    return ShareRecord(kind, group_id, member_id, decoded)
