"""kio dispatch: schema lookup, the version-agnostic builder, body decoding and encoding."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from lockgate.protocol.api import (
    ApiKey,
    BodyDecodeError,
    build,
    decode_body,
    encode,
    is_flexible,
    request_class,
    response_class,
)

TOPIC_ID = uuid.UUID("0b7c6f1e-94b3-4e84-9b0a-6f0f7e0d5c4a")


def request_schema(api_key: int, version: int) -> type[Any]:
    """kio's request class, typed loosely: tests read fields of one known version."""
    return load_request_schema(api_key, version)


def response_schema(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


def metadata_response() -> dict[str, Any]:
    """A Metadata response in the newest shape, as a handler would describe it."""
    return {
        "throttle_time": 12,
        "brokers": [{"node_id": 0, "host": "localhost", "port": 9092, "rack": None}],
        "cluster_id": "cluster",
        "controller_id": 0,
        "topics": [
            {
                "error_code": 0,
                "name": "orders",
                "topic_id": TOPIC_ID.bytes,
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 6,
                        "partition_index": 0,
                        "leader_id": 0,
                        "leader_epoch": 4,
                        "replica_nodes": [0],
                        "isr_nodes": [0],
                        "offline_replicas": [],
                    }
                ],
                "topic_authorized_operations": -2147483648,
            }
        ],
        "cluster_authorized_operations": -2147483648,
    }


def field_names(entity: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(entity)}


def test_request_and_response_classes() -> None:
    assert request_class(ApiKey.PRODUCE, 9) is request_schema(0, 9)
    assert response_class(ApiKey.METADATA, 12) is response_schema(3, 12)
    assert request_class(9999, 0) is None
    assert request_class(ApiKey.PRODUCE, 999) is None


@pytest.mark.parametrize(
    ("api_key", "version", "flexible"),
    [
        (ApiKey.PRODUCE, 8, False),
        (ApiKey.PRODUCE, 9, True),
        (ApiKey.FETCH, 11, False),
        (ApiKey.FETCH, 12, True),
        (ApiKey.API_VERSIONS, 2, False),
        (ApiKey.API_VERSIONS, 3, True),
        (ApiKey.END_TXN, 3, True),
        (9999, 0, False),
        (ApiKey.PRODUCE, 999, False),
    ],
)
def test_is_flexible(api_key: int, version: int, flexible: bool) -> None:
    assert is_flexible(api_key, version) is flexible


def test_build_drops_fields_the_version_lacks() -> None:
    old = build(response_schema(ApiKey.METADATA, 0), metadata_response())
    assert "throttle_time" not in field_names(old)
    assert "cluster_id" not in field_names(old)
    [topic] = old.topics
    assert "topic_id" not in field_names(topic)
    [partition] = topic.partitions
    assert "leader_epoch" not in field_names(partition)
    assert "offline_replicas" not in field_names(partition)
    assert partition.isr_nodes == (0,)
    # And the result encodes and decodes in that version.
    cls = response_schema(ApiKey.METADATA, 0)
    assert decode_body(cls, encode(old), 0) == old


def test_build_converts_to_kio_types() -> None:
    cls = response_schema(ApiKey.METADATA, 12)
    built = build(cls, metadata_response())
    assert built.throttle_time == datetime.timedelta(milliseconds=12)
    [topic] = built.topics
    assert topic.error_code is ErrorCode.none
    assert topic.topic_id == TOPIC_ID  # 16 bytes → UUID
    [partition] = topic.partitions
    assert partition.error_code is ErrorCode.not_leader_or_follower
    assert partition.leader_epoch == 4
    assert isinstance(topic.partitions, tuple)  # lists → tuples, nested dataclasses built
    assert isinstance(partition.replica_nodes, tuple)
    assert partition.offline_replicas == ()
    assert decode_body(cls, encode(built), 0) == built


def test_build_keeps_values_already_of_the_right_type() -> None:
    cls = response_schema(ApiKey.METADATA, 12)
    data = metadata_response()
    data["throttle_time"] = datetime.timedelta(milliseconds=3)
    data["topics"][0]["error_code"] = ErrorCode.unknown_topic_or_partition
    data["topics"][0]["topic_id"] = TOPIC_ID
    built = build(cls, data)
    assert built.throttle_time == datetime.timedelta(milliseconds=3)
    assert built.topics[0].error_code is ErrorCode.unknown_topic_or_partition
    assert built.topics[0].topic_id == TOPIC_ID
    data["topics"][0]["topic_id"] = None
    assert build(cls, data).topics[0].topic_id is None
    # An instance of the class itself passes through untouched.
    assert build(cls, built) is built


