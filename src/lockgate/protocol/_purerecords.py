# protocol/_purerecords.py — decoding the records of a v2 batch, and the fields of a record of
# fixed layout, in pure Python: the twin of the compiled lockgate.protocol._records, with the
# same functions and results (protocol/fastpath.py chooses one;
# tests/unit/protocol/test_records_fastpath.py checks that both agree, on damaged input too).
#
# What it owns: the walk over an (uncompressed) records section — per record its length, the
# attributes byte, the timestamp and offset deltas, the key and the value (headers are
# skipped) — and what counts as damage there (the batch header and decompression are the
# caller's: protocol/records.py); unpack_fields, the fields of a Kafka struct of fixed
# layout (int16, int32, int64, nullable string), what the internal topics' keys and values are;
# and the two per-batch steps of a coordinator's load that would otherwise be per-record Python
# work, a million times for a million live offsets: apply_offset_commits (the check of each
# __consumer_offsets offset commit, as coordinator/group/records.offset_commit has it, and its
# move into its group's records) and put_records (a snapshot image's latest value per key).
# Writing too: encode_record (one record, headers included: the client's batches) and
# encode_records, the records section build_batch writes (markers, coordinator records,
# snapshot images: a million keys are a million records).
#
# Damage (a ValueError, never an IndexError, a struct.error or a short field): a varint running
# past its record or longer than 10 bytes, a record running past the section, a key or value
# running past its record, an offset or timestamp outside int64, a section outside the buffer;
# a field cut short (a cut string does not decode as a shorter one), a string not UTF-8.
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Literal, overload

IMPLEMENTATION = "pure"

Decoded = list[tuple[int, int, bytes | None, bytes | None]]

_UINT64 = (1 << 64) - 1
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


# Zigzag varints of -64..63 (lengths, deltas, counts of small records) are one byte.
_ONE_BYTE_VARINTS = [bytes([(v << 1) ^ (v >> 63)]) for v in range(-64, 64)]
_NULL_LENGTH = _ONE_BYTE_VARINTS[-1 + 64]


def zigzag_varint(value: int) -> bytes:
    if -64 <= value < 64:
        return _ONE_BYTE_VARINTS[value + 64]
    zigzag = (value << 1) ^ (value >> 63)
    if zigzag < 0x4000:  # two bytes: lengths of records up to 8 KiB
        return bytes(((zigzag & 0x7F) | 0x80, zigzag >> 7))
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...] = (),
) -> bytes:
    # attributes, then the deltas; one join of all the parts
    parts = [b"\x00", zigzag_varint(timestamp_delta), zigzag_varint(offset_delta)]
    for item in (key, value):
        if item is None:
            parts.append(_NULL_LENGTH)
        else:
            parts += (zigzag_varint(len(item)), item)
    parts.append(zigzag_varint(len(headers)))
    for name, header_value in headers:
        raw = name.encode()
        parts += (zigzag_varint(len(raw)), raw)
        if header_value is None:
            parts.append(_NULL_LENGTH)
        else:
            parts += (zigzag_varint(len(header_value)), header_value)
    body = b"".join(parts)
    return zigzag_varint(len(body)) + body


def encode_records(records: Sequence[tuple[bytes | None, bytes | None]]) -> bytes:
    """The records section of a batch of (key, value) tuples: offset deltas 0, 1, ...,
    timestamp deltas 0, no headers (what build_batch writes). TypeError for a pair that is
    not a tuple of two, or a key or value that is neither None nor bytes-like."""
    parts = []
    for index, pair in enumerate(records):
        if type(pair) is not tuple or len(pair) != 2:
            raise TypeError("encode_records takes (key, value) tuples")
        key, value = (f if f is None or type(f) is bytes else memoryview(f).tobytes() for f in pair)
        parts.append(encode_record(index, 0, key, value))
    return b"".join(parts)


def _varint(data: bytes, pos: int, limit: int) -> tuple[int, int]:
    """A zigzag varint (at most 10 bytes, as Kafka's varlong) at `pos`, below `limit`."""
    raw = 0
    shift = 0
    while pos < limit:
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            raw &= _UINT64  # (a 10th byte's bits past 64 are dropped, as a uint64 drops them)
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift == 70:
            raise ValueError(f"a varint longer than 10 bytes at {pos - 10}")
    raise ValueError(f"a varint cut at {pos}")


def decode_records(
    data: bytes,
    start: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int | None,
) -> Decoded:
    """(offset, timestamp, key, value) of the first `count` records in data[start:end];
    `append_time` is every record's timestamp (LogAppendTime), None for create time
    (base_timestamp + the record's delta). Raises ValueError on damage."""
    if not 0 <= start <= end <= len(data):
        raise ValueError(f"records section {start}..{end} outside a buffer of {len(data)}")
    records: Decoded = []
    append = records.append
    pos = start
    # Varints of one byte (below 0x80: small lengths and deltas, the usual case) are read
    # inline; _varint reads the others, and every bound is checked before a byte is read.
    for _ in range(count):
        byte = data[pos] if pos < end else 0x80
        if byte < 0x80:
            length = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            length, pos = _varint(data, pos, end)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise ValueError(f"a record of {length} bytes at {pos} runs past the batch")
        pos += 1  # attributes (unused in v2)
        byte = data[pos] if pos < record_end else 0x80
        if byte < 0x80:
            timestamp_delta = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            timestamp_delta, pos = _varint(data, pos, record_end)
        byte = data[pos] if pos < record_end else 0x80
        if byte < 0x80:
            offset_delta = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            offset_delta, pos = _varint(data, pos, record_end)
        byte = data[pos] if pos < record_end else 0x80
        if byte < 0x80:
            size = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            size, pos = _varint(data, pos, record_end)
        key = None
        if size >= 0:
            if pos + size > record_end:
                raise ValueError(f"a key of {size} bytes at {pos} runs past its record")
            key = data[pos : pos + size]
            pos += size
        byte = data[pos] if pos < record_end else 0x80
        if byte < 0x80:
            size = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            size, pos = _varint(data, pos, record_end)
        value = None
        if size >= 0:
            if pos + size > record_end:
                raise ValueError(f"a value of {size} bytes at {pos} runs past its record")
            value = data[pos : pos + size]
        offset = base_offset + offset_delta
        timestamp = base_timestamp + timestamp_delta if append_time is None else append_time
        if not (_INT64_MIN <= offset <= _INT64_MAX and _INT64_MIN <= timestamp <= _INT64_MAX):
            raise ValueError(f"an offset or timestamp outside int64 at {pos}")
        append((offset, timestamp, key, value))
        pos = record_end
    return records


