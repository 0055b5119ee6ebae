# Produce request decoding and response encoding, hand-written for the hot path.
#
# Hand-written rather than kio because: Produce v0-2 must be read to answer UNSUPPORTED_VERSION
# (kio starts at v3); lockgate's KIP-359 field is a tagged field kio does not know; and the
# records are handed on as bytes slices without building dataclasses per partition.
#
# KIP-359 in lockgate: PartitionProduceData tag 0 = CurrentLeaderEpoch (int32) in v9+.
from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from lockgate.protocol.frame import MalformedFrame, unsigned_varint
from lockgate.protocol.wire import BodyReader

CURRENT_LEADER_EPOCH_TAG = 0
FIRST_FLEXIBLE = 9
FIRST_TOPIC_ID = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(slots=True)
class ProducePartition:
    index: int
    records: bytes | None
    current_leader_epoch: int = -1  # -1: the client did not send the KIP-359 field


@dataclass(slots=True)
class ProduceTopic:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[ProducePartition] = field(default_factory=list)


@dataclass(slots=True)
class ProduceRequestData:
    version: int
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]


def decode_produce(data: bytes, offset: int, version: int) -> ProduceRequestData:
    """Decodes a Produce body of any version 0-13; raises MalformedFrame."""
    reader = BodyReader(data, offset, version >= FIRST_FLEXIBLE)
    transactional_id = reader.string() if version >= 3 else None
    acks = reader.int16()
    timeout_ms = reader.int32()
    topics = []
    for _ in range(reader.array_length()):
        if version >= FIRST_TOPIC_ID:
            topic = ProduceTopic(None, reader.uuid())
        else:
            topic = ProduceTopic(reader.string(), None)
            if topic.name is None:
                raise MalformedFrame("null topic name")
        for _ in range(reader.array_length()):
            partition = ProducePartition(reader.int32(), reader.records())
            tags = reader.tagged_fields()
            epoch = tags.get(CURRENT_LEADER_EPOCH_TAG)
            if epoch is not None:
                if len(epoch) != 4:
                    raise MalformedFrame("CurrentLeaderEpoch tag must hold an int32")
                partition.current_leader_epoch = int(_I32.unpack(epoch)[0])
            topic.partitions.append(partition)
        reader.tagged_fields()
        topics.append(topic)
    reader.tagged_fields()
    if reader.pos != len(data):
        raise MalformedFrame(f"{len(data) - reader.pos} trailing bytes after the Produce body")
    return ProduceRequestData(version, transactional_id, acks, timeout_ms, topics)


@dataclass(slots=True)
class PartitionResult:
    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


class _Writer(bytearray):
    """A growing body with the length and string encodings of the (non-)flexible versions."""

    def __init__(self, flexible: bool) -> None:
        super().__init__()
        self.flexible = flexible

    def length(self, size: int) -> None:
        self.extend(unsigned_varint(size + 1) if self.flexible else _I32.pack(size))

    def string(self, value: str | None) -> None:
        if value is None:
            self.extend(b"\x00" if self.flexible else _I16.pack(-1))
            return
        raw = value.encode()
        self.extend(unsigned_varint(len(raw) + 1) if self.flexible else _I16.pack(len(raw)))
        self.extend(raw)


def encode_produce_response(
    version: int,
    topics: list[tuple[ProduceTopic, list[PartitionResult]]],
    throttle_ms: int = 0,
) -> bytes:
    flexible = version >= FIRST_FLEXIBLE
    out = _Writer(flexible)
    length, string = out.length, out.string

    length(len(topics))
    for topic, results in topics:
        if version >= FIRST_TOPIC_ID:
            out.extend((topic.topic_id or uuid.UUID(int=0)).bytes)
        else:
            string(topic.name)
        length(len(results))
        for result in results:
            out.extend(_I32.pack(result.index))
            out.extend(_I16.pack(result.error_code))
            out.extend(_I64.pack(result.base_offset))
            if version >= 2:
                out.extend(_I64.pack(result.log_append_time_ms))
            if version >= 5:
                out.extend(_I64.pack(result.log_start_offset))
            if version >= 8:
                length(0)  # record_errors
                string(result.error_message)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if version >= 1:
        out.extend(_I32.pack(throttle_ms))
    if flexible:
        out.append(0)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Request encoding, for lockgate's own client: kio cannot write the KIP-359 tag.


def encode_produce_request(request: ProduceRequestData) -> bytes:
    """Encodes a Produce request body of version 3-13: the inverse of decode_produce.

    A partition whose current_leader_epoch is ≥ 0 carries it as the KIP-359 tagged field in
    v9+; versions before 9 have no tagged fields, so there it is left out (no check then, as
    for every other client). v13 names topics by id, earlier versions by name."""
    version = request.version
    if not 3 <= version <= 13:
        raise ValueError(f"Produce v{version} cannot be encoded (v3-13 carry record batch v2)")
    flexible = version >= FIRST_FLEXIBLE
    out = _Writer(flexible)
    length, string = out.length, out.string

    string(request.transactional_id)
    out.extend(_I16.pack(request.acks))
    out.extend(_I32.pack(request.timeout_ms))
    length(len(request.topics))
    for topic in request.topics:
        if version >= FIRST_TOPIC_ID:
            if topic.topic_id is None:
                raise ValueError(f"Produce v{version} needs topic ids ({topic.name} has none)")
            out.extend(topic.topic_id.bytes)
        else:
            if topic.name is None:
                raise ValueError(f"Produce v{version} needs topic names")
            string(topic.name)
        length(len(topic.partitions))
        for partition in topic.partitions:
            out.extend(_I32.pack(partition.index))
            if partition.records is None:
                length(-1)
            else:
                length(len(partition.records))
                out.extend(partition.records)
            if flexible:
                if partition.current_leader_epoch >= 0:
                    out.extend(unsigned_varint(1))  # one tagged field
                    out.extend(unsigned_varint(CURRENT_LEADER_EPOCH_TAG))
                    out.extend(unsigned_varint(4))
                    out.extend(_I32.pack(partition.current_leader_epoch))
                else:
                    out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    return bytes(out)
