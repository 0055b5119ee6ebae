"""Produce: the hand-written decoder (v0–13, KIP-359 CurrentLeaderEpoch tag) and response
encoder, cross-checked against kio's generated codecs where kio has the version (v3+)."""

from __future__ import annotations

import datetime
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from lockgate.protocol import api
from lockgate.protocol.frame import MalformedFrame
from lockgate.protocol.produce import (
    CURRENT_LEADER_EPOCH_TAG,
    PartitionResult,
    ProduceTopic,
    decode_produce,
    encode_produce_response,
)
from lockgate.protocol.records import build_batch

ALL_VERSIONS = range(14)
KIO_VERSIONS = range(3, 14)
FLEXIBLE_VERSIONS = range(9, 14)
TOPIC_ID = uuid.UUID("5f6a0b1c-2d3e-4f50-8a9b-0c1d2e3f4a5b")
BATCH = build_batch([(b"k", b"v"), (None, b"second")], timestamp_ms=1_000)


def request_schema(api_key: int, version: int) -> type[Any]:
    """kio's request class, typed loosely: tests read fields of one known version."""
    return load_request_schema(api_key, version)


def response_schema(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tags(fields: dict[int, bytes]) -> bytes:
    out = uvarint(len(fields))
    for tag, value in sorted(fields.items()):
        out += uvarint(tag) + uvarint(len(value)) + value
    return out


@dataclass
class Partition:
    index: int
    records: bytes | None
    tagged: dict[int, bytes] = field(default_factory=dict)


@dataclass
class Topic:
    name: str
    partitions: list[Partition]
    tagged: dict[int, bytes] = field(default_factory=dict)


def encode_request(
    version: int,
    topics: list[Topic],
    *,
    transactional_id: str | None = None,
    acks: int = -1,
    timeout_ms: int = 30_000,
    tagged: dict[int, bytes] | None = None,
) -> bytes:
    """A Produce body written field by field from Kafka's ProduceRequest.json."""
    flexible = version >= 9

    def length(size: int) -> bytes:
        return uvarint(size + 1) if flexible else struct.pack(">i", size)

    def string(value: str | None) -> bytes:
        if value is None:
            return b"\x00" if flexible else struct.pack(">h", -1)
        raw = value.encode()
        return (uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))) + raw

    out = bytearray()
    if version >= 3:
        out += string(transactional_id)
    out += struct.pack(">hi", acks, timeout_ms)
    out += length(len(topics))
    for topic in topics:
        out += TOPIC_ID.bytes if version >= 13 else string(topic.name)
        out += length(len(topic.partitions))
        for partition in topic.partitions:
            out += struct.pack(">i", partition.index)
            if partition.records is None:
                out += b"\x00" if flexible else struct.pack(">i", -1)
            else:
                out += length(len(partition.records)) + partition.records
            if flexible:
                out += tags(partition.tagged)
        if flexible:
            out += tags(topic.tagged)
    if flexible:
        out += tags(tagged or {})
    return bytes(out)


def kio_request(version: int, topics: list[Topic], transactional_id: str | None) -> bytes:
    cls = request_schema(0, version)
    topic_key = "topic_id" if version >= 13 else "name"
    request = api.build(
        cls,
        {
            "transactional_id": transactional_id,
            "acks": -1,
            "timeout": datetime.timedelta(milliseconds=30_000),
            "topic_data": [
                {
                    topic_key: TOPIC_ID if version >= 13 else topic.name,
                    "partition_data": [
                        {"index": p.index, "records": p.records} for p in topic.partitions
                    ],
                }
                for topic in topics
            ],
        },
    )
    return api.encode(request)


def sample_topics() -> list[Topic]:
    return [
        Topic("orders", [Partition(0, BATCH), Partition(3, None), Partition(7, b"")]),
        Topic("ünïcode-tøpic", [Partition(1, BATCH + BATCH)]),
        Topic("empty", []),
    ]


# -- decoding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KIO_VERSIONS)
def test_test_encoder_matches_kio(version: int) -> None:
    topics = sample_topics()
    assert encode_request(version, topics, transactional_id="tx") == kio_request(
        version, topics, "tx"
    )


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_decode_every_version(version: int) -> None:
    topics = sample_topics()
    body = encode_request(version, topics, transactional_id="txn-1", acks=1, timeout_ms=1234)
    decoded = decode_produce(body, 0, version)
    assert decoded.version == version
    assert decoded.transactional_id == ("txn-1" if version >= 3 else None)
    assert (decoded.acks, decoded.timeout_ms) == (1, 1234)
    assert len(decoded.topics) == len(topics)
    for got, want in zip(decoded.topics, topics, strict=True):
        if version >= 13:
            assert (got.name, got.topic_id) == (None, TOPIC_ID)
        else:
            assert (got.name, got.topic_id) == (want.name, None)
        assert [(p.index, p.records, p.current_leader_epoch) for p in got.partitions] == [
            (p.index, p.records, -1) for p in want.partitions
        ]


