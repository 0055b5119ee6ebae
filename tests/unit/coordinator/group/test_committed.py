"""A group's committed offsets held as their __consumer_offsets records (CommittedOffsets):
read and written by (topic, partition), kept as lockgate's offset commit key → record value."""

from __future__ import annotations

import struct

from lockgate.coordinator.group.committed import CommittedOffsets, partition_of
from lockgate.coordinator.group.records import (
    CommittedOffset,
    commit_timestamp,
    committed_offset,
    decode_offset_value,
    offset_key,
    offset_value,
)


def value(offset: int, timestamp: int = 1) -> bytes:
    return offset_value(CommittedOffset(offset, 3, "meta", timestamp))


def test_a_mapping_by_partition_over_the_records() -> None:
    held = CommittedOffsets("g", {("t", 1): value(10), ("ü", 0): value(20)})
    held[("t", 0)] = value(30)
    held[("t", 1)] = value(11)  # replaces, in place
    assert list(held) == [("t", 1), ("ü", 0), ("t", 0)]
    assert held.records == {
        offset_key("g", "t", 1): value(11),
        offset_key("g", "ü", 0): value(20),
        offset_key("g", "t", 0): value(30),
    }
    assert len(held) == 3 and ("t", 0) in held and ("t", 9) not in held
    assert held[("t", 1)] == value(11) and held.get(("t", 9)) is None
    assert held.pop(("ü", 0)) == value(20) and held.pop(("ü", 0)) is None
    del held[("t", 0)]
    assert dict(held) == {("t", 1): value(11)}
    assert decode_offset_value(held[("t", 1)]) == CommittedOffset(11, 3, "meta", 1)


def test_readers_of_a_value_without_decoding_it() -> None:
    raw = value(2**40, timestamp=1_700_000_000_000)
    assert committed_offset(raw) == 2**40
    assert commit_timestamp(raw) == 1_700_000_000_000
    assert partition_of(offset_key("group", "topic", 7)) == ("topic", 7)
    # older versions: v0 and v2 (offset, metadata, commit timestamp), v1 (then an expire one)
    meta = struct.pack(">h", 2) + b"md"
    for version, after in ((0, b""), (1, struct.pack(">q", 99)), (2, b"")):
        old = struct.pack(">hq", version, 5) + meta + struct.pack(">q", 77) + after
        assert decode_offset_value(old) == CommittedOffset(5, -1, "md", 77)
        assert (committed_offset(old), commit_timestamp(old)) == (5, 77)
