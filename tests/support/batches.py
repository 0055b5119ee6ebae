# Reading back what a log answered: the (offset, value) of every record of whole batches.
from __future__ import annotations

from lockgate.protocol.records import iter_records, parse_header


def values(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of each record of the whole batches in `data`, in order."""
    out = []
    position = 0
    while position < len(data):
        header = parse_header(data, position)
        out += [(o, v) for o, _t, _k, v in iter_records(data[position : position + header.size])]
        position += header.size
    return out
