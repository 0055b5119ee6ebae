"""Records of __transaction_state in Kafka's layout (TransactionLogKey v0, TransactionLogValue
v0 and flexible v1 with tagged fields) and the partition a transactional id maps to."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from lockgate.coordinator.txn.log import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from tests.unit.coordinator.txn.support import TXN_ID

MEMORY_ONLY = {"transactional_id"}  # not part of the value

# TransactionLogValue tagged fields: Kafka's 0-2, lockgate's KIP-939 tags 3-4 and KIP-360's 5.
TAGS: dict[str, tuple[int, object, bytes]] = {
    "prev_producer_id": (0, 41, struct.pack(">q", 41)),
    "next_producer_id": (1, 43, struct.pack(">q", 43)),
    "client_transaction_version": (2, 2, struct.pack(">h", 2)),
    "next_producer_epoch": (3, 7, struct.pack(">h", 7)),
    "two_phase_commit": (4, True, b"\x01"),
    "last_producer_epoch": (5, 4, struct.pack(">h", 4)),
}


def sample(**changes: object) -> TxnMetadata:
    base = TxnMetadata(
        TXN_ID,
        producer_id=42,
        producer_epoch=5,
        timeout_ms=60_000,
        state=TxnState.ONGOING,
        partitions=frozenset({("orders", 0), ("orders", 1), ("audit", 3)}),
        start_ms=900,
        last_update_ms=1_000,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def everything_set() -> TxnMetadata:
    return sample(**{name: value for name, (_tag, value, _raw) in TAGS.items()})


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def v1_value(tags: bytes = b"\x00", partitions: bytes | None = None) -> bytes:
    """sample() written by hand from Kafka's TransactionLogValue schema, flexible version 1."""
    if partitions is None:
        partitions = (
            uvarint(3)  # compact array: 2 entries
            + uvarint(6) + b"audit" + uvarint(2) + struct.pack(">i", 3) + b"\x00"
            + uvarint(7) + b"orders" + uvarint(3) + struct.pack(">ii", 0, 1) + b"\x00"
        )  # fmt: skip
    return (
        struct.pack(">hqhib", 1, 42, 5, 60_000, 1)
        + partitions
        + struct.pack(">qq", 1_000, 900)
        + tags
    )


def v0_value(partitions: bytes | None = None) -> bytes:
    """The same, non-flexible version 0 (int16 strings, int32 array lengths, no tags)."""
    if partitions is None:
        partitions = (
            struct.pack(">i", 2)
            + struct.pack(">h", 5) + b"audit" + struct.pack(">ii", 1, 3)
            + struct.pack(">h", 6) + b"orders" + struct.pack(">iii", 2, 0, 1)
        )  # fmt: skip
    return struct.pack(">hqhib", 0, 42, 5, 60_000, 1) + partitions + struct.pack(">qq", 1_000, 900)


# -- keys --


@pytest.mark.parametrize("transactional_id", ["payments-1", "", "zürich-😀"])
def test_key_is_version_zero_and_an_int16_length_string(transactional_id: str) -> None:
    raw = transactional_id.encode()
    key = encode_key(transactional_id)
    assert key == struct.pack(">hh", 0, len(raw)) + raw
    assert decode_key(key) == transactional_id


@pytest.mark.parametrize(
    "damaged",
    [
        b"",
        b"\x00",
        b"\x00\x00\x00",
        b"\x00\x01\x00\x01a",
        b"\x00\x00\x00\x05abc",
        b"\x00\x00\xff\xffa",
    ],
    ids=["empty", "one-byte", "no-string", "version-1", "short-string", "negative-length"],
)
def test_damaged_key_raises_value_error(damaged: bytes) -> None:
    with pytest.raises(ValueError):
        decode_key(damaged)


# -- values --


def test_value_is_written_as_kafkas_flexible_version_1() -> None:
    assert encode_value(sample()) == v1_value()


def test_hand_built_version_1_value_decodes() -> None:
    assert decode_value(TXN_ID, v1_value()) == sample()


def test_hand_built_version_0_value_decodes() -> None:
    assert decode_value(TXN_ID, v0_value()) == sample()


@pytest.mark.parametrize("version", [0, 1])
def test_null_partitions_decode_as_none(version: int) -> None:
    if version == 0:
        value = v0_value(partitions=struct.pack(">i", -1))
    else:
        value = v1_value(partitions=uvarint(0))
    decoded = decode_value(TXN_ID, value)
    assert decoded == sample(partitions=frozenset())


def test_every_field_round_trips() -> None:
    meta = everything_set()
    decoded = decode_value(TXN_ID, encode_value(meta))
    for field in dataclasses.fields(TxnMetadata):
        if field.name not in MEMORY_ONLY:
            assert getattr(decoded, field.name) == getattr(meta, field.name), field.name
    assert set(TAGS) | MEMORY_ONLY | {
        "producer_id",
        "producer_epoch",
        "timeout_ms",
        "state",
        "partitions",
        "start_ms",
        "last_update_ms",
    } == {f.name for f in dataclasses.fields(TxnMetadata)}, "a field the log does not cover"


@pytest.mark.parametrize("state", list(TxnState))
@pytest.mark.parametrize(
    "partitions", [frozenset(), frozenset({("t", 0)}), frozenset({("é", 2**31 - 1)})]
)
def test_every_state_and_partition_set_round_trips(
    state: TxnState, partitions: frozenset[tuple[str, int]]
) -> None:
    meta = sample(state=state, partitions=partitions, producer_epoch=32767, producer_id=2**62)
    assert decode_value(TXN_ID, encode_value(meta)) == meta


