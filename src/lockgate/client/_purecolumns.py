# client/_purecolumns.py — a partition's Fetch records decoded into Arrow column buffers, in pure
# Python: the twin of the compiled lockgate.client._columns, with the same class, methods,
# results and errors (client/columns.py chooses one; tests/unit/client/test_columns.py checks
# that both give the same bytes).
#
# What it owns: walking the v2 batches of one partition's Fetch records exactly as
# consumer.decode_fetched does (a trailing partial batch is left for the next fetch, CRC-32C
# checked, control batches skipped, read_committed dropping an aborted transaction's batches
# from its first offset to its producer's ABORT marker, records below the position skipped),
# and appending every record in [position, end) to flat columns in Arrow's layout: offsets and
# timestamps (microseconds) as int64, the timestamp type as int32, key and value as binary
# (validity bitmap, int32 offsets, data), headers as a list of (string key, binary value).
#
# Invariants:
# - add() appends the records of a whole fetch or, when it raises, nothing (the builder is
#   rolled back): the consumer keeps its position then, so a retry would add them again.
# - Bits of a validity bitmap past the last row are zero; offsets start at 0; header names are
#   UTF-8 (invalid bytes replaced, as decode_fetched does), a null name is "".
# - Malformed input raises ValueError naming what is wrong; both twins raise the same message.
from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Sequence
from typing import Any

IMPLEMENTATION = "pure"

HEADER_SIZE = 61
PREFIX_SIZE = 17  # baseOffset, batchLength, partitionLeaderEpoch, magic
LOG_OVERHEAD = 12
CRC_START = 21  # the CRC-32C covers attributes..end
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MASK = 2**64 - 1
MAX_VARINT_BYTES = 10

_PREFIX = struct.Struct(">qiib")
_HEADER = struct.Struct(">qiibIhiqqqhii")

# What take() returns, in this order (client/columns.py names them in FetchColumns).
Columns = tuple[
    int, bytes, bytes, bytes,  # rows, offsets, timestamps, timestamp types
    int, bytes, bytes, bytes,  # key: nulls, validity, offsets, data
    int, bytes, bytes, bytes,  # value: nulls, validity, offsets, data
    bytes, int, bytes, bytes,  # header list offsets, headers, header key offsets, key data
    int, bytes, bytes, bytes,  # header value: nulls, validity, offsets, data
]  # fmt: skip


class _Corrupt(ValueError):
    """A record of a batch does not parse; add() names the batch."""