def test_build_nested_entities_may_already_be_built() -> None:
    cls = response_schema(ApiKey.METADATA, 12)
    data = metadata_response()
    topic = build(cls, data).topics[0]
    data["topics"] = [topic]
    assert build(cls, data).topics == (topic,)


def test_build_by_version_keeps_only_that_versions_fields() -> None:
    data = {
        "throttle_time": 0,
        "error_code": 90,
        "producer_id": 5,
        "producer_epoch": 2,
        "ongoing_txn_producer_id": 4,
        "ongoing_txn_producer_epoch": 1,
    }
    v0 = build(response_schema(ApiKey.INIT_PRODUCER_ID, 0), data)
    v6 = build(response_schema(ApiKey.INIT_PRODUCER_ID, 6), data)
    assert "ongoing_txn_producer_id" not in field_names(v0)
    assert v0.error_code is ErrorCode.producer_fenced
    assert (v6.ongoing_txn_producer_id, v6.ongoing_txn_producer_epoch) == (4, 1)


def test_build_missing_required_field_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="producer_epoch"):
        build(
            response_schema(ApiKey.INIT_PRODUCER_ID, 0),
            {"throttle_time": 0, "error_code": 0, "producer_id": 1},
        )


def test_build_fields_with_defaults_may_be_left_out() -> None:
    cls = response_schema(ApiKey.INIT_PRODUCER_ID, 6)
    built = build(cls, {"throttle_time": 0, "error_code": 0, "producer_epoch": 0})
    assert built.producer_id == -1
    assert (built.ongoing_txn_producer_id, built.ongoing_txn_producer_epoch) == (-1, -1)


def test_build_unknown_error_code_is_rejected() -> None:
    with pytest.raises(ValueError):
        build(
            response_schema(ApiKey.INIT_PRODUCER_ID, 0),
            {"throttle_time": 0, "error_code": 31999, "producer_id": 1, "producer_epoch": 0},
        )


def api_versions_request() -> tuple[type[Any], bytes]:
    cls = request_schema(ApiKey.API_VERSIONS, 3)
    body = encode(build(cls, {"client_software_name": "lg", "client_software_version": "1.0"}))
    return cls, body


def test_decode_body_round_trip_at_an_offset() -> None:
    cls, body = api_versions_request()
    decoded = decode_body(cls, b"HEADER" + body, 6)
    assert (decoded.client_software_name, decoded.client_software_version) == ("lg", "1.0")


def test_decode_body_accepts_bytearray() -> None:
    cls, body = api_versions_request()
    assert decode_body(cls, bytearray(body), 0) == decode_body(cls, body, 0)  # type: ignore[arg-type]


def test_decode_body_ignores_trailing_bytes() -> None:
    # Deliberate, like Kafka: librdkafka's all-topics Metadata request carries a few.
    cls, body = api_versions_request()
    assert decode_body(cls, body + b"\x00\x01\x02", 0) == decode_body(cls, body, 0)


def test_decode_body_truncated_is_body_decode_error() -> None:
    cls, body = api_versions_request()
    for cut in range(len(body)):
        with pytest.raises(BodyDecodeError):
            decode_body(cls, body[:cut], 0)


def test_decode_body_unknown_tagged_field_is_body_decode_error() -> None:
    cls, body = api_versions_request()
    assert body.endswith(b"\x00")  # empty tag section
    with pytest.raises(BodyDecodeError, match="tag"):
        decode_body(cls, body[:-1] + b"\x01\x05\x01\x00", 0)


def test_decode_body_bad_values_are_body_decode_errors() -> None:
    cls = request_schema(ApiKey.API_VERSIONS, 3)
    with pytest.raises(BodyDecodeError):  # invalid UTF-8 in a compact string
        decode_body(cls, b"\x03\xff\xfe\x01\x00", 0)
    metadata = request_schema(ApiKey.METADATA, 4)
    with pytest.raises(BodyDecodeError):  # array of 2^31-1 topics in a few bytes
        decode_body(metadata, b"\x7f\xff\xff\xff\x00", 0)
