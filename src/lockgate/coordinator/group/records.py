# Records of the __consumer_offsets topic in Kafka's layout, so Kafka's tools can read them.
#
# Offset commit: key (version 1, group, topic, partition), value v3 (offset, leader epoch,
# metadata, commit timestamp). Group metadata: key (version 2, group), value v3 (protocol type,
# generation, protocol, leader, state timestamp, members). A null value deletes the key.
# Decoding goes through protocol.fastpath.unpack_fields (compiled, with a pure twin): a load
# checks every record it replays (offset_commit), readers decode the offsets they read.
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from lockgate.protocol.fastpath import unpack_fields

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


class CommittedOffset(NamedTuple):
    """A group's committed offset of one partition, as OffsetCommit brings it and OffsetFetch
    reads it (the coordinator holds the record instead: committed.py). A NamedTuple: quicker
    to build than a frozen dataclass, read the same."""

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
    # (by hand rather than with a _Writer: every lookup of a committed offset builds one)
    group_raw = group.encode()
    topic_raw = topic.encode()
    return b"".join(
        (
            _KEY_HEAD.pack(OFFSET_KEY_VERSION, len(group_raw)),
            group_raw,
            _I16.pack(len(topic_raw)),
            topic_raw,
            _I32.pack(partition),
        )
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


_OFFSET_KEY_HEADS = (b"\x00\x00", b"\x00\x01")  # key versions 0 and 1: an offset commit
_V3 = OFFSET_VALUE_VERSION.to_bytes(2, "big")  # what lockgate writes


def decode_key(data: bytes) -> Key:
    if data[:2] in _OFFSET_KEY_HEADS:
        _version, group, topic, partition = unpack_fields(data, "hssi")
        return (group or "", topic or "", partition)
    version, group = unpack_fields(data, "hs")
    if version == GROUP_KEY_VERSION:
        return group or ""
    raise ValueError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> CommittedOffset:
    """The offset of a value (v0 to v3; v1's expire timestamp is ignored)."""
    if _version(data) >= 3:
        _v, offset, epoch, metadata, timestamp = unpack_fields(data, "hqisq")
        return CommittedOffset(offset, epoch, metadata or "", timestamp)
    _v, offset, metadata, timestamp = unpack_fields(data, "hqsq")
    return CommittedOffset(offset, -1, metadata or "", timestamp)


def offset_commit(key: bytes, value: bytes | None) -> tuple[str, bytes] | None:
    """The group of an offset commit record whose value (None: a tombstone) decodes
    (decode_offset_value), and the record's key in lockgate's form (offset_key's: `key`
    itself, unless the log has it in another); None for a record of another kind. Raises
    ValueError when damaged. (What a load asks of its every record: builds no offset.)"""
    if key[:2] not in _OFFSET_KEY_HEADS:
        return None
    version, group, topic, partition, end = unpack_fields(key, "hssi$")
    if value is not None:
        unpack_fields(value, "hqisq" if value[:2] == _V3 or _version(value) >= 3 else "hqsq")
    canonical = version == OFFSET_KEY_VERSION and end == len(key)  # (nothing after it)
    if canonical and group is not None and topic is not None:
        return (group, key)
    return (group or "", offset_key(group or "", topic or "", partition))


def committed_offset(value: bytes) -> int:
    """The offset of a sound offset value (decode_offset_value's, read without it)."""
    return int(_I64.unpack_from(value, _I16.size)[0])  # right after the version, in every one


def commit_timestamp(value: bytes) -> int:
    """The commit timestamp of a sound offset value (decode_offset_value's, read without it)."""
    at = _VALUE_V3_HEAD.size - _I16.size if _version(value) >= 3 else _VALUE_HEAD.size - _I16.size
    (size,) = _I16.unpack_from(value, at)
    return int(_I64.unpack_from(value, at + _I16.size + max(size, 0))[0])


def _version(value: bytes) -> int:
    if len(value) < _I16.size:
        raise _cut(_I16.size, 0)
    return int(_I16.unpack_from(value)[0])


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