@pytest.mark.parametrize("version", KIO_VERSIONS)
def test_decode_kio_encoded_requests(version: int) -> None:
    topics = sample_topics()
    decoded = decode_produce(kio_request(version, topics, None), 0, version)
    assert decoded.transactional_id is None
    assert decoded.acks == -1 and decoded.timeout_ms == 30_000
    assert [[(p.index, p.records) for p in t.partitions] for t in decoded.topics] == [
        [(p.index, p.records) for p in t.partitions] for t in topics
    ]


def test_decode_starts_at_the_body_offset() -> None:
    body = encode_request(7, sample_topics())
    decoded = decode_produce(b"HEADER" + body, 6, 7)
    assert decoded.topics[0].name == "orders"
    assert decoded.topics[0].partitions[0].records == BATCH


@pytest.mark.parametrize("version", FLEXIBLE_VERSIONS)
@pytest.mark.parametrize("epoch", [0, 5, 2**31 - 1, -1, -(2**31)])
def test_current_leader_epoch_tag(version: int, epoch: int) -> None:
    topics = [
        Topic(
            "t",
            [
                Partition(0, BATCH, {CURRENT_LEADER_EPOCH_TAG: struct.pack(">i", epoch)}),
                Partition(1, BATCH),
                # An unknown tag next to ours is skipped, as tagged fields must be.
                Partition(2, BATCH, {CURRENT_LEADER_EPOCH_TAG: struct.pack(">i", 3), 9: b"?"}),
            ],
        )
    ]
    decoded = decode_produce(encode_request(version, topics), 0, version)
    partitions = decoded.topics[0].partitions
    assert [p.current_leader_epoch for p in partitions] == [epoch, -1, 3]
    assert [p.records for p in partitions] == [BATCH] * 3


@pytest.mark.parametrize("version", FLEXIBLE_VERSIONS)
@pytest.mark.parametrize("raw", [b"", b"\x00\x00\x07", b"\x00\x00\x00\x00\x07"])
def test_current_leader_epoch_tag_of_the_wrong_size_is_malformed(version: int, raw: bytes) -> None:
    body = encode_request(version, [Topic("t", [Partition(0, BATCH, {0: raw})])])
    with pytest.raises(MalformedFrame, match="CurrentLeaderEpoch"):
        decode_produce(body, 0, version)


@pytest.mark.parametrize("version", FLEXIBLE_VERSIONS)
def test_topic_and_request_level_tags_are_skipped(version: int) -> None:
    topics = [Topic("t", [Partition(0, BATCH)], {0: b"topic-tag"})]
    body = encode_request(version, topics, tagged={0: b"abc", 200: b"\x00" * 300})
    decoded = decode_produce(body, 0, version)
    assert decoded.topics[0].partitions[0].records == BATCH
    assert decoded.topics[0].partitions[0].current_leader_epoch == -1


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_trailing_bytes_are_malformed(version: int) -> None:
    body = encode_request(version, sample_topics())
    for extra in (b"\x00", b"junk"):
        with pytest.raises(MalformedFrame, match="trailing"):
            decode_produce(body + extra, 0, version)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_every_truncation_is_malformed(version: int) -> None:
    topics = [Topic("ab", [Partition(0, BATCH[:20]), Partition(1, None)])]
    body = encode_request(
        version, topics, transactional_id="t", tagged={1: b"xy"} if version >= 9 else None
    )
    decode_produce(body, 0, version)
    for cut in range(len(body)):
        with pytest.raises(MalformedFrame):
            decode_produce(body[:cut], 0, version)


def v8_prefix() -> bytes:
    return struct.pack(">hhi", -1, -1, 1000)  # null transactional id, acks, timeout


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (v8_prefix() + struct.pack(">i", -2), "negative array length"),
        (v8_prefix() + struct.pack(">i", 1_000_000), "cannot fit"),
        (v8_prefix() + struct.pack(">ih", 1, -1), "null topic name"),
        (v8_prefix() + struct.pack(">ih", 1, -2), "negative string length"),
        (v8_prefix() + struct.pack(">ih", 1, 2) + b"\xff\xfe", "UTF-8"),
        (v8_prefix() + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">i", -5), "negative array"),
        (
            v8_prefix() + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, -2),
            "negative bytes length",
        ),
        (
            v8_prefix() + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, 100),
            "truncated",
        ),
    ],
)
def test_bad_lengths_are_malformed(body: bytes, message: str) -> None:
    with pytest.raises(MalformedFrame, match=message):
        decode_produce(body, 0, 8)


def test_flexible_bad_lengths_are_malformed() -> None:
    # Compact string length 0 = null transactional id, then acks, timeout, one topic (2) with
    # a compact name of length 0 (null).
    base = b"\x00" + struct.pack(">hi", -1, 1000)
    with pytest.raises(MalformedFrame, match="null topic name"):
        decode_produce(base + b"\x02\x00", 0, 9)
    with pytest.raises(MalformedFrame):  # unterminated varint array length
        decode_produce(base + b"\xff\xff\xff\xff\xff\xff", 0, 9)


