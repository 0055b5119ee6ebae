"""Lengths on the wire are checked against the body before kio's compiled reader runs: a frame
claiming a huge array used to make it reserve that much memory and abort the broker."""

from __future__ import annotations

import pytest

from lockgate.protocol.api import BodyDecodeError, decode_body, request_class

# An OffsetFetch v10 body found by hypothesis: kio's compiled reader alone tries to reserve
# 191,803,870,952 bytes for one of its arrays and aborts the process (exit code 134).
HUGE_ARRAY = bytes.fromhex(
    "deb3b3a8596034e50c6a42c0d5e76fab5352b104875714e6b87d29176386d7ec"
    "004b0c17f4f8a9d8bac63b01519027627201d544f999e076039f45"
)


def test_a_huge_array_length_is_malformed_not_an_allocation() -> None:
    cls = request_class(9, 10)
    assert cls is not None
    with pytest.raises(BodyDecodeError, match="cannot fit"):
        decode_body(cls, HUGE_ARRAY, 0)


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ((3, 4), b"\x7f\xff\xff\xff"),  # Metadata v4 (classic): int32 topic count 2^31-1
        ((19, 2), b"\x00\x00\x00\x01\x7f\xff"),  # CreateTopics v2: name of 32767 bytes
        ((42, 2), b"\x80\x80\x80\x80\x08\x00"),  # DeleteGroups v2: compact array 2^31
    ],
)
def test_lengths_past_the_end_are_malformed(api: tuple[int, int], body: bytes) -> None:
    cls = request_class(*api)
    assert cls is not None
    with pytest.raises(BodyDecodeError):
        decode_body(cls, body, 0)


def test_a_valid_body_still_decodes() -> None:
    cls = request_class(42, 2)  # DeleteGroups v2: ["g1", "g2"]
    assert cls is not None
    body = b"\x03" + b"\x03g1" + b"\x03g2" + b"\x00"
    assert decode_body(cls, body, 0).groups_names == ("g1", "g2")


@pytest.mark.parametrize("assignment", [None, {"topic_partitions": [{"topic_id": None}]}])
def test_a_nullable_struct_is_read_after_its_marker(assignment: object) -> None:
    # ConsumerGroupHeartbeat's response carries its Assignment as a nullable struct: an int8
    # marker (-1 null, 1 present) before the fields; the guard used to read it as a field.
    from kio.schema.consumer_group_heartbeat.v1.response import ConsumerGroupHeartbeatResponse

    from lockgate.protocol.api import build, encode

    body = {
        "throttle_time": 0,
        "error_code": 0,
        "member_id": "m",
        "member_epoch": 3,
        "heartbeat_interval": 5000,
        "assignment": assignment,
    }
    decoded = decode_body(
        ConsumerGroupHeartbeatResponse,
        encode(build(ConsumerGroupHeartbeatResponse, body)),
        0,
    )
    assert decoded.member_epoch == 3
    assert (decoded.assignment is None) == (assignment is None)
