# client/fastpath.py — chooses the implementation of the producer's per-record work: the
# compiled lockgate.client._fastpath when it was built and LOCKGATE_PURE_PYTHON is not "1",
# its pure-Python twin lockgate.client._purepath otherwise. Both have the same classes and
# give the same results; `IMPLEMENTATION` says which one is in use ("compiled" or "pure").
from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from lockgate.client import _purepath
from lockgate.protocol.twins import PURE_PYTHON_VARIABLE, choose


def load(pure: bool | None = None) -> ModuleType:
    """The implementation module (protocol/twins.py says which)."""
    return choose("lockgate.client._fastpath", _purepath, pure)


_implementation = load()
IMPLEMENTATION: str = _implementation.IMPLEMENTATION

if TYPE_CHECKING:
    from lockgate.client._purepath import Accumulator, RecordGroup, RecordQueue, RecordRun
else:
    Accumulator = _implementation.Accumulator
    RecordGroup = _implementation.RecordGroup
    RecordQueue = _implementation.RecordQueue
    RecordRun = _implementation.RecordRun

__all__ = [
    "IMPLEMENTATION",
    "PURE_PYTHON_VARIABLE",
    "Accumulator",
    "RecordGroup",
    "RecordQueue",
    "RecordRun",
    "load",
]