def test_null_topic_array_decodes_as_empty() -> None:
    decoded = decode_produce(v8_prefix() + struct.pack(">i", -1), 0, 8)
    assert decoded.topics == []
    decoded = decode_produce(b"\x00" + struct.pack(">hi", 0, 5) + b"\x00" + b"\x00", 0, 9)
    assert decoded.topics == [] and decoded.acks == 0


# -- response encoding -------------------------------------------------------------------------

RESULTS = [
    PartitionResult(0, 0, 42, -1, 10, None),
    PartitionResult(3, ErrorCode.not_leader_or_follower.value, -1, 1_700_000_000_123, 0, "moved"),
    PartitionResult(9, ErrorCode.fenced_leader_epoch.value),
]


def response_topics() -> list[tuple[ProduceTopic, list[PartitionResult]]]:
    return [
        (ProduceTopic("orders", TOPIC_ID), RESULTS),
        (ProduceTopic("other", uuid.UUID(int=7)), []),
    ]


@pytest.mark.parametrize("version", KIO_VERSIONS)
def test_response_decodes_with_kio(version: int) -> None:
    raw = encode_produce_response(version, response_topics(), throttle_ms=250)
    value, size = entity_reader(response_schema(0, version))(memoryview(raw), 0)
    assert size == len(raw)
    assert value.throttle_time == datetime.timedelta(milliseconds=250)
    first, second = value.responses
    if version >= 13:
        assert (first.topic_id, second.topic_id) == (TOPIC_ID, uuid.UUID(int=7))
    else:
        assert (first.name, second.name) == ("orders", "other")
    assert second.partition_responses == ()
    partitions = first.partition_responses
    assert [(p.index, p.error_code, p.base_offset) for p in partitions] == [
        (0, ErrorCode.none, 42),
        (3, ErrorCode.not_leader_or_follower, -1),
        (9, ErrorCode.fenced_leader_epoch, -1),
    ]
    assert partitions[0].log_append_time is None  # -1: CreateTime
    assert partitions[1].log_append_time == datetime.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC
    )
    if version >= 5:
        assert [p.log_start_offset for p in partitions] == [10, 0, -1]
    if version >= 8:
        assert [p.error_message for p in partitions] == [None, "moved", None]
        assert all(p.record_errors == () for p in partitions)


def read_v0_to_v2(raw: bytes, version: int) -> tuple[list[tuple[str, list[tuple[int, ...]]]], int]:
    pos = 0
    (topic_count,) = struct.unpack_from(">i", raw, pos)
    pos += 4
    topics = []
    for _ in range(topic_count):
        (name_length,) = struct.unpack_from(">h", raw, pos)
        name = raw[pos + 2 : pos + 2 + name_length].decode()
        pos += 2 + name_length
        (count,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        partitions = []
        for _ in range(count):
            fmt = ">ihqq" if version >= 2 else ">ihq"
            partitions.append(struct.unpack_from(fmt, raw, pos))
            pos += struct.calcsize(fmt)
        topics.append((name, partitions))
    throttle = -1
    if version >= 1:
        (throttle,) = struct.unpack_from(">i", raw, pos)
        pos += 4
    assert pos == len(raw), "bytes left over"
    return topics, throttle


@pytest.mark.parametrize("version", [0, 1, 2])
def test_old_response_versions(version: int) -> None:
    raw = encode_produce_response(version, response_topics(), throttle_ms=7)
    topics, throttle = read_v0_to_v2(raw, version)
    assert throttle == (7 if version >= 1 else -1)
    assert [name for name, _ in topics] == ["orders", "other"]
    expected = [
        (0, 0, 42, -1),
        (3, ErrorCode.not_leader_or_follower.value, -1, 1_700_000_000_123),
        (9, ErrorCode.fenced_leader_epoch.value, -1, -1),
    ]
    assert topics[0][1] == [e if version >= 2 else e[:3] for e in expected]


def test_flexible_response_writes_tagged_field_sections() -> None:
    one = [(ProduceTopic("t", None), [PartitionResult(0)])]
    v8 = encode_produce_response(8, one)
    v9 = encode_produce_response(9, one)
    # v9 uses compact lengths and adds three empty tag sections (partition, topic, response).
    assert v9.endswith(b"\x00")
    assert len(v9) != len(v8)
    value, _ = entity_reader(response_schema(0, 9))(memoryview(v9), 0)
    assert value.responses[0].partition_responses[0].base_offset == -1


def test_v13_without_topic_id_writes_the_zero_uuid() -> None:
    raw = encode_produce_response(13, [(ProduceTopic("t", None), [PartitionResult(0)])])
    value, _ = entity_reader(response_schema(0, 13))(memoryview(raw), 0)
    assert value.responses[0].topic_id in (None, uuid.UUID(int=0))
