# Kafka framing and request/response headers (v0-v2). Sans-IO: bytes in, values out.
#
# A frame is int32 size + payload. Request header v1 = api_key, api_version, correlation_id,
# client_id (nullable legacy string); v2 adds tagged fields. Response header v0 = correlation_id;
# v1 adds tagged fields. ApiVersions responses always use header v0 (KIP-511).
from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.protocol.file_range import Part

_HEADER_FIXED = struct.Struct(">hhih")
_INT32 = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")

# A piece of a frame that goes to the socket as it is: a hand-encoded body's framing, or record
# bytes read from a segment (a memoryview of whole bytes, so that no slice is copied). Always
# unsigned bytes (format "B"), so len() is the byte count.
Buffer = bytes | memoryview


class MalformedFrame(Exception):
    """The bytes cannot be a Kafka request: the connection must be closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts inside the frame payload


def unsigned_varint(value: int) -> bytes:
    """The unsigned varint of `value` (flexible versions' lengths and tags)."""
    if value < 0x80:  # most lengths and every tag: one byte
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_unsigned_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Returns (value, new position); raises MalformedFrame on truncation or overlong varints."""
    value = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise MalformedFrame("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedFrame("varint too long")


def skip_tagged_fields(data: bytes | memoryview, pos: int) -> int:
    count, pos = read_unsigned_varint(data, pos)
    for _ in range(count):
        _tag, pos = read_unsigned_varint(data, pos)
        size, pos = read_unsigned_varint(data, pos)
        pos += size
        if pos > len(data):
            raise MalformedFrame("truncated tagged field")
    return pos


def parse_request_header(payload: bytes, flexible: bool | None) -> RequestHeader:
    """Parses a request header. `flexible` says whether header v2 (tagged fields) follows the
    client id; None means the API/version is unknown, in which case tagged fields are not read."""
    if len(payload) < _HEADER_FIXED.size:
        raise MalformedFrame(f"request header needs {_HEADER_FIXED.size} bytes, got {len(payload)}")
    api_key, api_version, correlation_id, client_id_len = _HEADER_FIXED.unpack_from(payload, 0)
    pos = _HEADER_FIXED.size
    client_id: str | None = None
    if client_id_len >= 0:
        end = pos + client_id_len
        if end > len(payload):
            raise MalformedFrame("truncated client id")
        client_id = payload[pos:end].decode("utf-8", errors="replace")
        pos = end
    elif client_id_len != -1:
        raise MalformedFrame(f"negative client id length {client_id_len}")
    if flexible:
        pos = skip_tagged_fields(payload, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def peek_api(payload: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame, before its full header is parsed."""
    if len(payload) < 8:
        raise MalformedFrame("frame shorter than a request header")
    api_key, api_version, correlation_id = struct.unpack_from(">hhi", payload, 0)
    return api_key, api_version, correlation_id


def response_frame(correlation_id: int, flexible_header: bool, body: bytes) -> bytes:
    """Size prefix + response header + body, as one buffer."""
    header = _INT32.pack(correlation_id) + (b"\x00" if flexible_header else b"")
    return _INT32.pack(len(header) + len(body)) + header + body


def response_frame_parts(
    correlation_id: int, flexible_header: bool, body: Sequence[Part]
) -> list[Part]:
    """The same frame as response_frame of the joined body, as parts to write in turn: the
    size prefix and header, then the body's parts untouched (nothing is joined, copied or
    read: a FileRange counts its size)."""
    header_size = 5 if flexible_header else 4
    prefix = _SIZE_AND_CORRELATION.pack(header_size + sum(map(len, body)), correlation_id)
    return [prefix + b"\x00" if flexible_header else prefix, *body]
