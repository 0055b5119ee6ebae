# Records of the __consumer_offsets topic in Kafka's layout, so Kafka's tools can read them.
#
# Offset commit: key (version 1, group, topic, partition), value v3 (offset, leader epoch,
# metadata, commit timestamp). Group metadata: key (version 2, group), value v3 (protocol type,
# generation, protocol, leader, state timestamp, members). A null value deletes the key.
from __future__ import annotations

import struct
from dataclasses import dataclass

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class CommittedOffset:
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


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, size: int) -> bytes:
        # A damaged record must raise ValueError (which replay skips), never struct.error,
        # and a cut string must not decode as a shorter one.
        if size > len(self.data) - self.pos:
            raise ValueError(f"record cut short: {size} bytes wanted at {self.pos}")
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        return raw

    def unpack(self, fmt: str) -> tuple[int, ...]:
        layout = struct.Struct(fmt)
        return tuple(int(v) for v in layout.unpack(self._take(layout.size)))

    def string(self) -> str | None:
        (size,) = self.unpack(">h")
        if size < 0:
            return None
        return self._take(size).decode()

    def bytes_(self) -> bytes:
        (size,) = self.unpack(">i")
        return self._take(max(size, 0))


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
    reader = _Reader(data)
    (version,) = reader.unpack(">h")
    group = reader.string() or ""
    if version in (0, 1):
        topic = reader.string() or ""
        (partition,) = reader.unpack(">i")
        return (group, topic, partition)
    if version == GROUP_KEY_VERSION:
        return group
    raise ValueError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(data: bytes) -> CommittedOffset:
    reader = _Reader(data)
    (version,) = reader.unpack(">h")
    (offset,) = reader.unpack(">q")
    epoch = reader.unpack(">i")[0] if version >= 3 else -1
    metadata = reader.string() or ""
    (timestamp,) = reader.unpack(">q")
    return CommittedOffset(offset, epoch, metadata, timestamp)


def decode_group_value(data: bytes) -> GroupRecord:
    reader = _Reader(data)
    (version,) = reader.unpack(">h")
    if version > GROUP_VALUE_VERSION:
        raise ValueError(f"unknown group metadata value version {version}")
    protocol_type = reader.string() or ""
    (generation,) = reader.unpack(">i")
    protocol = reader.string()
    leader = reader.string()
    state_timestamp = reader.unpack(">q")[0] if version >= 2 else -1
    (count,) = reader.unpack(">i")
    members = []
    for _ in range(max(count, 0)):
        member_id = reader.string() or ""
        instance = reader.string() if version >= 3 else None
        client_id = reader.string() or ""
        client_host = reader.string() or ""
        rebalance = reader.unpack(">i")[0] if version >= 1 else 0
        (session,) = reader.unpack(">i")
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
        reader.unpack(">h")
        (count,) = reader.unpack(">i")
        return {reader.string() or "" for _ in range(max(count, 0))}
    except ValueError:  # cut short or not UTF-8
        return set()
