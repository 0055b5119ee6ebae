# The records of __share_group_state in Kafka's layout (share-coordinator's ShareSnapshotKey/
# Value and ShareUpdateKey/Value schemas), so Kafka's tools read lockgate's topic and lockgate
# reads Kafka's.
#
# Key: int16 record type (0 ShareSnapshot, 1 ShareUpdate), then the key fields at key version 0
# (not flexible): GroupId (int16-length string), TopicId (16 bytes), Partition (int32).
# Value: int16 version 0, then the fields, flexible: compact arrays whose entries end with an
# empty tagged-field section, and the tagged fields after the last field.
#   ShareSnapshotValue: SnapshotEpoch i32, StateEpoch i32, LeaderEpoch i32, StartOffset i64,
#     CreateTimestamp i64, WriteTimestamp i64, StateBatches[...], tag 0 DeliveryCompleteCount
#     i32 (default -1: written only when it is not -1).
#   ShareUpdateValue: SnapshotEpoch i32, LeaderEpoch i32, StartOffset i64 (-1: unchanged),
#     StateBatches[...], tag 0 DeliveryCompleteCount.
#   StateBatch: FirstOffset i64, LastOffset i64, DeliveryState i8, DeliveryCount i16.
# A ShareSnapshot key with a null value is a tombstone: the share partition's state is deleted.
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from lockgate.protocol.frame import MalformedFrame, read_unsigned_varint, unsigned_varint

SNAPSHOT = 0  # ShareSnapshotKey / ShareSnapshotValue
UPDATE = 1  # ShareUpdateKey / ShareUpdateValue
VALUE_VERSION = 0
NO_DELIVERY_COMPLETE_COUNT = -1  # the tagged field's default: not written
_TAG_DELIVERY_COMPLETE_COUNT = 0

