# protocol/twins.py — how a compiled fast path or its pure-Python twin is chosen (the
# producer's, the records decoder's, the Fetch-to-Arrow decoder's): the compiled module when it
# was built and LOCKGATE_PURE_PYTHON is not "1", the twin otherwise. Twins have the same
# functions and classes and give the same results.
from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON_VARIABLE = "LOCKGATE_PURE_PYTHON"


def choose(compiled: str, twin: ModuleType, pure: bool | None = None) -> ModuleType:
    """The module `compiled` (a dotted name), or `twin` when asked (by `pure` or, when it is
    None, by LOCKGATE_PURE_PYTHON=1) or when the compiled one is missing."""
    if pure is None:
        pure = os.environ.get(PURE_PYTHON_VARIABLE) == "1"
    if pure:
        return twin
    try:
        return importlib.import_module(compiled)
    except ImportError:  # not built (no compiler at install time): the twin does the work
        return twin
