"""Metadata: the hand-written response encoder (v0–13) writes what kio writes, byte for byte,
for answers in the shape the handler builds them."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.protocol.api import ApiKey, build, encode, response_class
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.metadata import LAST_VERSION, encode_metadata_response

VERSIONS = range(LAST_VERSION + 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
IDS = st.lists(INT32, max_size=5).map(tuple)
TEXT = st.text(max_size=20)


def kio_body(version: int, answer: dict[str, Any]) -> bytes:
    return encode(build(response_class(ApiKey.METADATA, version), answer))


@st.composite
def partitions(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "error_code": draw(st.sampled_from(list(ErrorCode))),
        "partition_index": draw(INT32),
        "leader_id": draw(INT32),
        "leader_epoch": draw(INT32),
        "replica_nodes": draw(IDS),
        "isr_nodes": draw(IDS),
        "offline_replicas": draw(IDS),
    }


@st.composite
def topics(draw: st.DrawFn, nullable_name: bool) -> dict[str, Any]:
    names = st.none() | TEXT if nullable_name else TEXT
    return {
        "error_code": draw(st.sampled_from(list(ErrorCode))),
        "name": draw(names),
        "topic_id": draw(st.uuids() | st.just(uuid.UUID(int=0))),
        "is_internal": draw(st.booleans()),
        "partitions": draw(st.lists(partitions(), max_size=4)),
        "topic_authorized_operations": draw(INT32),
    }


@st.composite
def answers(draw: st.DrawFn, version: int) -> dict[str, Any]:
    brokers = st.fixed_dictionaries(
        {"node_id": INT32, "host": TEXT, "port": INT32, "rack": st.none() | TEXT}
    )
    return {
        "throttle_time": draw(st.integers(0, 2**31 - 1)),
        "brokers": draw(st.lists(brokers, max_size=3)),
        "cluster_id": draw(st.none() | TEXT),
        "controller_id": draw(INT32),
        "topics": draw(st.lists(topics(nullable_name=version >= 12), max_size=3)),
        "cluster_authorized_operations": draw(INT32),
        "error_code": draw(st.sampled_from(list(ErrorCode))),
    }


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_the_hand_written_encoder_writes_what_kio_writes(version: int, data: st.DataObject) -> None:
    answer = data.draw(answers(version))
    assert encode_metadata_response(version, answer) == kio_body(version, answer)


@pytest.mark.parametrize("version", VERSIONS)
def test_an_answer_as_the_handler_builds_it(version: int) -> None:
    """Hundreds of partitions, a throttle time as a timedelta (the quota path's int too)."""
    partition = {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3,
                 "replica_nodes": (1, 2, 3), "isr_nodes": (1, 2),
                 "offline_replicas": (3,)}  # fmt: skip
    topic = {"error_code": 0, "name": "orders", "topic_id": uuid.uuid4(), "is_internal": False,
             "partitions": [{**partition, "partition_index": i} for i in range(300)],
             "topic_authorized_operations": -(2**31)}  # fmt: skip
    answer = {"throttle_time": 7, "brokers": [{"node_id": 1, "host": "h", "port": 9092,
              "rack": None}], "cluster_id": "c", "controller_id": 1, "topics": [topic],
              "cluster_authorized_operations": -(2**31), "error_code": 0}  # fmt: skip
    assert encode_metadata_response(version, answer) == kio_body(version, answer)
    timed = {**answer, "throttle_time": datetime.timedelta(milliseconds=7)}
    assert encode_metadata_response(version, timed) == kio_body(version, answer)


def test_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match="v14"):
        encode_metadata_response(14, {})