_KEY_HEAD = struct.Struct(">hh")
_KEY_TAIL = struct.Struct(">16si")
_BATCH = struct.Struct(">qqbh")
_SNAPSHOT_FIXED = struct.Struct(">hiiiqqq")  # version, epochs, start offset, timestamps
_UPDATE_FIXED = struct.Struct(">hiiq")  # version, snapshot and leader epochs, start offset
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True, order=True)
class StateBatch:
    """A range of offsets in one persisted delivery state (0 AVAILABLE, 2 ACKNOWLEDGED,
    3 ARCHIVING, 4 ARCHIVED) with its delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareKey:
    """A share partition: the pair (share group, topic-partition)."""

    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: unchanged
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]


def encode_key(record_type: int, key: ShareKey) -> bytes:
    raw = key.group_id.encode()
    return (
        _KEY_HEAD.pack(record_type, len(raw))
        + raw
        + _KEY_TAIL.pack(key.topic_id.bytes, key.partition)
    )


def decode_key(data: bytes) -> tuple[int, ShareKey]:
    """(record type, key); ValueError for a key of another layout or type."""
    if len(data) < _KEY_HEAD.size:
        raise ValueError(f"not a share state key ({len(data)} bytes)")
    record_type, size = _KEY_HEAD.unpack_from(data, 0)
    if record_type not in (SNAPSHOT, UPDATE):
        raise ValueError(f"unknown share state record type {record_type}")
    end = _KEY_HEAD.size + size
    if size < 0 or end + _KEY_TAIL.size != len(data):
        raise ValueError("not a share state key (its length)")
    topic_id, partition = _KEY_TAIL.unpack_from(data, end)
    return record_type, ShareKey(
        data[_KEY_HEAD.size : end].decode(), uuid.UUID(bytes=topic_id), partition
    )


def _batches(batches: tuple[StateBatch, ...]) -> bytes:
    out = bytearray(unsigned_varint(len(batches) + 1))
    for batch in batches:
        out += _BATCH.pack(
            batch.first_offset, batch.last_offset, batch.delivery_state, batch.delivery_count
        )
        out += b"\x00"  # the entry's tagged fields: none
    return bytes(out)


def _tagged(delivery_complete_count: int) -> bytes:
    if delivery_complete_count == NO_DELIVERY_COMPLETE_COUNT:
        return b"\x00"
    return (
        unsigned_varint(1)
        + unsigned_varint(_TAG_DELIVERY_COMPLETE_COUNT)
        + unsigned_varint(_INT32.size)
        + _INT32.pack(delivery_complete_count)
    )


def encode_snapshot(value: ShareSnapshot) -> bytes:
    fixed = _SNAPSHOT_FIXED.pack(
        VALUE_VERSION,
        value.snapshot_epoch,
        value.state_epoch,
        value.leader_epoch,
        value.start_offset,
        value.create_timestamp,
        value.write_timestamp,
    )
    return fixed + _batches(value.state_batches) + _tagged(value.delivery_complete_count)


def encode_update(value: ShareUpdate) -> bytes:
    fixed = _UPDATE_FIXED.pack(
        VALUE_VERSION, value.snapshot_epoch, value.leader_epoch, value.start_offset
    )
    return fixed + _batches(value.state_batches) + _tagged(value.delivery_complete_count)


def _read_batches(data: bytes, pos: int) -> tuple[tuple[StateBatch, ...], int]:
    count, pos = read_unsigned_varint(data, pos)
    if count == 0:
        raise ValueError("a null StateBatches array")
    batches = []
    for _ in range(count - 1):
        if pos + _BATCH.size > len(data):
            raise ValueError("a state batch cut short")
        batches.append(StateBatch(*_BATCH.unpack_from(data, pos)))
        pos = _skip_tags(data, pos + _BATCH.size)[1]
    return tuple(batches), pos


def _skip_tags(data: bytes, pos: int) -> tuple[int, int]:
    """Reads a tagged-field section; returns (DeliveryCompleteCount or -1, position after)."""
    delivery_complete_count = NO_DELIVERY_COMPLETE_COUNT
    fields, pos = read_unsigned_varint(data, pos)
    for _ in range(fields):
        tag, pos = read_unsigned_varint(data, pos)
        size, pos = read_unsigned_varint(data, pos)
        if pos + size > len(data):
            raise ValueError("a tagged field cut short")
        if tag == _TAG_DELIVERY_COMPLETE_COUNT and size == _INT32.size:
            delivery_complete_count = _INT32.unpack_from(data, pos)[0]
        pos += size  # (unknown tags are skipped, as Kafka's readers keep them aside)
    return delivery_complete_count, pos


def decode_value(record_type: int, data: bytes) -> ShareSnapshot | ShareUpdate:
    """The value of a record of `record_type`; ValueError when it is not one."""
    try:
        if record_type == SNAPSHOT:
            if len(data) < _SNAPSHOT_FIXED.size:
                raise ValueError("a ShareSnapshotValue cut short")
            version, snap, state, leader, start, created, written = _SNAPSHOT_FIXED.unpack_from(
                data, 0
            )
            _check_version(version)
            batches, pos = _read_batches(data, _SNAPSHOT_FIXED.size)
            count, _ = _skip_tags(data, pos)
            return ShareSnapshot(snap, state, leader, start, count, created, written, batches)
        if len(data) < _UPDATE_FIXED.size:
            raise ValueError("a ShareUpdateValue cut short")
        version, snap, leader, start = _UPDATE_FIXED.unpack_from(data, 0)
        _check_version(version)
        batches, pos = _read_batches(data, _UPDATE_FIXED.size)
        count, _ = _skip_tags(data, pos)
        return ShareUpdate(snap, leader, start, count, batches)
    except (MalformedFrame, struct.error) as exc:
        raise ValueError(str(exc)) from exc


def _check_version(version: int) -> None:
    if version != VALUE_VERSION:
        raise ValueError(f"share state value version {version}")
