"""A null array where the schema does not allow one is a malformed body (Kafka's parser rejects
it too), found by fuzzing: handlers must never see None for a non-nullable field."""

from __future__ import annotations

import pytest

from lockgate.protocol.api import BodyDecodeError, decode_body, request_class


def test_a_null_non_nullable_array_is_malformed() -> None:
    cls = request_class(10, 6)  # FindCoordinator v6: key_type, coordinator_keys
    assert cls is not None
    with pytest.raises(BodyDecodeError, match="coordinator_keys is null"):
        decode_body(cls, b"\x01" + b"\x00" + b"\x00", 0)
    decoded = decode_body(cls, b"\x01" + b"\x02\x02g" + b"\x00", 0)
    assert decoded.coordinator_keys == ("g",)


def test_a_null_array_inside_an_entity_is_malformed() -> None:
    cls = request_class(61, 0)  # DescribeProducers v0: topics [name, partition_indexes]
    assert cls is not None
    topic = b"\x02t" + b"\x00" + b"\x00"  # name "t", partition_indexes null, no tags
    with pytest.raises(BodyDecodeError, match="partition_indexes is null"):
        decode_body(cls, b"\x02" + topic + b"\x00", 0)
