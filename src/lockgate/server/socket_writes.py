# Writing a response's parts straight to a plain TCP socket, without the transport: bytes with
# writev, file ranges with sendfile (the kernel moves the page cache to the socket; Python never
# holds the record bytes). The connection calls it only when its transport has nothing queued,
# so these bytes follow everything written before them (see Connection._write_loop).
#
# Invariants: never blocks (the socket is non-blocking) and never reorders: it stops at the
# first part the socket does not take whole and returns the rest, ranges read into bytes, for
# the transport to write next. A range whose file was cut back raises RangeCut before any of
# its bytes would be replaced by others.
from __future__ import annotations

import os
from collections.abc import Sequence

from lockgate.protocol.file_range import FileRange, Part
from lockgate.protocol.frame import Buffer

# writev takes at most IOV_MAX buffers (1024 on Linux)
_MAX_BUFFERS = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


def write_parts(socket_fd: int, parts: Sequence[Part]) -> list[Buffer]:
    """Writes `parts` in order to the non-blocking socket `socket_fd` until it takes less than
    offered; returns what it did not take ([] when it took everything), as buffers. Raises
    RangeCut for a range its file no longer holds, OSError when the socket fails."""
    count = len(parts)
    i = 0
    while i < count:
        part = parts[i]
        if isinstance(part, FileRange):
            if part.stale:
                part.read()  # raises RangeCut
            try:
                sent = os.sendfile(socket_fd, part.fd, part.position, part.size)
            except BlockingIOError:
                sent = 0
            if sent < part.size:  # the socket is full (or the file ends early: read() raises)
                return [part.read(sent), *as_buffers(parts[i + 1 :])]
            i += 1
            continue
        end = i + 1
        while end < count and end - i < _MAX_BUFFERS and not isinstance(parts[end], FileRange):
            end += 1
        buffers: list[Buffer] = [p for p in parts[i:end] if not isinstance(p, FileRange)]
        try:
            sent = os.writev(socket_fd, buffers)
        except BlockingIOError:
            sent = 0
        for k, buffer in enumerate(buffers):
            size = len(buffer)
            if sent < size:
                first = memoryview(buffer)[sent:] if sent else buffer
                return [first, *buffers[k + 1 :], *as_buffers(parts[end:])]
            sent -= size
        i = end
    return []


def as_buffers(parts: Sequence[Part]) -> list[Buffer]:
    """The parts with each file range read into bytes (the copying path). Raises RangeCut for
    a range its file no longer holds."""
    return [part.read() if isinstance(part, FileRange) else part for part in parts]
