"""Fetch: the hand-written response encoder (v4–18) writes what kio writes, byte for byte, and
hands each partition's records to the frame as the very object it was given."""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.protocol.api import ApiKey, build, encode, response_class
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.fetch import (
    FIRST_VERSION,
    LAST_VERSION,
    body_size,
    encode_fetch_response,
)
from lockgate.protocol.file_range import FileRange, Part, Truncations
from lockgate.protocol.frame import response_frame, response_frame_parts
from lockgate.protocol.records import build_batch

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
BATCH = build_batch([(b"k", b"v"), (None, b"second")], timestamp_ms=1_000)


def kio_body(version: int, answer: dict[str, Any]) -> bytes:
    """The body kio's generated writer makes of the same answer (records as bytes)."""
    plain = {
        **answer,
        "responses": [
            {
                **topic,
                "partitions": [
                    {**p, "records": None if p["records"] is None else bytes(p["records"])}
                    for p in topic["partitions"]
                ],
            }
            for topic in answer["responses"]
        ],
    }
    return encode(build(response_class(ApiKey.FETCH, version), plain))


def joined(parts: Sequence[Part]) -> bytes:
    """The bytes the parts stand for, file ranges read."""
    return b"".join(part.read() if isinstance(part, FileRange) else part for part in parts)


def check(version: int, answer: dict[str, Any]) -> list[Part]:
    parts = encode_fetch_response(version, answer)
    assert joined(parts) == kio_body(version, answer)
    assert body_size(parts) == len(joined(parts))
    records = [p["records"] for t in answer["responses"] for p in t["partitions"] if p["records"]]
    # every non-empty record set is a part of its own, the same object; the rest is framing
    assert [part for part in parts if any(part is r for r in records)] == records
    framing = [part for part in parts if not any(part is r for r in records)]
    assert all(type(part) is bytes for part in framing)
    return parts


def _records() -> st.SearchStrategy[bytes | memoryview | None]:
    raw = st.binary(max_size=300)
    view = st.tuples(st.binary(max_size=300), st.integers(0, 300)).map(
        lambda t: memoryview(t[0])[: t[1]]
    )
    return st.none() | raw | view | st.just(BATCH)


def _optional_pair(first: str, second: str, a: Any, b: Any) -> st.SearchStrategy[Any]:
    """Absent, the all-default value (not written), or any value."""
    return (
        st.none() | st.just({first: -1, second: -1}) | st.fixed_dictionaries({first: a, second: b})
    )


@st.composite
def partitions(draw: st.DrawFn) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "partition_index": draw(INT32),
        "error_code": draw(st.sampled_from(list(ErrorCode))),
        "high_watermark": draw(INT64),
        "last_stable_offset": draw(INT64),
        "log_start_offset": draw(INT64),
        "aborted_transactions": draw(
            st.none()
            | st.lists(st.fixed_dictionaries({"producer_id": INT64, "first_offset": INT64}))
        ),
        "preferred_read_replica": draw(INT32),
        "records": draw(_records()),
    }
    for name, first, second, a, b in (
        ("diverging_epoch", "epoch", "end_offset", INT32, INT64),
        ("current_leader", "leader_id", "leader_epoch", INT32, INT32),
        ("snapshot_id", "end_offset", "epoch", INT64, INT32),
    ):
        value = draw(_optional_pair(first, second, a, b))
        if value is not None:
            entry[name] = value
    return entry


TOPICS = st.fixed_dictionaries(
    {
        "topic": st.text(max_size=80),
        "topic_id": st.none() | st.uuids(),
        "partitions": st.lists(partitions(), max_size=4),
    }
)
NODES = st.lists(
    st.fixed_dictionaries(
        {
            "node_id": INT32,
            "host": st.text(max_size=60),
            "port": INT32,
            "rack": st.none() | st.text(max_size=20),
        }
    ),
    max_size=4,
)


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    answer = {
        "throttle_time": draw(st.integers(0, 2**31 - 1)),
        "error_code": draw(st.sampled_from(list(ErrorCode))),
        "session_id": draw(INT32),
        "responses": draw(st.lists(TOPICS, max_size=4)),
    }
    nodes = draw(st.none() | NODES)
    if nodes is not None:
        answer["node_endpoints"] = nodes
    return answer


@settings(max_examples=400)
@given(st.sampled_from(VERSIONS), answers())
def test_the_encoder_writes_what_kio_writes(version: int, answer: dict[str, Any]) -> None:
    check(version, answer)


def handler_entry(index: int, **fields: Any) -> dict[str, Any]:
    """A partition entry as Fetch's handler makes it."""
    return {
        "partition_index": index,
        "error_code": ErrorCode.none,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
        **fields,
    }


