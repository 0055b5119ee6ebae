# The consumer group protocol's records in __consumer_offsets, in Kafka's layout (key versions
# 3–8 of the group coordinator's message schemas), so that Kafka's tools can read them and a
# group survives a restart: keys are an int16 key version then classic strings; values are an
# int16 value version (0) then a flexible struct (compact strings and arrays, tagged fields).
#
# Invariant: partitions are written by topic id, as Kafka does; topics unknown when a record is
# read back (deleted since) are left out of the assignment. A member's current assignment
# carries each partition's assignment epoch (KIP-1251) in the tagged field 0 AssignmentEpochs
# of its topic entries, aligned with Partitions, as Kafka 4.3+ writes it; a record without
# them (older Kafka or lockgate), or with a list of another length, reads as every partition
# assigned at the record's member epoch (at least 0), the conservative reading Kafka gives it.
from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping

from lockgate.coordinator.group.assignors import Assignment
from lockgate.coordinator.group.consumer_group import (
    ClassicMember,
    ConsumerMember,
    ConsumerRecord,
    MemberState,
    PartitionEpochs,
    RecordKind,
)

VALUE_VERSION = 0
ASSIGNMENT_EPOCHS_TAG = 0  # in ConsumerGroupCurrentMemberAssignmentValue's TopicPartitions
CONSUMER_KEY_VERSIONS = frozenset(int(k) for k in RecordKind)
WITH_MEMBER = frozenset(
    {RecordKind.MEMBER, RecordKind.TARGET_MEMBER, RecordKind.CURRENT_ASSIGNMENT}
)
STATE_CODES = {
    MemberState.STABLE: 0,
    MemberState.UNREVOKED_PARTITIONS: 1,
    MemberState.UNRELEASED_PARTITIONS: 2,
}
STATES = {code: state for state, code in STATE_CODES.items()}


class _Out:
    def __init__(self) -> None:
        self.data = bytearray()

    def fixed(self, fmt: str, value: int) -> None:
        self.data += struct.pack(fmt, value)

    def uvarint(self, value: int) -> None:
        while value >= 0x80:
            self.data.append((value & 0x7F) | 0x80)
            value >>= 7
        self.data.append(value)

    def compact_string(self, value: str | None) -> None:
        if value is None:
            self.uvarint(0)
            return
        raw = value.encode()
        self.uvarint(len(raw) + 1)
        self.data += raw

    def string(self, value: str) -> None:  # classic (keys)
        raw = value.encode()
        self.fixed(">h", len(raw))
        self.data += raw

    def no_tags(self) -> None:
        self.uvarint(0)


