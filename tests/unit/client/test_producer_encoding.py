# The client's Produce request encoder: the KIP-359 tag (CurrentLeaderEpoch, tag 0 of the
# partition data in v9+) must round-trip through the broker's own decoder, and without the tag
# the bytes must be exactly what kio (Kafka's schemas) writes.
from __future__ import annotations

import uuid

import pytest

from lockgate.client.batches import ProducerIdentity, build_producer_batch
from lockgate.protocol.api import build, encode, request_class
from lockgate.protocol.produce import (
    CURRENT_LEADER_EPOCH_TAG,
    ProducePartition,
    ProduceRequestData,
    ProduceTopic,
    decode_produce,
    encode_produce_request,
)
from lockgate.protocol.records import parse_header

BATCH = build_producer_batch(
    [(b"k", b"v", (), 1_700_000_000_000)],
    identity=ProducerIdentity(42, 3, transactional=True),
    base_sequence=7,
)
TOPIC_ID = uuid.UUID("6a1c7b4e-93c0-4d0c-8f7e-1b2a3c4d5e6f")


def request(version: int, epochs: tuple[int, int] = (5, -1)) -> ProduceRequestData:
    by_id = version >= 13
    return ProduceRequestData(
        version,
        "txn-1" if version >= 3 else None,
        -1,
        30_000,
        [
            ProduceTopic(
                None if by_id else "orders",
                TOPIC_ID if by_id else None,
                [ProducePartition(0, BATCH, epochs[0]), ProducePartition(2, None, epochs[1])],
            ),
            ProduceTopic(
                None if by_id else "audit",
                uuid.UUID(int=7) if by_id else None,
                [ProducePartition(1, BATCH, 0)],
            ),
        ],
    )


@pytest.mark.parametrize("version", range(9, 14))
def test_leader_epoch_tag_round_trips_through_the_broker_decoder(version: int) -> None:
    sent = request(version)
    decoded = decode_produce(encode_produce_request(sent), 0, version)
    assert decoded == sent
    (first, second) = decoded.topics
    assert [p.current_leader_epoch for p in first.partitions] == [5, -1]  # -1: no tag at all
    assert second.partitions[0].current_leader_epoch == 0  # 0 is a real epoch
    header = parse_header(first.partitions[0].records or b"")
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 7)


def untagged(version: int) -> ProduceRequestData:
    sent = request(version)
    for topic in sent.topics:
        for partition in topic.partitions:
            partition.current_leader_epoch = -1
    return sent


@pytest.mark.parametrize("version", range(3, 9))
def test_versions_before_9_cannot_carry_the_tag(version: int) -> None:
    decoded = decode_produce(encode_produce_request(request(version)), 0, version)
    assert decoded == untagged(version)


def test_tag_bytes_follow_the_partition_records() -> None:
    body = encode_produce_request(
        ProduceRequestData(9, None, 1, 1000, [ProduceTopic("t", None, [ProducePartition(0, b"")])])
    )
    untagged_tail = b"\x00\x00\x00"  # partition tags, topic tags, request tags
    assert body.endswith(untagged_tail)
    tagged = encode_produce_request(
        ProduceRequestData(
            9, None, 1, 1000, [ProduceTopic("t", None, [ProducePartition(0, b"", 0x01020304)])]
        )
    )
    # one tagged field: tag 0, size 4, int32 big-endian
    assert tagged.endswith(bytes([1, CURRENT_LEADER_EPOCH_TAG, 4, 1, 2, 3, 4]) + b"\x00\x00")


@pytest.mark.parametrize("version", range(3, 14))
def test_without_the_tag_the_bytes_are_kios(version: int) -> None:
    sent = untagged(version)
    theirs = encode(
        build(
            request_class(0, version),  # type: ignore[arg-type]
            {
                "transactional_id": sent.transactional_id,
                "acks": sent.acks,
                "timeout": sent.timeout_ms,
                "topic_data": [
                    {
                        "name": t.name,
                        "topic_id": t.topic_id,
                        "partition_data": [
                            {"index": p.index, "records": p.records} for p in t.partitions
                        ],
                    }
                    for t in sent.topics
                ],
            },
        )
    )
    assert encode_produce_request(sent) == theirs


def test_refuses_what_it_cannot_encode() -> None:
    with pytest.raises(ValueError, match="v2"):
        encode_produce_request(ProduceRequestData(2, None, 1, 1000, []))
    with pytest.raises(ValueError, match="topic ids"):
        encode_produce_request(ProduceRequestData(13, None, 1, 1000, [ProduceTopic("t", None, [])]))
    with pytest.raises(ValueError, match="topic names"):
        encode_produce_request(
            ProduceRequestData(12, None, 1, 1000, [ProduceTopic(None, TOPIC_ID, [])])
        )
