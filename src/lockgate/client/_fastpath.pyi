# The compiled twin of lockgate.client._purepath: the same classes (see _fastpath.c).
from lockgate.client._purepath import Accumulator as Accumulator
from lockgate.client._purepath import RecordGroup as RecordGroup
from lockgate.client._purepath import RecordQueue as RecordQueue
from lockgate.client._purepath import RecordRun as RecordRun

IMPLEMENTATION: str

def murmur2(data: bytes) -> int: ...