def test_tags_at_their_defaults_are_not_written() -> None:
    value = encode_value(sample())
    assert value.endswith(struct.pack(">qq", 1_000, 900) + b"\x00")  # an empty tag section


@pytest.mark.parametrize("name", list(TAGS))
def test_each_tag_has_its_number_and_size(name: str) -> None:
    number, value, raw = TAGS[name]
    encoded = encode_value(sample(**{name: value}))
    assert encoded == v1_value(tags=uvarint(1) + uvarint(number) + uvarint(len(raw)) + raw)
    assert getattr(decode_value(TXN_ID, encoded), name) == value


def test_all_tags_are_written_in_ascending_order() -> None:
    section = uvarint(len(TAGS)) + b"".join(
        uvarint(number) + uvarint(len(raw)) + raw for number, _value, raw in TAGS.values()
    )
    assert encode_value(everything_set()) == v1_value(tags=section)


def test_unknown_tags_are_ignored() -> None:
    unknown = uvarint(200) + uvarint(3) + b"xyz"
    known = uvarint(0) + uvarint(8) + struct.pack(">q", 41)
    value = v1_value(tags=uvarint(2) + known + unknown)
    assert decode_value(TXN_ID, value) == sample(prev_producer_id=41)
    # also inside a partitions entry (every flexible struct has a tag section)
    entry = uvarint(2) + uvarint(7) + b"orders" + uvarint(2) + struct.pack(">i", 0)
    value = v1_value(partitions=entry + uvarint(1) + unknown)
    assert decode_value(TXN_ID, value) == sample(partitions=frozenset({("orders", 0)}))


# -- damaged values --


@pytest.mark.parametrize("meta", [sample(), everything_set()], ids=["no-tags", "all-tags"])
def test_every_truncation_raises_value_error(meta: TxnMetadata) -> None:
    value = encode_value(meta)
    for size in range(len(value)):
        with pytest.raises(ValueError):
            decode_value(TXN_ID, value[:size])


def test_every_truncation_of_a_version_0_value_raises_value_error() -> None:
    value = v0_value()
    for size in range(len(value)):
        with pytest.raises(ValueError):
            decode_value(TXN_ID, value[:size])


@pytest.mark.parametrize(
    "damaged",
    [
        struct.pack(">h", 2) + v1_value()[2:],
        struct.pack(">h", -1) + v1_value()[2:],
        struct.pack(">hqhib", 1, 42, 5, 60_000, 9) + v1_value()[17:],
        v1_value(tags=uvarint(1) + uvarint(0) + uvarint(4) + b"\x00\x00\x00\x29"),
        v1_value(tags=uvarint(1) + uvarint(2) + uvarint(8) + struct.pack(">q", 2)),
        v1_value(tags=uvarint(1) + uvarint(0) + uvarint(8) + b"\x00"),
        v1_value(tags=uvarint(1) + uvarint(200) + uvarint(5) + b"ab"),
        v1_value(partitions=uvarint(2) + uvarint(0) + uvarint(1) + b"\x00"),
        v1_value(partitions=uvarint(2) + uvarint(7) + b"ord"),
        v1_value(partitions=uvarint(2) + uvarint(7) + b"orders" + uvarint(50) + b"\x00\x00"),
    ],
    ids=[
        "version-2",
        "version-minus-1",
        "unknown-status",
        "int64-tag-of-4-bytes",
        "int16-tag-of-8-bytes",
        "tag-longer-than-the-value",
        "unknown-tag-longer-than-the-value",
        "null-topic-name",
        "topic-name-cut",
        "partition-ids-cut",
    ],
)
def test_damaged_value_raises_value_error(damaged: bytes) -> None:
    with pytest.raises(ValueError):
        decode_value(TXN_ID, damaged)


# -- which __transaction_state partition owns an id --


def java_string_hash(text: str) -> int:
    """Java's String.hashCode, by its definition s[0]*31^(n-1) + ... + s[n-1] over UTF-16
    code units, in signed 32-bit arithmetic."""
    raw = text.encode("utf-16-be")
    units = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]
    n = len(units)
    total = sum(unit * int(31 ** (n - 1 - i)) for i, unit in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


# (string, Java's hashCode, partition of 50, partition of 7), printed by a JVM
JAVA = [
    ("hello", 99162322, 22, 0),
    ("polygenelubricants", -(2**31), 0, 0),  # Utils.abs(Integer.MIN_VALUE) is 0
    ("Aa", 2112, 12, 5),
    ("BB", 2112, 12, 5),
    ("é", 233, 33, 2),
    ("😀", 1772899, 49, 2),  # a surrogate pair: two UTF-16 units
    ("my-transactional-id", -959806496, 46, 5),
    ("zürich-txn-7", -779091291, 41, 6),
    ("", 0, 0, 0),
    ("lockgate", 1909884022, 22, 4),
]


@pytest.mark.parametrize(("text", "hash_code", "of_50", "of_7"), JAVA)
def test_partition_matches_javas_hash_code(
    text: str, hash_code: int, of_50: int, of_7: int
) -> None:
    assert java_string_hash(text) == hash_code
    assert partition_for(text, 50) == of_50
    assert partition_for(text, 7) == of_7
    assert partition_for(text, 1) == 0


def test_partition_follows_the_hash_for_many_ids() -> None:
    for i in range(2_000):
        text = f"transactional-{i}-\u00e9\U0001f600"[: 5 + i % 20]
        expected = java_string_hash(text)
        positive = 0 if expected == -(2**31) else abs(expected)
        for count in (1, 3, 50, 64):
            assert partition_for(text, count) == positive % count, text
