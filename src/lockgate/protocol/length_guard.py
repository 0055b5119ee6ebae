# protocol/length_guard.py — checks every length in a request body against the bytes that are
# actually there, before kio's native reader sees it.
#
# Why: kio's reader is compiled and reserves memory for an array from the length on the wire;
# a frame claiming billions of elements makes that reservation fail and aborts the whole broker
# process (found by fuzzing). Walking the same kio schema in Python, without building values,
# rejects such a frame as malformed first: every array, string and bytes length must fit in
# what is left of the body. Tagged fields are skipped by their own sizes.
from __future__ import annotations

import typing
from dataclasses import fields, is_dataclass
from typing import Any

from lockgate.protocol.frame import MalformedFrame, read_unsigned_varint

FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "error_code": 2,
    "uint16": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
VARIABLE = frozenset({"string", "bytes", "records"})
# (name, kafka type or None for an entity, entity class, is an array, is nullable)
_Field = tuple[str, str | None, type[Any] | None, bool, bool]


_LAYOUTS: dict[type[Any], tuple[_Field, ...]] = {}


def _layout(cls: type[Any]) -> tuple[_Field, ...]:
    cached = _LAYOUTS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    layout = []
    for f in fields(cls):
        if "tag" in f.metadata:
            continue  # tagged: read from the tagged-field section by size
        annotation = hints[f.name]
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = type(None) in typing.get_args(annotation)
        if nullable and len(args) == 1:
            annotation = args[0]
        array = typing.get_origin(annotation) is tuple
        element = typing.get_args(annotation)[0] if array else annotation
        entity = element if isinstance(element, type) and is_dataclass(element) else None
        kafka_type = f.metadata.get("kafka_type")
        if entity is None and kafka_type not in FIXED_SIZES and kafka_type not in VARIABLE:
            raise TypeError(f"{cls.__qualname__}.{f.name}: unknown kafka type {kafka_type!r}")
        layout.append((f.name, kafka_type, entity, array, nullable))
    _LAYOUTS[cls] = tuple(layout)
    return _LAYOUTS[cls]


class _Scan:
    def __init__(self, data: bytes, pos: int, flexible: bool) -> None:
        self.data, self.pos, self.flexible = data, pos, flexible

    def take(self, size: int) -> None:
        if size < 0 or self.pos + size > len(self.data):
            raise MalformedFrame(f"{size} bytes at {self.pos} go past the body's end")
        self.pos += size

    def varint(self) -> int:
        value, self.pos = read_unsigned_varint(self.data, self.pos)
        return value

    def fixed(self, size: int) -> int:
        start = self.pos
        self.take(size)
        return int.from_bytes(self.data[start : start + size], "big", signed=True)

    def length(self, width: int) -> int:
        """A length (-1 = null): compact varint in flexible versions, else int16/int32."""
        return self.varint() - 1 if self.flexible else self.fixed(width)

    def entity(self, cls: type[Any]) -> None:
        for _name, kafka_type, entity, array, nullable in _layout(cls):
            if entity is not None and nullable and not array and self.fixed(1) < 0:
                continue  # a null struct: only its int8 marker (-1) is on the wire
            if array:
                count = self.length(4)
                smallest = FIXED_SIZES.get(kafka_type or "", 1)
                if count > (len(self.data) - self.pos) // smallest:
                    raise MalformedFrame(f"an array of {count} cannot fit in the body")
                for _ in range(max(count, 0)):
                    self.value(kafka_type, entity)
            else:
                self.value(kafka_type, entity)
        if self.flexible:
            for _ in range(self.varint()):
                self.varint()  # tag
                self.take(self.varint())

    def value(self, kafka_type: str | None, entity: type[Any] | None) -> None:
        if entity is not None:
            self.entity(entity)
        elif kafka_type in FIXED_SIZES:
            self.take(FIXED_SIZES[kafka_type])
        else:
            self.take(max(self.length(2 if kafka_type == "string" else 4), 0))


def check_lengths(cls: type[Any], data: bytes | memoryview, offset: int) -> None:
    """Raises MalformedFrame when a length in the body claims more than the body holds."""
    raw = data if isinstance(data, bytes) else bytes(data)
    _Scan(raw, offset, bool(getattr(cls, "__flexible__", False))).entity(cls)
