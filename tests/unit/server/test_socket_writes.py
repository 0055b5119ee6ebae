"""Direct writes of a response's parts to a non-blocking socket: in order, never blocking, the
rest (ranges read into bytes) returned from the first part the socket does not take whole."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.protocol.file_range import FileRange, Part, RangeCut, Truncations
from lockgate.server.socket_writes import as_buffers, write_parts

CONTENT = bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(writer, reader): a connected TCP pair on loopback, the writer non-blocking with a small
    send buffer."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        writer = socket.create_connection(server.getsockname())
        reader, _ = server.accept()
    writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 10)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
    writer.setblocking(False)
    try:
        yield writer, reader
    finally:
        writer.close()
        reader.close()


@pytest.fixture
def content_fd(tmp_path: Path) -> Iterator[int]:
    path = tmp_path / "segment.log"
    path.write_bytes(CONTENT)
    fd = os.open(path, os.O_RDWR)
    yield fd
    os.close(fd)


def file_range(fd: int, position: int, size: int, truncations: Truncations) -> FileRange:
    return FileRange(os.dup(fd), position, size, truncations)


def joined(parts: list[Part]) -> bytes:
    return b"".join(as_buffers(parts))


def read_all(reader: socket.socket, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        chunk = reader.recv(size - len(got))
        assert chunk
        got += chunk
    return bytes(got)


def test_parts_the_socket_takes_whole_are_written_in_order(
    pair: tuple[socket.socket, socket.socket], content_fd: int
) -> None:
    writer, reader = pair
    truncations = Truncations()
    parts: list[Part] = [
        b"head",
        memoryview(b"--view--")[2:6],
        file_range(content_fd, 10, 1000, truncations),
        b"between",
        file_range(content_fd, 5000, 200, truncations),
        b"tail",
    ]
    assert write_parts(writer.fileno(), parts) == []
    assert read_all(reader, len(joined(parts))) == joined(parts)
    for part in parts:
        if isinstance(part, FileRange):
            part.close()


@pytest.mark.parametrize("cut_in", ["bytes", "range"])
def test_what_a_full_socket_does_not_take_is_returned_in_order(
    pair: tuple[socket.socket, socket.socket], content_fd: int, cut_in: str
) -> None:
    """The socket fills inside a bytes part or inside a range: the rest comes back as buffers,
    and what was written followed by the rest is exactly the parts."""
    writer, reader = pair
    truncations = Truncations()
    big = bytes(reversed(CONTENT))
    parts: list[Part] = [b"prefix"]
    if cut_in == "bytes":
        parts += [big, file_range(content_fd, 0, len(CONTENT), truncations), b"end"]
    else:
        parts += [file_range(content_fd, 0, len(CONTENT), truncations), big, b"end"]
    expected = joined(parts)
    rest = write_parts(writer.fileno(), parts)
    assert rest and all(isinstance(buffer, bytes | memoryview) for buffer in rest)
    left = sum(map(len, rest))
    assert 0 < left < len(expected)
    written = read_all(reader, len(expected) - left)
    assert written + b"".join(rest) == expected
    for part in parts:
        if isinstance(part, FileRange):
            part.close()


def test_a_socket_that_takes_nothing_gets_everything_back(
    pair: tuple[socket.socket, socket.socket], content_fd: int
) -> None:
    writer, _reader = pair
    while True:  # fill the socket and the peer's buffer
        try:
            writer.send(bytes(64 << 10))
        except BlockingIOError:
            break
    ranged = file_range(content_fd, 100, 5000, Truncations())
    parts: list[Part] = [b"a", ranged, b"b"]
    assert b"".join(write_parts(writer.fileno(), parts)) == joined(parts)
    ranged.close()


def test_a_cut_range_is_never_written(
    pair: tuple[socket.socket, socket.socket], content_fd: int
) -> None:
    """A range whose file was cut below its end since it was made raises before any of its
    bytes go; one whose file ends early raises instead of returning fewer bytes."""
    writer, reader = pair
    truncations = Truncations()
    stale = file_range(content_fd, 0, 4096, truncations)
    truncations.cut(1000)
    with pytest.raises(RangeCut):
        write_parts(writer.fileno(), [stale])
    reader.setblocking(False)
    with pytest.raises(BlockingIOError):
        reader.recv(1)  # nothing was sent
    short = file_range(content_fd, len(CONTENT) - 100, 200, Truncations())  # past the end
    with pytest.raises(RangeCut):
        write_parts(writer.fileno(), [short])
    for part in (stale, short):
        part.close()
