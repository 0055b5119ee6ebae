# client/fastpath.py — chooses the implementation of the producer's per-record work: the
# compiled lockgate.client._fastpath when it was built and LOCKGATE_PURE_PYTHON is not "1",
# its pure-Python twin lockgate.client._purepath otherwise. Both have the same classes and
# give the same results; `IMPLEMENTATION` says which one is in use ("compiled" or "pure").
from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

from lockgate.client import _purepath

PURE_PYTHON_VARIABLE = "LOCKGATE_PURE_PYTHON"


def load(pure: bool | None = None) -> ModuleType:
    """The implementation module: the pure one when asked (by `pure` or, when it is None, by
    LOCKGATE_PURE_PYTHON=1) or when the compiled one is missing."""
    if pure is None:
        pure = os.environ.get(PURE_PYTHON_VARIABLE) == "1"
    if pure:
        return _purepath
    try:
        from lockgate.client import _fastpath
    except ImportError:  # not built (no compiler at install time): the pure twin does the work
        return _purepath
    return _fastpath


_implementation = load()
IMPLEMENTATION: str = _implementation.IMPLEMENTATION

if TYPE_CHECKING:
    from lockgate.client._purepath import Accumulator, RecordGroup, RecordQueue, RecordRun
else:
    Accumulator = _implementation.Accumulator
    RecordGroup = _implementation.RecordGroup
    RecordQueue = _implementation.RecordQueue
    RecordRun = _implementation.RecordRun

__all__ = ["IMPLEMENTATION", "Accumulator", "RecordGroup", "RecordQueue", "RecordRun", "load"]
