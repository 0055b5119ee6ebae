# protocol/fastpath.py — chooses the implementation of decoding a v2 batch's records and the
# fields of records of fixed layout (protocol/_purerecords.py says what they own): the compiled
# lockgate.protocol._records when it was built and LOCKGATE_PURE_PYTHON is not "1" (the
# client's switch too, client/fastpath.py), its pure-Python twin lockgate.protocol._purerecords
# otherwise. Both give the same results and raise ValueError on the same damage;
# `IMPLEMENTATION` says which one is in use ("compiled" or "pure").
from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from lockgate.protocol import _purerecords
from lockgate.protocol.twins import PURE_PYTHON_VARIABLE, choose


def load(pure: bool | None = None) -> ModuleType:
    """The implementation module (protocol/twins.py says which)."""
    return choose("lockgate.protocol._records", _purerecords, pure)


_implementation = load()
IMPLEMENTATION: str = _implementation.IMPLEMENTATION

if TYPE_CHECKING:
    from lockgate.protocol._purerecords import (
        apply_offset_commits,
        decode_records,
        encode_records,
        put_records,
        unpack_fields,
    )
else:
    apply_offset_commits = _implementation.apply_offset_commits
    decode_records = _implementation.decode_records
    encode_records = _implementation.encode_records
    put_records = _implementation.put_records
    unpack_fields = _implementation.unpack_fields

__all__ = [
    "IMPLEMENTATION",
    "PURE_PYTHON_VARIABLE",
    "apply_offset_commits",
    "decode_records",
    "encode_records",
    "load",
    "put_records",
    "unpack_fields",
]
