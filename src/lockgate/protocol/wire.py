# protocol/wire.py — a field-by-field reader of Kafka body encodings, for the few bodies read
# without kio: Produce (hot path, lockgate's KIP-359 tag) and responses kio cannot represent
# (DescribeTransactions' start time of -1). Every read is bounds-checked: a short body raises
# MalformedFrame, never IndexError.
from __future__ import annotations

import struct
import uuid

from lockgate.protocol.frame import MalformedFrame, read_unsigned_varint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class BodyReader:
    """Reads a request or response body field by field (classic or flexible encoding)."""

    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes, pos: int, flexible: bool) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def _take(self, size: int) -> int:
        start = self.pos
        end = start + size
        if size < 0 or end > len(self.data):
            raise MalformedFrame(f"body truncated: needs {size} bytes at {start}")
        self.pos = end
        return start

    def int16(self) -> int:
        return int(_I16.unpack_from(self.data, self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.data, self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self.data, self._take(8))[0])

    def varint(self) -> int:
        value, self.pos = read_unsigned_varint(self.data, self.pos)
        return value

    def length(self) -> int:
        """A string/bytes/array length; -1 means null."""
        if self.flexible:
            return self.varint() - 1
        return self.int32()

    def string(self) -> str | None:
        size = self.varint() - 1 if self.flexible else self.int16()
        if size < 0:
            if size != -1:
                raise MalformedFrame(f"negative string length {size}")
            return None
        start = self._take(size)
        try:
            return self.data[start : start + size].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedFrame("invalid UTF-8 in a string") from exc

    def records(self) -> bytes | None:
        size = self.length()
        if size < 0:
            if size != -1:
                raise MalformedFrame(f"negative bytes length {size}")
            return None
        start = self._take(size)
        return self.data[start : start + size]

    def array_length(self) -> int:
        size = self.length()
        if size < -1:
            raise MalformedFrame(f"negative array length {size}")
        if size > len(self.data) - self.pos:
            raise MalformedFrame(f"array of {size} entries cannot fit the frame")
        return max(size, 0)

    def uuid(self) -> uuid.UUID:
        start = self._take(16)
        return uuid.UUID(bytes=self.data[start : start + 16])

    def tagged_fields(self) -> dict[int, bytes]:
        if not self.flexible:
            return {}
        fields = {}
        for _ in range(self.varint()):
            tag = self.varint()
            size = self.varint()
            start = self._take(size)
            fields[tag] = self.data[start : start + size]
        return fields
