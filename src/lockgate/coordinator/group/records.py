# Records of the __consumer_offsets topic in Kafka's layout, so Kafka's tools can read them.
#
# Offset commit: key (version 1, group, topic, partition), value v3 (offset, leader epoch,
# metadata, commit timestamp). Group metadata: key (version 2, group), value v3 (protocol type,
# generation, protocol, leader, state timestamp, members). A null value deletes the key.
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


class CommittedOffset(NamedTuple):
    """A group's committed offset of one partition (a NamedTuple: a load builds one per
    live offset, and a tuple is quicker to build than a frozen dataclass)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberRecord, ...]


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def pack(self, fmt: str, *values: int) -> _Writer:
        self.out += struct.pack(fmt, *values)
        return self

    def string(self, value: str | None) -> _Writer:
        if value is None:
            return self.pack(">h", -1)
        raw = value.encode()
        return self.pack(">h", len(raw)).raw(raw)

    def bytes_(self, value: bytes) -> _Writer:
        return self.pack(">i", len(value)).raw(value)

    def raw(self, value: bytes) -> _Writer:
        self.out += value
        return self


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_KEY_HEAD = struct.Struct(">hh")  # key version, length of the group id
_VALUE_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata's length
_VALUE_HEAD = struct.Struct(">hqh")  # version, offset, metadata's length (v0 to v2)


def _cut(wanted: int, at: int) -> ValueError:
    # A damaged record must raise ValueError (which replay skips), never struct.error,
    # and a cut string must not decode as a shorter one.
    return ValueError(f"record cut short: {wanted} bytes wanted at {at}")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, size: int) -> bytes:
        if size > len(self.data) - self.pos:
            raise _cut(size, self.pos)
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        return raw

    def _fixed(self, layout: struct.Struct) -> tuple[int, ...]:
        if layout.size > len(self.data) - self.pos:
            raise _cut(layout.size, self.pos)
        values: tuple[int, ...] = layout.unpack_from(self.data, self.pos)
        self.pos += layout.size
        return values

    def i16(self) -> int:
        return self._fixed(_I16)[0]

    def i32(self) -> int:
        return self._fixed(_I32)[0]

    def i64(self) -> int:
        return self._fixed(_I64)[0]

    def string(self) -> str | None:
        size = self.i16()
        if size < 0:
            return None
        return self._take(size).decode()

    def bytes_(self) -> bytes:
        return self._take(max(self.i32(), 0))


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return bytes(
        _Writer()
        .pack(">h", OFFSET_KEY_VERSION)
        .string(group)
        .string(topic)
        .pack(">i", partition)
        .out
    )


def group_key(group: str) -> bytes:
    return bytes(_Writer().pack(">h", GROUP_KEY_VERSION).string(group).out)


def offset_value(committed: CommittedOffset) -> bytes:
    writer = _Writer().pack(">hqi", OFFSET_VALUE_VERSION, committed.offset, committed.leader_epoch)
    return bytes(writer.string(committed.metadata).pack(">q", committed.commit_timestamp).out)


def group_value(record: GroupRecord) -> bytes:
    writer = _Writer().pack(">h", GROUP_VALUE_VERSION).string(record.protocol_type)
    writer.pack(">i", record.generation).string(record.protocol).string(record.leader)
    writer.pack(">qi", record.state_timestamp, len(record.members))
    for m in record.members:
        writer.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(
            m.client_host
        )
        writer.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms)
        writer.bytes_(m.subscription).bytes_(m.assignment)
    return bytes(writer.out)


Key = tuple[str, str, int] | str  # (group, topic, partition) for offsets, group id for metadata


def decode_key(data: bytes) -> Key:
    # (by hand rather than with a _Reader: a coordinator's load decodes every key)
    end = len(data)
    if end < _KEY_HEAD.size:
        raise _cut(_KEY_HEAD.size, 0)
    version, size = _KEY_HEAD.unpack_from(data)
    pos = _KEY_HEAD.size + max(size, 0)
    if pos > end:
        raise _cut(size, _KEY_HEAD.size)
    group = data[_KEY_HEAD.size : pos].decode() if size > 0 else ""
    if version in (0, 1):
        if pos + _I16.size > end:
            raise _cut(_I16.size, pos)
        (size,) = _I16.unpack_from(data, pos)
        pos += _I16.size
        topic_end = pos + max(size, 0)
        if topic_end + _I32.size > end:
            raise _cut(max(size, 0) + _I32.size, pos)
        topic = data[pos:topic_end].decode() if size > 0 else ""
        return (group, topic, _I32.unpack_from(data, topic_end)[0])
    if version == GROUP_KEY_VERSION:
        return group
    raise ValueError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> CommittedOffset:
    # (by hand rather than with a _Reader: a coordinator's load decodes every value)
    end = len(data)
    if end < _I16.size:
        raise _cut(_I16.size, 0)
    if _I16.unpack_from(data)[0] >= 3:
        head = _VALUE_V3_HEAD
        if end < head.size:
            raise _cut(head.size, 0)
        _version, offset, epoch, size = head.unpack_from(data)
    else:
        head = _VALUE_HEAD
        if end < head.size:
            raise _cut(head.size, 0)
        _version, offset, size = head.unpack_from(data)
        epoch = -1
    metadata_end = head.size + max(size, 0)
    if metadata_end + _I64.size > end:
        raise _cut(max(size, 0) + _I64.size, head.size)
    metadata = data[head.size : metadata_end].decode() if size > 0 else ""
    return CommittedOffset(offset, epoch, metadata, _I64.unpack_from(data, metadata_end)[0])


def decode_group_value(data: bytes) -> GroupRecord:
    reader = _Reader(data)
    version = reader.i16()
    if version > GROUP_VALUE_VERSION:
        raise ValueError(f"unknown group metadata value version {version}")
    protocol_type = reader.string() or ""
    generation = reader.i32()
    protocol = reader.string()
    leader = reader.string()
    state_timestamp = reader.i64() if version >= 2 else -1
    count = reader.i32()
    members = []
    for _ in range(max(count, 0)):
        member_id = reader.string() or ""
        instance = reader.string() if version >= 3 else None
        client_id = reader.string() or ""
        client_host = reader.string() or ""
        rebalance = reader.i32() if version >= 1 else 0
        session = reader.i32()
        subscription = reader.bytes_()
        assignment = reader.bytes_()
        members.append(
            MemberRecord(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance,
                session,
                subscription,
                assignment,
            )
        )
    return GroupRecord(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))


def subscribed_topics(subscription: bytes) -> set[str]:
    """Topics in a consumer-protocol subscription (version, topics[], user data, ...)."""
    try:
        reader = _Reader(subscription)
        reader.i16()
        count = reader.i32()
        return {reader.string() or "" for _ in range(max(count, 0))}
    except ValueError:  # cut short or not UTF-8
        return set()