class _In:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        if size < 0 or size > len(self.data) - self.pos:
            raise ValueError(f"record cut short: {size} bytes wanted at {self.pos}")
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        return raw

    def fixed(self, fmt: str) -> int:
        layout = struct.Struct(fmt)
        return int(layout.unpack(self.take(layout.size))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise ValueError("varint too long")

    def compact_string(self) -> str | None:
        size = self.uvarint()
        return None if size == 0 else self.take(size - 1).decode()

    def string(self) -> str:
        return self.take(self.fixed(">h")).decode()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def _partitions(
    out: _Out,
    assignment: Assignment,
    ids: Mapping[str, uuid.UUID],
    epochs: Mapping[str, Mapping[int, int]] | None = None,
) -> None:
    """`epochs` (a current assignment's): each partition's assignment epoch, written as the
    topic entry's AssignmentEpochs tagged field."""
    known = [(t, parts) for t, parts in sorted(assignment.items()) if t in ids]
    out.uvarint(len(known) + 1)
    for topic, parts in known:
        ordered = sorted(parts)
        out.data += ids[topic].bytes
        out.uvarint(len(ordered) + 1)
        for p in ordered:
            out.fixed(">i", p)
        if epochs is None:
            out.no_tags()
            continue
        tagged = _Out()
        tagged.uvarint(len(ordered) + 1)
        for p in ordered:
            tagged.fixed(">i", epochs[topic][p])
        out.uvarint(1)
        out.uvarint(ASSIGNMENT_EPOCHS_TAG)
        out.uvarint(len(tagged.data))
        out.data += tagged.data


def _read_partitions(reader: _In, names: Mapping[uuid.UUID, str]) -> dict[str, frozenset[int]]:
    return {topic: frozenset(parts) for topic, parts in _read_epochs(reader, names, 0).items()}


def _read_epochs(
    reader: _In, names: Mapping[uuid.UUID, str], default_epoch: int
) -> dict[str, dict[int, int]]:
    """Topic entries with their AssignmentEpochs: partition → epoch, `default_epoch` for
    every partition of an entry without a list of the same length."""
    result: dict[str, dict[int, int]] = {}
    for _ in range(max(reader.uvarint() - 1, 0)):
        topic_id = uuid.UUID(bytes=reader.take(16))
        parts = [reader.fixed(">i") for _ in range(max(reader.uvarint() - 1, 0))]
        epochs: list[int] | None = None
        for _ in range(reader.uvarint()):
            tag, raw = reader.uvarint(), reader.take(reader.uvarint())
            if tag == ASSIGNMENT_EPOCHS_TAG:
                listed = _In(raw)
                size = listed.uvarint() - 1  # -1: null
                epochs = [listed.fixed(">i") for _ in range(size)] if size >= 0 else None
        if epochs is None or len(epochs) != len(parts):
            epochs = [default_epoch] * len(parts)
        name = names.get(topic_id)
        if name is not None:
            result[name] = dict(zip(parts, epochs, strict=True))
    return result


def encode(record: ConsumerRecord, ids: Mapping[str, uuid.UUID]) -> tuple[bytes, bytes | None]:
    """(key, value) of a record; `ids`: topic name → topic id."""
    key = _Out()
    key.fixed(">h", int(record.kind))
    key.string(record.group_id)
    if record.kind in WITH_MEMBER:
        key.string(record.member_id or "")
    if record.value is None:
        return bytes(key.data), None
    out = _Out()
    out.fixed(">h", VALUE_VERSION)
    value = record.value
    if record.kind in (RecordKind.GROUP_EPOCH, RecordKind.TARGET_EPOCH):
        assert isinstance(value, int)
        out.fixed(">i", value)
    elif record.kind == RecordKind.PARTITION_METADATA:
        assert isinstance(value, dict)
        out.fixed(">i", 0)  # (the epoch field Kafka no longer reads)
        known = [(t, n) for t, n in sorted(value.items()) if t in ids]
        out.uvarint(len(known) + 1)
        for topic, count in known:
            out.data += ids[topic].bytes
            out.compact_string(topic)
            out.fixed(">i", count)
            out.uvarint(1)  # no partition racks
            out.no_tags()
    elif record.kind == RecordKind.MEMBER:
        assert isinstance(value, ConsumerMember)
        out.compact_string(value.instance_id)
        out.compact_string(value.rack_id)
        out.compact_string(value.client_id)
        out.compact_string(value.client_host)
        out.uvarint(len(value.subscribed_topic_names) + 1)
        for name in value.subscribed_topic_names:
            out.compact_string(name)
        out.compact_string(value.subscribed_topic_regex)
        out.fixed(">i", value.rebalance_timeout_ms)
        out.compact_string(value.server_assignor)
        if value.classic is not None:  # tagged field 0: ClassicMemberMetadata
            classic = _Out()
            classic.fixed(">i", value.classic.session_timeout_ms)
            classic.uvarint(len(value.classic.protocols) + 1)
            for name, metadata in value.classic.protocols:
                classic.compact_string(name)
                classic.uvarint(len(metadata) + 1)
                classic.data += metadata
                classic.no_tags()
            classic.no_tags()
            out.uvarint(1)
            out.uvarint(0)
            out.uvarint(len(classic.data))
            out.data += classic.data
            return bytes(key.data), bytes(out.data)
    elif record.kind == RecordKind.TARGET_MEMBER:
        assert isinstance(value, dict)
        _partitions(out, value, ids)
    else:  # CURRENT_ASSIGNMENT
        assert isinstance(value, ConsumerMember)
        out.fixed(">i", value.member_epoch)
        out.fixed(">i", value.previous_member_epoch)
        out.fixed(">b", STATE_CODES[value.state])
        epochs = value.held_epochs()
        _partitions(out, value.assigned, ids, epochs)
        _partitions(out, value.pending_revocation, ids, epochs)
    out.no_tags()
    return bytes(key.data), bytes(out.data)


def _classic(reader: _In) -> ClassicMember:
    session_timeout = reader.fixed(">i")
    protocols = []
    for _ in range(max(reader.uvarint() - 1, 0)):
        name = reader.compact_string() or ""
        metadata = reader.take(reader.uvarint() - 1)
        reader.skip_tags()
        protocols.append((name, metadata))
    return ClassicMember(session_timeout, tuple(protocols))


_KEY_VERSION = struct.Struct(">h")


def key_version(key: bytes) -> int:
    if len(key) < 2:
        raise ValueError("record key cut short")
    return int(_KEY_VERSION.unpack_from(key)[0])


def decode(key: bytes, value: bytes | None, names: Mapping[uuid.UUID, str]) -> ConsumerRecord:
    """A record read back; `names`: topic id → topic name. Raises ValueError when damaged."""
    reader = _In(key)
    kind = RecordKind(reader.fixed(">h"))
    group_id = reader.string()
    member_id = reader.string() if kind in WITH_MEMBER else None
    if value is None:
        return ConsumerRecord(kind, group_id, member_id, None)
    data = _In(value)
    data.fixed(">h")  # the value version: newer fields are tagged
    decoded: object
    if kind in (RecordKind.GROUP_EPOCH, RecordKind.TARGET_EPOCH):
        decoded = data.fixed(">i")
    elif kind == RecordKind.PARTITION_METADATA:
        data.fixed(">i")
        counts: dict[str, int] = {}
        for _ in range(max(data.uvarint() - 1, 0)):
            data.take(16)
            name = data.compact_string() or ""
            counts[name] = data.fixed(">i")
            for _ in range(max(data.uvarint() - 1, 0)):
                data.fixed(">i")
                for _ in range(max(data.uvarint() - 1, 0)):
                    data.compact_string()
                data.skip_tags()
            data.skip_tags()
        decoded = counts
    elif kind == RecordKind.MEMBER:
        instance_id = data.compact_string()
        rack_id = data.compact_string()
        client_id = data.compact_string() or ""
        client_host = data.compact_string() or ""
        topics = tuple(data.compact_string() or "" for _ in range(max(data.uvarint() - 1, 0)))
        regex = data.compact_string()
        rebalance_timeout = data.fixed(">i")
        assignor = data.compact_string()
        classic = None
        if data.pos < len(value):
            for _ in range(data.uvarint()):
                tag, raw = data.uvarint(), data.take(data.uvarint())
                if tag == 0:
                    classic = _classic(_In(raw))
        decoded = ConsumerMember(
            member_id or "", instance_id, rack_id, client_id, client_host,
            rebalance_timeout_ms=rebalance_timeout, subscribed_topic_names=topics,
            subscribed_topic_regex=regex, server_assignor=assignor, classic=classic,
        )  # fmt: skip
    elif kind == RecordKind.TARGET_MEMBER:
        decoded = _read_partitions(data, names)
    else:
        epoch = data.fixed(">i")
        previous = data.fixed(">i")
        state = STATES.get(data.fixed(">b"), MemberState.STABLE)
        assigned = _read_epochs(data, names, max(epoch, 0))
        pending = _read_epochs(data, names, max(epoch, 0))
        epochs: PartitionEpochs = {
            topic: {**assigned.get(topic, {}), **pending.get(topic, {})}
            for topic in sorted(set(assigned) | set(pending))
        }
        decoded = ConsumerMember(
            member_id or "", member_epoch=epoch, previous_member_epoch=previous, state=state,
            assigned={t: frozenset(p) for t, p in assigned.items()},
            pending_revocation={t: frozenset(p) for t, p in pending.items()},
            assignment_epochs=epochs,
        )  # fmt: skip
    return ConsumerRecord(kind, group_id, member_id, decoded)