class _Binary:
    """One binary (or string) column in Arrow's layout."""

    __slots__ = ("data", "length", "nulls", "offsets", "validity")

    def __init__(self) -> None:
        self.validity = bytearray()
        self.offsets = array("i", [0])
        self.data = bytearray()
        self.length = 0
        self.nulls = 0

    def append(self, item: bytes | None) -> None:
        bit = self.length % 8
        if bit == 0:
            self.validity.append(0)
        if item is None:
            self.nulls += 1
        else:
            if len(self.data) + len(item) > INT32_MAX:
                raise OverflowError("an Arrow binary column holds at most 2 GiB")
            self.validity[-1] |= 1 << bit
            self.data += item
        self.offsets.append(len(self.data))
        self.length += 1

    def mark(self) -> tuple[int, int, int]:
        return self.length, self.nulls, len(self.data)

    def rollback(self, mark: tuple[int, int, int]) -> None:
        self.length, self.nulls, data_length = mark
        del self.data[data_length:]
        del self.offsets[self.length + 1 :]
        del self.validity[(self.length + 7) // 8 :]
        if self.length % 8:
            self.validity[-1] &= (1 << (self.length % 8)) - 1

    def buffers(self) -> tuple[int, bytes, bytes, bytes]:
        return self.nulls, bytes(self.validity), self.offsets.tobytes(), bytes(self.data)


def _varint(body: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of at most 10 bytes, as a signed 64-bit value (bits past 64 dropped)."""
    raw = 0
    for shift in range(0, 7 * MAX_VARINT_BYTES, 7):
        if pos >= len(body):
            raise _Corrupt("records end before the batch's record count")
        byte = body[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            raw &= UINT64_MASK
            return (raw >> 1) ^ -(raw & 1), pos
    raise _Corrupt("a varint runs over 10 bytes")


def _field(body: bytes, pos: int) -> tuple[bytes | None, int]:
    size, pos = _varint(body, pos)
    if size < 0:
        return None, pos
    if size > len(body) - pos:
        raise _Corrupt("a record field runs past the end of the batch")
    return body[pos : pos + size], pos + size


class ColumnBuilder:
    """Accumulates the records of one partition's Fetch responses as Arrow column buffers.

    `decompress(codec, data)` inflates a compressed batch's records, `crc(view)` is CRC-32C,
    `is_abort_marker(batch)` tells an ABORT control batch (decode_fetched's own helpers)."""

    def __init__(
        self,
        decompress: Callable[[int, bytes], bytes],
        crc: Callable[[Any], int],
        is_abort_marker: Callable[[bytes], bool],
    ) -> None:
        self._decompress = decompress
        self._crc = crc
        self._is_abort_marker = is_abort_marker
        self._busy = False  # inside add(): the callbacks must not add or take
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.headers = 0
        self._offsets = array("q")
        self._timestamps = array("q")
        self._types = array("i")
        self._keys = _Binary()
        self._values = _Binary()
        self._header_offsets = array("i", [0])
        self._header_keys = _Binary()
        self._header_values = _Binary()

    @property
    def size(self) -> int:
        """Bytes in the data buffers (keys, values, header names and values)."""
        return sum(
            len(column.data)
            for column in (self._keys, self._values, self._header_keys, self._header_values)
        )

    def add(
        self,
        records: bytes,
        position: int,
        end: int,
        aborted: Sequence[tuple[int, int]] | None,
        check_crcs: bool,
    ) -> int | None:
        """Appends the records of one partition's Fetch `records` with offsets in
        [position, end); `aborted` (first offset, producer id) enables read_committed, None is
        read_uncommitted. Returns the position after the complete batches at or after
        `position`, None when there are none."""
        self._check_idle()
        marks = (
            self.rows,
            self.headers,
            self._keys.mark(),
            self._values.mark(),
            self._header_keys.mark(),
            self._header_values.mark(),
        )
        self._busy = True
        try:
            return self._add(memoryview(records), position, end, aborted, check_crcs)
        except BaseException:
            self._rollback(marks)
            raise
        finally:
            self._busy = False

    def _check_idle(self) -> None:
        if self._busy:
            raise RuntimeError("ColumnBuilder is in add()")

    def _rollback(self, marks: tuple[Any, ...]) -> None:
        rows, headers, keys, values, header_keys, header_values = marks
        self.rows, self.headers = rows, headers
        del self._offsets[rows:]
        del self._timestamps[rows:]
        del self._types[rows:]
        del self._header_offsets[rows + 1 :]
        self._keys.rollback(keys)
        self._values.rollback(values)
        self._header_keys.rollback(header_keys)
        self._header_values.rollback(header_values)

    def _add(
        self,
        data: memoryview,
        position: int,
        end: int,
        aborted: Sequence[tuple[int, int]] | None,
        check_crcs: bool,
    ) -> int | None:
        queue = sorted((int(first), int(producer)) for first, producer in aborted or ())
        next_aborted = 0
        aborting: set[int] = set()  # producers whose records are being dropped
        next_position: int | None = None
        total = len(data)
        pos = 0
        while total - pos >= PREFIX_SIZE:
            _base, length, _epoch, magic = _PREFIX.unpack_from(data, pos)
            size = LOG_OVERHEAD + length
            if pos + size > total:
                break  # cut by the fetch size: fetched again from its start
            if magic != 2:
                raise ValueError(f"batch with magic {magic} at byte {pos}")
            if size < HEADER_SIZE:
                raise ValueError(
                    "batch failed its CRC-32C check"
                    if check_crcs
                    else f"batch of {size} bytes is shorter than its header"
                )
            (base, _, _, _, crc, attributes, last_delta, base_timestamp, max_timestamp,
             producer_id, _, _, count) = _HEADER.unpack_from(data, pos)  # fmt: skip
            if check_crcs and self._crc(data[pos + CRC_START : pos + size]) != crc:
                raise ValueError("batch failed its CRC-32C check")
            start = pos
            pos += size
            last_offset = base + last_delta
            if last_offset > INT64_MAX:
                raise ValueError(f"batch at byte {start} runs past the largest offset")
            if last_offset < position:
                continue
            # Batches come in offset order: whatever this one holds, it is behind us afterwards.
            next_position = last_offset + 1
            if aborted is not None:
                while next_aborted < len(queue) and queue[next_aborted][0] <= last_offset:
                    aborting.add(queue[next_aborted][1])
                    next_aborted += 1
            if attributes & CONTROL_BIT:
                if producer_id in aborting and self._is_abort_marker(bytes(data[start:pos])):
                    aborting.discard(producer_id)
                continue
            if aborted is not None and attributes & TRANSACTIONAL_BIT and producer_id in aborting:
                continue
            body = bytes(data[start + HEADER_SIZE : pos])
            try:
                if attributes & COMPRESSION_MASK:
                    try:
                        body = self._decompress(attributes & COMPRESSION_MASK, body)
                    except Exception as exc:  # decompressors raise their own types
                        raise _Corrupt(str(exc)) from exc
                self._records(
                    body,
                    count,
                    base,
                    max_timestamp if attributes & TIMESTAMP_TYPE_BIT else None,
                    base_timestamp,
                    1 if attributes & TIMESTAMP_TYPE_BIT else 0,
                    position,
                    end,
                )
            except _Corrupt as exc:
                raise ValueError(f"undecodable batch at offset {base}: {exc}") from exc
        return next_position

    def _records(
        self,
        body: bytes,
        count: int,
        base: int,
        log_append_time: int | None,
        base_timestamp: int,
        timestamp_type: int,
        position: int,
        end: int,
    ) -> None:
        pos = 0
        for _ in range(count):
            length, pos = _varint(body, pos)
            record_end = pos + length
            pos += 1  # record attributes: unused in v2
            timestamp_delta, pos = _varint(body, pos)
            offset_delta, pos = _varint(body, pos)
            key, pos = _field(body, pos)
            value, pos = _field(body, pos)
            header_count, pos = _varint(body, pos)
            headers: list[tuple[bytes | None, bytes | None]] = []
            for _ in range(max(header_count, 0)):
                name, pos = _field(body, pos)
                header_value, pos = _field(body, pos)
                headers.append((name, header_value))
            if pos > record_end or record_end > len(body):
                raise _Corrupt(f"record at offset delta {offset_delta} overruns its length")
            pos = record_end
            offset = base + offset_delta
            if not INT64_MIN <= offset <= INT64_MAX:
                raise _Corrupt("offset out of range")
            if offset < position or offset >= end:
                continue
            timestamp = (
                log_append_time if log_append_time is not None else base_timestamp + timestamp_delta
            )
            if not INT64_MIN <= timestamp * 1000 <= INT64_MAX:
                raise _Corrupt("timestamp out of range")
            if self.headers + len(headers) > INT32_MAX:
                raise OverflowError("an Arrow list column holds at most 2**31 - 1 items")
            self._offsets.append(offset)
            self._timestamps.append(timestamp * 1000)  # microseconds, as Spark's timestamps
            self._types.append(timestamp_type)
            self._keys.append(key)
            self._values.append(value)
            for name, header_value in headers:
                self._header_keys.append((name or b"").decode("utf-8", "replace").encode())
                self._header_values.append(header_value)
            self.headers += len(headers)
            self._header_offsets.append(self.headers)
            self.rows += 1

    def take(self) -> Columns:
        """The columns of every record added since the last take(); the builder is emptied."""
        self._check_idle()
        columns: Columns = (
            self.rows,
            self._offsets.tobytes(),
            self._timestamps.tobytes(),
            self._types.tobytes(),
            *self._keys.buffers(),
            *self._values.buffers(),
            self._header_offsets.tobytes(),
            self.headers,
            *self._header_keys.buffers()[2:],
            *self._header_values.buffers(),
        )
        self._reset()
        return columns
