"""Framing and request/response headers: varints, tagged fields, header v1/v2, bad lengths."""

from __future__ import annotations

import struct

import pytest

from lockgate.protocol.frame import (
    MalformedFrame,
    parse_request_header,
    peek_api,
    read_unsigned_varint,
    response_frame,
    skip_tagged_fields,
)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def header_v1(api_key: int, version: int, correlation_id: int, client_id: bytes | None) -> bytes:
    if client_id is None:
        return struct.pack(">hhih", api_key, version, correlation_id, -1)
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (16383, b"\xff\x7f"),
        (16384, b"\x80\x80\x01"),
        (2**28 - 1, b"\xff\xff\xff\x7f"),
        (2**31 - 1, b"\xff\xff\xff\xff\x07"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_unsigned_varint_values(value: int, encoded: bytes) -> None:
    assert read_unsigned_varint(encoded, 0) == (value, len(encoded))
    # The position is relative to the buffer, and reading stops after the varint.
    assert read_unsigned_varint(b"\xee" + encoded + b"\x99", 1) == (value, len(encoded) + 1)
    assert read_unsigned_varint(memoryview(encoded), 0) == (value, len(encoded))


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80"])
def test_truncated_varint_is_malformed(data: bytes) -> None:
    with pytest.raises(MalformedFrame, match="truncated"):
        read_unsigned_varint(data, 0)


def test_varint_longer_than_five_bytes_is_malformed() -> None:
    with pytest.raises(MalformedFrame, match="too long"):
        read_unsigned_varint(b"\x80\x80\x80\x80\x80\x01", 0)


def test_skip_tagged_fields() -> None:
    assert skip_tagged_fields(b"\x00", 0) == 1
    fields = b"\x02" + b"\x00\x03abc" + uvarint(200) + uvarint(2) + b"xy"
    assert skip_tagged_fields(fields + b"rest", 0) == len(fields)
    # Starting inside a buffer.
    assert skip_tagged_fields(b"zz" + fields, 2) == 2 + len(fields)


@pytest.mark.parametrize(
    "data",
    [
        b"",  # no count
        b"\x01",  # a field announced, none there
        b"\x01\x00",  # tag without size
        b"\x01\x00\x05abc",  # size past the end
        b"\x02\x00\x00",  # second field missing
        b"\x01\x00\xff\xff\xff\xff\x0f",  # size of 4 GiB
    ],
)
def test_truncated_tagged_fields_are_malformed(data: bytes) -> None:
    with pytest.raises(MalformedFrame):
        skip_tagged_fields(data, 0)


@pytest.mark.parametrize("flexible", [None, False])
def test_request_header_v1(flexible: bool | None) -> None:
    payload = header_v1(3, 12, 0x01020304, b"my-client") + b"BODY"
    header = parse_request_header(payload, flexible)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 12, 0x01020304)
    assert header.client_id == "my-client"
    assert payload[header.body_offset :] == b"BODY"


def test_request_header_v1_null_and_empty_client_id() -> None:
    header = parse_request_header(header_v1(18, 0, -7, None) + b"B", False)
    assert header.client_id is None
    assert header.correlation_id == -7
    assert header.body_offset == 10
    header = parse_request_header(header_v1(18, 0, 1, b"") + b"B", False)
    assert header.client_id == ""
    assert header.body_offset == 10


def test_request_header_v2_skips_tagged_fields() -> None:
    tags = b"\x02" + b"\x00\x01z" + b"\x07\x03abc"
    payload = header_v1(0, 9, 42, b"c") + tags + b"BODY"
    header = parse_request_header(payload, True)
    assert header.client_id == "c"
    assert payload[header.body_offset :] == b"BODY"
    # Header v2 without tags is one byte longer than v1.
    plain = header_v1(0, 9, 42, b"c") + b"\x00" + b"BODY"
    assert parse_request_header(plain, True).body_offset == len(plain) - 4


def test_unknown_api_does_not_read_tagged_fields() -> None:
    payload = header_v1(999, 0, 5, b"c") + b"\x05\x05"
    header = parse_request_header(payload, None)
    assert header.body_offset == len(payload) - 2


def test_client_id_keeps_undecodable_bytes_readable() -> None:
    header = parse_request_header(header_v1(3, 1, 1, b"ab\xffcd"), False)
    assert header.client_id is not None
    assert header.client_id.startswith("ab") and header.client_id.endswith("cd")


@pytest.mark.parametrize("size", range(10))
def test_header_shorter_than_its_fixed_part_is_malformed(size: int) -> None:
    payload = header_v1(3, 1, 1, b"client")[:size]
    with pytest.raises(MalformedFrame):
        parse_request_header(payload, False)


@pytest.mark.parametrize("flexible", [False, True])
def test_truncated_client_id_is_malformed(flexible: bool) -> None:
    full = header_v1(3, 1, 1, b"client") + (b"\x00" if flexible else b"")
    for cut in range(10, len(full)):
        with pytest.raises(MalformedFrame):
            parse_request_header(full[:cut], flexible)
    parse_request_header(full, flexible)


@pytest.mark.parametrize("length", [-2, -100, -32768])
def test_negative_client_id_length_is_malformed(length: int) -> None:
    payload = struct.pack(">hhih", 3, 1, 1, length) + b"x" * 64
    with pytest.raises(MalformedFrame, match="negative"):
        parse_request_header(payload, False)


def test_truncated_header_tags_are_malformed() -> None:
    payload = header_v1(0, 9, 1, b"c") + b"\x01\x00\x09ab"
    with pytest.raises(MalformedFrame):
        parse_request_header(payload, True)


def test_peek_api_reads_the_v0_header_prefix() -> None:
    # Request header v0 is api_key, api_version, correlation_id: all a peek needs.
    assert peek_api(struct.pack(">hhi", 18, 4, 99)) == (18, 4, 99)
    assert peek_api(header_v1(1, 17, -1, b"x") + b"body") == (1, 17, -1)
    for size in range(8):
        with pytest.raises(MalformedFrame):
            peek_api(b"\x00" * size)


@pytest.mark.parametrize("flexible", [False, True])
def test_response_frame(flexible: bool) -> None:
    frame = response_frame(0x0A0B0C0D, flexible, b"payload")
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    assert frame[4:8] == b"\x0a\x0b\x0c\x0d"
    if flexible:  # response header v1: an empty tagged-field section
        assert frame[8:] == b"\x00payload"
    else:
        assert frame[8:] == b"payload"


def test_response_frame_negative_correlation_id_and_empty_body() -> None:
    frame = response_frame(-1, False, b"")
    assert frame == struct.pack(">ii", 4, -1)
