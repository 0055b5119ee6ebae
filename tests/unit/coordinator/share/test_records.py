"""The __share_group_state records, byte for byte as Kafka's schemas lay them out
(share-coordinator ShareSnapshotKey/Value, ShareUpdateKey/Value: keys non-flexible at version 0
behind an int16 record type; values int16 version 0, flexible, DeliveryCompleteCount a tagged
field 0 with default -1). The expected bytes are spelled out field by field from the schemas."""

from __future__ import annotations

import struct
import uuid

import pytest

from lockgate.coordinator.share.records import (
    SNAPSHOT,
    UPDATE,
    ShareKey,
    ShareSnapshot,
    ShareUpdate,
    StateBatch,
    decode_key,
    decode_value,
    encode_key,
    encode_snapshot,
    encode_update,
)

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")
KEY = ShareKey("grp", TOPIC, 7)


def test_snapshot_key_bytes() -> None:
    expected = (
        b"\x00\x00"  # record type 0: ShareSnapshotKey
        + b"\x00\x03grp"  # GroupId: int16 length + UTF-8
        + bytes.fromhex("0123456789abcdef0123456789abcdef")  # TopicId: 16 bytes
        + b"\x00\x00\x00\x07"  # Partition int32
    )
    assert encode_key(SNAPSHOT, KEY) == expected
    assert decode_key(expected) == (SNAPSHOT, KEY)


def test_update_key_bytes() -> None:
    encoded = encode_key(UPDATE, KEY)
    assert encoded[:2] == b"\x00\x01"  # record type 1: ShareUpdateKey, same fields
    assert encoded[2:] == encode_key(SNAPSHOT, KEY)[2:]
    assert decode_key(encoded) == (UPDATE, KEY)


def _batch(first: int, last: int, state: int, count: int) -> bytes:
    # FirstOffset int64, LastOffset int64, DeliveryState int8, DeliveryCount int16, no tags
    return struct.pack(">qqbh", first, last, state, count) + b"\x00"


def test_snapshot_value_bytes_with_delivery_complete_count() -> None:
    value = ShareSnapshot(
        snapshot_epoch=2, state_epoch=5, leader_epoch=9, start_offset=100,
        delivery_complete_count=3, create_timestamp=1_700_000_000_000,
        write_timestamp=1_700_000_000_500,
        state_batches=(StateBatch(100, 104, 2, 1), StateBatch(105, 105, 4, 5)),
    )  # fmt: skip
    expected = (
        b"\x00\x00"  # value version 0
        + struct.pack(">i", 2)  # SnapshotEpoch
        + struct.pack(">i", 5)  # StateEpoch
        + struct.pack(">i", 9)  # LeaderEpoch
        + struct.pack(">q", 100)  # StartOffset
        + struct.pack(">q", 1_700_000_000_000)  # CreateTimestamp
        + struct.pack(">q", 1_700_000_000_500)  # WriteTimestamp
        + b"\x03"  # StateBatches: compact array of 2 (length + 1)
        + _batch(100, 104, 2, 1)
        + _batch(105, 105, 4, 5)
        + b"\x01"  # one tagged field
        + b"\x00\x04"  # tag 0 (DeliveryCompleteCount), 4 bytes
        + struct.pack(">i", 3)
    )
    assert encode_snapshot(value) == expected
    assert decode_value(SNAPSHOT, expected) == value


def test_default_delivery_complete_count_is_not_written() -> None:
    value = ShareSnapshot(0, 1, 0, -1, -1, 10, 10, ())
    expected = (
        b"\x00\x00" + struct.pack(">iiiqqq", 0, 1, 0, -1, 10, 10)
        + b"\x01"  # an empty compact array
        + b"\x00"  # no tagged fields: -1 is the default
    )  # fmt: skip
    assert encode_snapshot(value) == expected
    assert decode_value(SNAPSHOT, expected) == value


def test_update_value_bytes() -> None:
    value = ShareUpdate(
        snapshot_epoch=4, leader_epoch=2, start_offset=-1, delivery_complete_count=12,
        state_batches=(StateBatch(7, 9, 0, 2),),
    )  # fmt: skip
    expected = (
        b"\x00\x00"
        + struct.pack(">i", 4)  # SnapshotEpoch
        + struct.pack(">i", 2)  # LeaderEpoch
        + struct.pack(">q", -1)  # StartOffset (-1: unchanged)
        + b"\x02"
        + _batch(7, 9, 0, 2)
        + b"\x01\x00\x04"
        + struct.pack(">i", 12)
    )
    assert encode_update(value) == expected
    assert decode_value(UPDATE, expected) == value


def test_unknown_tagged_fields_are_skipped() -> None:
    body = b"\x00\x00" + struct.pack(">iiq", 1, 1, 5) + b"\x01"
    tags = b"\x02" + b"\x05\x02ab" + b"\x00\x04" + struct.pack(">i", 8)  # tag 5, then tag 0
    decoded = decode_value(UPDATE, body + tags)
    assert isinstance(decoded, ShareUpdate) and decoded.delivery_complete_count == 8


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x02\x00\x01g" + bytes(20),  # record type 2 is not a share state record
        b"\x00\x00\x00\x05g" + bytes(20),  # the group id runs past the key
        b"\x00",
    ],
)
def test_foreign_keys_are_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_key(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x01" + bytes(30),  # value version 1
        b"\x00\x00" + bytes(10),  # cut short
        b"\x00\x00" + struct.pack(">iiq", 1, 1, 5) + b"\x05",  # batches announced, missing
    ],
)
def test_damaged_values_are_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_value(UPDATE, raw)