_FIXED = {"h": struct.Struct(">h"), "i": struct.Struct(">i"), "q": struct.Struct(">q")}


# The layouts lockgate reads (records of __consumer_offsets: coordinator/group/records.py).
@overload
def unpack_fields(data: bytes, layout: Literal["hs"]) -> tuple[int, str | None]: ...
@overload
def unpack_fields(
    data: bytes, layout: Literal["hssi"]
) -> tuple[int, str | None, str | None, int]: ...
@overload
def unpack_fields(
    data: bytes, layout: Literal["hqisq"]
) -> tuple[int, int, int, str | None, int]: ...
@overload
def unpack_fields(data: bytes, layout: Literal["hqsq"]) -> tuple[int, int, str | None, int]: ...
@overload
def unpack_fields(
    data: bytes, layout: Literal["hssi$"]
) -> tuple[int, str | None, str | None, int, int]: ...
@overload
def unpack_fields(data: bytes, layout: str) -> tuple[int | str | None, ...]: ...
def unpack_fields(data: bytes, layout: str) -> tuple[int | str | None, ...]:
    """The fields of a Kafka struct of fixed layout at the start of `data`: 'h', 'i', 'q'
    (big-endian int16, int32, int64), 's' (a nullable string: int16 length, then UTF-8; None
    for length -1); '$' is the number of bytes read so far (what follows them is not read).
    Raises ValueError on damage."""
    fields: list[int | str | None] = []
    pos = 0
    end = len(data)
    for code in layout:
        if code == "$":
            fields.append(pos)
            continue
        fixed = _FIXED.get("h" if code == "s" else code)
        if fixed is None:
            raise ValueError(f"unknown field code {code}")
        if fixed.size > end - pos:
            raise ValueError(f"record cut short: {fixed.size} bytes wanted at {pos}")
        (number,) = fixed.unpack_from(data, pos)
        pos += fixed.size
        if code != "s":
            fields.append(number)
        elif number < 0:
            fields.append(None)
        elif number > end - pos:
            raise ValueError(f"record cut short: {number} bytes wanted at {pos}")
        else:
            fields.append(data[pos : pos + number].decode())
            pos += number
    return tuple(fields)


_OFFSET_KEY_V1 = b"\x00\x01"  # the offset commit key version lockgate writes


def apply_offset_commits(
    records: Decoded, start: int, groups: dict[str, dict[bytes, bytes]]
) -> int:
    """Applies records[start:] in order, while each is a sound offset commit of
    __consumer_offsets in lockgate's own form, of a group in `groups` (group id → its offset
    records, key → value): a value is put under its key, a tombstone (None) removes the key;
    a record with no key is passed over. Returns the index of the first record not applied
    (len(records) when all were): one of another kind, damaged (what
    coordinator/group/records.offset_commit refuses), in another form (key version 0, a null
    name, bytes after the partition), of a group not in `groups` (or not held in a dict), or
    not of bytes. The caller replays that one and calls again from the next.

    Sound: the key is version 1, group and topic (UTF-8), partition (int32), nothing after;
    the value is None, or decodes as an offset commit value (version int16; offset int64; from
    version 3 a leader epoch int32; metadata, a nullable UTF-8 string; commit timestamp
    int64; what follows is not read)."""
    if start < 0:
        raise ValueError("a negative start")
    index = start
    while index < len(records):
        _offset, _timestamp, key, value = records[index]
        if key is not None:
            if type(key) is not bytes or (value is not None and type(value) is not bytes):
                return index
            if key[:2] != _OFFSET_KEY_V1:
                return index
            try:
                _version, group, topic, _partition, read = unpack_fields(key, "hssi$")
                if value is not None:
                    if len(value) < 2:
                        return index
                    (version,) = _FIXED["h"].unpack_from(value)
                    unpack_fields(value, "hqisq" if version >= 3 else "hqsq")
            except ValueError:
                return index
            if group is None or topic is None or read != len(key):
                return index
            held = groups.get(group)
            if type(held) is not dict:
                return index
            if value is None:
                held.pop(key, None)
            else:
                held[key] = value
        index += 1
    return index


def put_records(records: Decoded, into: dict[bytes, bytes]) -> None:
    """Each keyed record's value under its key in `into`, in order (a null value removes the
    key; a record with no key is passed over): the latest value of every key."""
    for _offset, _timestamp, key, value in records:
        if key is None:
            continue
        if value is None:
            into.pop(key, None)
        else:
            into[key] = value
