# protocol/fastpath.py — chooses the implementation of decoding a v2 batch's records and the
# fields of records of fixed layout (protocol/_purerecords.py says what they own): the compiled
# lockgate.protocol._records when it was built and LOCKGATE_PURE_PYTHON is not "1" (the
# client's switch too, client/fastpath.py), its pure-Python twin lockgate.protocol._purerecords
# otherwise. Both give the same results and raise ValueError on the same damage;
# `IMPLEMENTATION` says which one is in use ("compiled" or "pure").
from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

from lockgate.protocol import _purerecords

PURE_PYTHON_VARIABLE = "LOCKGATE_PURE_PYTHON"


def load(pure: bool | None = None) -> ModuleType:
    """The implementation module: the pure one when asked (by `pure` or, when it is None, by
    LOCKGATE_PURE_PYTHON=1) or when the compiled one is missing."""
    if pure is None:
        pure = os.environ.get(PURE_PYTHON_VARIABLE) == "1"
    if pure:
        return _purerecords
    try:
        from lockgate.protocol import _records
    except ImportError:  # not built (no compiler at install time): the pure twin does the work
        return _purerecords
    return _records


_implementation = load()
IMPLEMENTATION: str = _implementation.IMPLEMENTATION

if TYPE_CHECKING:
    from lockgate.protocol._purerecords import decode_records, unpack_fields
else:
    decode_records = _implementation.decode_records
    unpack_fields = _implementation.unpack_fields

__all__ = ["IMPLEMENTATION", "PURE_PYTHON_VARIABLE", "decode_records", "load", "unpack_fields"]