def handler_answer(*topics: tuple[str, list[dict[str, Any]]], **top: Any) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": [
            {"topic": name, "topic_id": uuid.uuid5(uuid.NAMESPACE_DNS, name), "partitions": ps}
            for name, ps in topics
        ],
        **top,
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_the_answers_fetch_gives(version: int) -> None:
    """The shapes the handler builds: data, several topics and partitions, an error, aborted
    transactions none / empty / several, a diverging epoch, a session, throttling."""
    view = memoryview(BATCH + BATCH[:10])[: len(BATCH)]  # a read cut to whole batches
    answer = handler_answer(
        (
            "orders",
            [
                handler_entry(0, high_watermark=9, last_stable_offset=7, records=BATCH),
                handler_entry(1, error_code=ErrorCode.offset_out_of_range),
                handler_entry(2, aborted_transactions=[], records=view, log_start_offset=3),
                handler_entry(
                    3,
                    aborted_transactions=[
                        {"producer_id": 7, "first_offset": 0},
                        {"producer_id": 8, "first_offset": 5},
                    ],
                ),
                handler_entry(4, diverging_epoch={"epoch": 2, "end_offset": 40}),
            ],
        ),
        ("", [handler_entry(0, error_code=ErrorCode.unknown_topic_id)]),
        ("payments", [handler_entry(5, records=BATCH * 3)]),
        session_id=1234,
        throttle_time=250,
    )
    parts = check(version, answer)
    assert sum(part is BATCH or part is view for part in parts) == 2


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_answers(version: int) -> None:
    check(version, handler_answer())  # a session error's, or an incremental one with no change
    check(version, handler_answer(("t", [handler_entry(0)])))  # caught up: no records


@pytest.mark.parametrize("version", [12, 15, 16, 18])
def test_default_tagged_fields_are_left_out(version: int) -> None:
    unset = {"epoch": -1, "end_offset": -1}
    answer = handler_answer(("t", [handler_entry(0, diverging_epoch=unset)]), node_endpoints=[])
    assert joined(encode_fetch_response(version, answer)) == joined(
        encode_fetch_response(version, handler_answer(("t", [handler_entry(0)])))
    )
    check(version, answer)


def test_long_lengths_take_several_varint_bytes() -> None:
    big = bytes(70_000)  # compact length 70,001: three varint bytes
    nodes = [{"node_id": n, "host": "h" * 100, "port": 9092, "rack": "r"} for n in range(3)]
    answer = handler_answer(("x" * 200, [handler_entry(0, records=big)]), node_endpoints=nodes)
    for version in VERSIONS:
        check(version, answer)


def test_versions_outside_4_to_18_are_refused() -> None:
    for version in (3, 19):
        with pytest.raises(ValueError, match=f"v{version}"):
            encode_fetch_response(version, handler_answer())


@pytest.mark.parametrize("flexible", [False, True])
@pytest.mark.parametrize("correlation_id", [0, 7, -1, 2**31 - 1])
def test_framed_parts_are_the_frame_of_the_joined_body(flexible: bool, correlation_id: int) -> None:
    answer = handler_answer(("t", [handler_entry(0, records=BATCH), handler_entry(1)]))
    parts = encode_fetch_response(12 if flexible else 11, answer)
    framed = response_frame_parts(correlation_id, flexible, parts)
    assert joined(framed) == response_frame(correlation_id, flexible, joined(parts))
    assert framed[1:] == parts and any(part is BATCH for part in framed)
    assert isinstance(framed[0], bytes)
    assert struct.unpack_from(">i", framed[0])[0] == len(joined(framed)) - 4


@pytest.fixture
def batch_file(tmp_path: Path) -> Iterator[int]:
    """A file holding BATCH after 100 other bytes, open for reading."""
    path = tmp_path / "segment.log"
    path.write_bytes(bytes(range(100)) + BATCH)
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


@pytest.mark.parametrize("version", [4, 11, 12, 18])
def test_file_ranges_are_parts_of_their_own_counted_by_their_size(
    version: int, batch_file: int
) -> None:
    """A partition's records given as a range of a segment file: the frame counts its size and
    passes it on untouched, and the bytes it stands for make kio's encoding."""
    records = FileRange(os.dup(batch_file), 100, len(BATCH), Truncations())
    try:
        answer = handler_answer(("t", [handler_entry(0, records=records), handler_entry(1)]))
        parts = encode_fetch_response(version, answer)
        assert any(part is records for part in parts)
        assert body_size(parts) == len(joined(parts))
        as_bytes = handler_answer(("t", [handler_entry(0, records=BATCH), handler_entry(1)]))
        assert joined(parts) == kio_body(version, as_bytes)
        framed = response_frame_parts(5, version >= 12, parts)
        assert joined(framed) == response_frame(5, version >= 12, joined(parts))
    finally:
        records.close()
