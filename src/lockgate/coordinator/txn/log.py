# Records of the __transaction_state topic in Kafka's layout, so Kafka's tools can read them.
#
# Key: int16 version 0, transactional id (int16-length string).
# Value v0: producer id i64, epoch i16, timeout i32, status i8, partitions (nullable array of
# topic + int32 ids), last update i64, start i64. v1 is the flexible form of the same fields
# with tagged fields 0 PreviousProducerId, 1 NextProducerId, 2 ClientTransactionVersion (Kafka)
# and lockgate's tags for KIP-939, which Kafka has not assigned: 3 NextProducerEpoch and
# 4 TwoPhaseCommit (int8). A null value is a tombstone: the transactional id expired.
from __future__ import annotations

import functools
import struct
from collections import defaultdict

from lockgate.coordinator.txn.metadata import NO_EPOCH, NO_PRODUCER_ID, TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.protocol.frame import MalformedFrame, read_unsigned_varint, unsigned_varint

KEY_VERSION = 0
VALUE_VERSION = 1
_TAG_PREV_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TXN_VERSION = 2
_TAG_NEXT_PRODUCER_EPOCH = 3
_TAG_TWO_PHASE_COMMIT = 4
_TAG_LAST_PRODUCER_EPOCH = 5

_FIXED = struct.Struct(">qhib")
_TIMES = struct.Struct(">qq")


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return struct.pack(">hh", KEY_VERSION, len(raw)) + raw


def decode_key(data: bytes) -> str:
    if len(data) < 4:
        raise ValueError(f"not a transaction log key ({len(data)} bytes)")
    version, size = struct.unpack_from(">hh", data, 0)
    if version != KEY_VERSION or size < 0 or 4 + size != len(data):
        raise ValueError(f"not a transaction log key (version {version})")
    return data[4 : 4 + size].decode()


def encode_value(meta: TxnMetadata) -> bytes:
    out = bytearray(struct.pack(">h", VALUE_VERSION))
    out += _FIXED.pack(meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.state)
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(meta.partitions):
        by_topic[topic].append(partition)
    out += unsigned_varint(len(by_topic) + 1)
    for topic, partitions in by_topic.items():
        raw = topic.encode()
        out += unsigned_varint(len(raw) + 1) + raw
        out += unsigned_varint(len(partitions) + 1)
        out += b"".join(struct.pack(">i", p) for p in partitions)
        out += b"\x00"
    out += _TIMES.pack(meta.last_update_ms, meta.start_ms)
    tags = []
    if meta.prev_producer_id != NO_PRODUCER_ID:
        tags.append((_TAG_PREV_PRODUCER_ID, struct.pack(">q", meta.prev_producer_id)))
    if meta.next_producer_id != NO_PRODUCER_ID:
        tags.append((_TAG_NEXT_PRODUCER_ID, struct.pack(">q", meta.next_producer_id)))
    if meta.client_transaction_version:
        tags.append((_TAG_CLIENT_TXN_VERSION, struct.pack(">h", meta.client_transaction_version)))
    if meta.next_producer_epoch != NO_EPOCH:
        tags.append((_TAG_NEXT_PRODUCER_EPOCH, struct.pack(">h", meta.next_producer_epoch)))
    if meta.two_phase_commit:
        tags.append((_TAG_TWO_PHASE_COMMIT, b"\x01"))
    if meta.last_producer_epoch != NO_EPOCH:
        tags.append((_TAG_LAST_PRODUCER_EPOCH, struct.pack(">h", meta.last_producer_epoch)))
    out += unsigned_varint(len(tags))
    for tag, payload in tags:
        out += unsigned_varint(tag) + unsigned_varint(len(payload)) + payload
    return bytes(out)


class _Cursor:
    def __init__(self, data: bytes, flexible: bool) -> None:
        self.data = data
        self.pos = 2
        self.flexible = flexible

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return tuple(int(v) for v in values)

    def length(self) -> int:
        if self.flexible:
            value, self.pos = read_unsigned_varint(self.data, self.pos)
            return value - 1
        (value,) = self.unpack(struct.Struct(">i"))
        return value

    def string(self) -> str:
        if self.flexible:
            size = self.length()
        else:
            (size,) = self.unpack(struct.Struct(">h"))
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        return raw.decode()

    def skip_tags(self) -> dict[int, bytes]:
        if not self.flexible:
            return {}
        count, self.pos = read_unsigned_varint(self.data, self.pos)
        tags = {}
        for _ in range(count):
            tag, self.pos = read_unsigned_varint(self.data, self.pos)
            size, self.pos = read_unsigned_varint(self.data, self.pos)
            if self.pos + size > len(self.data):
                raise MalformedFrame(f"tag {tag} runs past the end")
            tags[tag] = self.data[self.pos : self.pos + size]
            self.pos += size
        return tags


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    if len(data) < 2:
        raise ValueError(f"damaged transaction log value ({len(data)} bytes)")
    (version,) = struct.unpack_from(">h", data, 0)
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    cursor = _Cursor(data, flexible=version >= 1)
    try:
        producer_id, epoch, timeout_ms, status = cursor.unpack(_FIXED)
        partitions: set[tuple[str, int]] = set()
        for _ in range(max(cursor.length(), 0)):
            topic = cursor.string()
            for _ in range(cursor.length()):
                (partition,) = cursor.unpack(struct.Struct(">i"))
                partitions.add((topic, partition))
            cursor.skip_tags()
        last_update_ms, start_ms = cursor.unpack(_TIMES)
        tags = cursor.skip_tags()
    except (struct.error, MalformedFrame, UnicodeDecodeError) as exc:
        raise ValueError(f"damaged transaction log value: {exc}") from exc

    def tag(number: int, fmt: str, default: int) -> int:
        raw = tags.get(number)
        if raw is None:
            return default
        if len(raw) != struct.calcsize(fmt):
            raise ValueError(f"damaged transaction log value: tag {number} of {len(raw)} bytes")
        return int(struct.unpack(fmt, raw)[0])

    return TxnMetadata(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        timeout_ms=timeout_ms,
        state=TxnState(status),
        partitions=frozenset(partitions),
        start_ms=start_ms,
        last_update_ms=last_update_ms,
        prev_producer_id=tag(_TAG_PREV_PRODUCER_ID, ">q", NO_PRODUCER_ID),
        next_producer_id=tag(_TAG_NEXT_PRODUCER_ID, ">q", NO_PRODUCER_ID),
        client_transaction_version=tag(_TAG_CLIENT_TXN_VERSION, ">h", 0),
        next_producer_epoch=tag(_TAG_NEXT_PRODUCER_EPOCH, ">h", NO_EPOCH),
        two_phase_commit=bool(tag(_TAG_TWO_PHASE_COMMIT, ">b", 0)),
        last_producer_epoch=tag(_TAG_LAST_PRODUCER_EPOCH, ">h", NO_EPOCH),
    )


@functools.lru_cache(maxsize=4096)  # every coordinator request hashes its key (~15 us for 22 chars)
def partition_for(key: str, partitions: int) -> int:
    """Kafka's Utils.abs(key.hashCode()) % partitions, so ids map like on a Kafka cluster."""
    h = 0
    for char in _utf16_units(key):
        h = (31 * h + char) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    positive = 0 if signed == -(2**31) else abs(signed)
    return positive % partitions


def _utf16_units(text: str) -> list[int]:
    raw = text.encode("utf-16-be")
    return [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]
