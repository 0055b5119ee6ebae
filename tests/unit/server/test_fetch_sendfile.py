"""Fetch answers whose records go from the segment file to the socket with sendfile, over real
loopback sockets to a broker storing on disk: a large answer to a slow reader through a tiny
send buffer (most of it through the copying path after the socket fills) arrives byte for byte
as the bytes read would; a range cut from its file before it is written closes that one
connection; and every descriptor lent to a range comes back, whatever becomes of the answer."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

import lockgate.handlers.k01_fetch as k01_fetch
import lockgate.server.connection as connection_module
from lockgate.config.properties import BrokerConfig
from lockgate.log.partition import Partition
from lockgate.protocol.file_range import FileRange, Part
from lockgate.protocol.frame import Buffer
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.server import socket_writes
from lockgate.server.broker import Broker
from lockgate.storage.disk import DiskEngine
from tests.support.kafka_wire import (
    API_FETCH,
    ConnectionClosed,
    Cursor,
    KafkaWire,
    int8,
    int32,
    int64,
    string,
)
from tests.support.tls import make_pki

TOPIC = "sendfile"
IDLE = "idle"  # no data: a fetch of it long-polls
SEND_BUFFER = 256 << 10  # the server side's SO_SNDBUF here, against answers of 6 MiB


@contextlib.asynccontextmanager
async def disk_broker(data: Path, settings: dict[str, str] | None = None) -> AsyncIterator[Broker]:
    config = BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "lockgate.durability": "page-cache",
            "log.dirs": str(data),
            **(settings or {}),
        }
    )
    started = Broker(config, DiskEngine(str(data)))
    await started.start()
    try:
        started.topics.create(IDLE, 1, 1, {})
        yield started
    finally:
        await started.stop()


Scenario = Callable[[Broker], Coroutine[Any, Any, None]]


@pytest.fixture(params=["asyncio", "uvloop"])
def run_with_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Scenario], None]:
    """Runs a scenario against a broker on either loop it runs on (lifecycle.py: uvloop when
    installed, asyncio's own otherwise): what the direct writes rely on differs between them."""

    def run(scenario: Scenario) -> None:
        async def main() -> None:
            async with disk_broker(tmp_path / "data") as broker:
                await scenario(broker)

        if request.param == "uvloop":
            uvloop.run(main())
        else:
            asyncio.run(main())

    return run


@pytest.fixture
def tiny_send_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection's socket gets a tiny send buffer: the first write of a large answer
    fills it at once."""
    original = connection_module._socket_fd

    def small(writer: asyncio.StreamWriter) -> int | None:
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        return original(writer)

    monkeypatch.setattr(connection_module, "_socket_fd", small)


def storage(broker: Broker) -> DiskEngine:
    assert isinstance(broker.storage, DiskEngine)
    return broker.storage


def open_fds(broker: Broker) -> int:
    """Descriptors open in this process, less the segment handles the broker caches."""
    return len(os.listdir("/proc/self/fd")) - storage(broker).handles.open_count


async def fill(broker: Broker, topic: str, batches: int, value_size: int, seed: int = 0) -> bytes:
    """Appends `batches` batches of 8 records; returns the partition's bytes as read."""
    if broker.topics.get(topic, 0) is None:
        broker.topics.create(topic, 1, 1, {})
    partition = broker.topics.get(topic, 0)
    assert partition is not None
    for number in range(batches):
        values = [bytes([(seed + number + i) % 256]) * value_size for i in range(8)]
        batch = build_batch([(None, v) for v in values], timestamp_ms=1_000)
        partition.append(bytearray(batch), validate_produced_batch(batch), 1_000)
    await broker.group_commit.appended(partition)
    return everything(partition)


def everything(partition: Partition) -> bytes:
    return partition.read(0, 1 << 30, partition.high_watermark)


def fetch_request(topic: str, max_wait_ms: int = 0, min_bytes: int = 0) -> bytes:
    """A Fetch v4 body: one partition from offset 0, up to 64 MiB."""
    body = int32(-1) + int32(max_wait_ms) + int32(min_bytes) + int32(64 << 20) + int8(0)
    return body + int32(1) + string(topic) + int32(1) + int32(0) + int64(0) + int32(64 << 20)


def records_of(answer: Cursor) -> bytes:
    """The records of a Fetch v4 answer's only partition."""
    answer.int32()  # throttle
    assert answer.array_length() == 1
    answer.string()
    assert answer.array_length() == 1
    answer.int32()
    assert answer.int16() == 0
    answer.int64()
    answer.int64()
    assert answer.array_length() == -1  # no aborted transactions: read_uncommitted
    size = answer.int32()
    return answer.data[answer.pos : answer.pos + size]


def read_slowly(wire: KafkaWire, correlation_id: int) -> bytes:
    """One answer's records, read in small pieces with pauses (the socket stays full)."""
    (size,) = struct.unpack(">i", wire._read_exactly(4))
    frame = bytearray()
    while len(frame) < size:
        chunk = wire.sock.recv(min(64 << 10, size - len(frame)))
        if not chunk:
            raise ConnectionClosed(f"closed after {len(frame)} of {size} bytes")
        frame += chunk
    answer = Cursor(bytes(frame))
    assert answer.int32() == correlation_id
    return records_of(answer)


def spy_on_direct_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes each direct write left to the transport."""
    left: list[int] = []
    original = socket_writes.write_parts

    def spy(socket_fd: int, parts: list[Part]) -> list[Buffer]:
        rest = original(socket_fd, parts)
        left.append(sum(map(len, rest)))
        return rest

    monkeypatch.setattr(connection_module, "write_parts", spy)
    return left


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.mark.usefixtures("tiny_send_buffer")
def test_a_large_answer_to_a_slow_reader_arrives_byte_for_byte(
    run_with_broker: Callable[[Scenario], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three pipelined fetches of ~6 MiB each: the first goes to the socket directly until the
    tiny buffer is full, the rest of it (ranges read) and the answers behind it through the
    transport; the reader sees exactly the bytes the log holds, three times, in order."""

    async def scenario(broker: Broker) -> None:
        expected = await fill(broker, TOPIC, 100, 8_000)
        assert len(expected) > 6 << 20
        left = spy_on_direct_writes(monkeypatch)
        gc.collect()  # earlier tests' unreachable files close now, not mid-count
        fds = open_fds(broker)

        def client() -> list[bytes]:
            with KafkaWire(f"127.0.0.1:{broker.port}", timeout=60) as wire:
                ids = [
                    wire.send_request(API_FETCH, 4, fetch_request(TOPIC), False) for _ in range(3)
                ]
                time.sleep(0.3)  # nothing read meanwhile: the broker's socket stays full
                return [read_slowly(wire, correlation_id) for correlation_id in ids]

        answers = await asyncio.to_thread(client)
        assert answers == [expected] * 3
        assert left and left[0] > 0  # the socket took part of the first answer, not all of it
        await until(lambda: storage(broker).handles.ranges_out == 0)
        await until(lambda: open_fds(broker) == fds)

    run_with_broker(scenario)


def test_small_answers_are_read_and_written_as_before(
    run_with_broker: Callable[[Scenario], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small answers are read (no range, no direct write) and arrive as before."""

    async def scenario(broker: Broker) -> None:
        expected = await fill(broker, TOPIC, 2, 100)
        left = spy_on_direct_writes(monkeypatch)

        def client() -> bytes:
            with KafkaWire(f"127.0.0.1:{broker.port}") as wire:
                return records_of(wire.request(API_FETCH, 4, fetch_request(TOPIC), flexible=False,
                                               flexible_response=False))  # fmt: skip

        assert await asyncio.to_thread(client) == expected
        assert left == []

    run_with_broker(scenario)


def test_a_range_cut_from_its_file_before_it_is_written_closes_that_connection_only(
    run_with_broker: Callable[[Scenario], None], caplog: pytest.LogCaptureFixture
) -> None:
    """A follower truncating its log while an answer of it waits behind a long poll: the
    answer's bytes are no longer in the file, so the connection closes (one log line) rather
    than send a wrong frame; another connection reads the new log as usual."""

    async def scenario(broker: Broker) -> None:
        await fill(broker, TOPIC, 30, 2_000)
        partition = broker.topics.get(TOPIC, 0)
        assert partition is not None
        lent = storage(broker).handles

        def client_sends() -> KafkaWire:
            wire = KafkaWire(f"127.0.0.1:{broker.port}", timeout=30)
            wire.send_request(
                API_FETCH, 4, fetch_request(IDLE, max_wait_ms=1_000, min_bytes=1), False
            )
            wire.send_request(API_FETCH, 4, fetch_request(TOPIC), False)
            return wire

        wire = await asyncio.to_thread(client_sends)
        try:
            await until(lambda: lent.ranges_out == 1)  # the second answer is made, not written
            partition.truncate_to(100, 1_000)
            replaced = await fill(broker, TOPIC, 30, 2_000, seed=7)  # other bytes, same positions
            assert len(replaced) == len(everything(partition))

            def client_reads() -> tuple[bytes, bool]:
                first = wire.read_frame()
                try:
                    wire.read_frame()
                except (ConnectionClosed, ConnectionResetError):
                    return first, True
                return first, False

            with caplog.at_level(logging.WARNING, logger=connection_module.__name__):
                first, closed = await asyncio.to_thread(client_reads)
            assert closed and struct.unpack_from(">i", first)[0] == 1  # the long poll's answer
            cut = [r for r in caplog.records if "were cut from their segment" in r.getMessage()]
            assert len(cut) == 1
        finally:
            wire.close()

        def other_client() -> bytes:
            with KafkaWire(f"127.0.0.1:{broker.port}") as other:
                return records_of(other.request(API_FETCH, 4, fetch_request(TOPIC), flexible=False,
                                                flexible_response=False))  # fmt: skip

        assert await asyncio.to_thread(other_client) == everything(partition)
        await until(lambda: lent.ranges_out == 0)

    run_with_broker(scenario)


@pytest.mark.usefixtures("tiny_send_buffer")
def test_no_descriptor_is_left_behind_by_answers_never_written(
    run_with_broker: Callable[[Scenario], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers queued when the client goes away, a long poll that reads again, and a request
    that fails after its read: every lent descriptor comes back."""

    async def scenario(broker: Broker) -> None:
        await fill(broker, TOPIC, 40, 4_000)
        lent = storage(broker).handles
        gc.collect()  # earlier tests' unreachable files close now, not mid-count
        fds = open_fds(broker)
        address = f"127.0.0.1:{broker.port}"

        def leave_with_answers_queued() -> None:
            wire = KafkaWire(address)
            wire.send_request(
                API_FETCH, 4, fetch_request(IDLE, max_wait_ms=500, min_bytes=1), False
            )
            for _ in range(4):
                wire.send_request(API_FETCH, 4, fetch_request(TOPIC), False)
            time.sleep(0.1)
            wire.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            wire.close()  # a reset: the broker's writes fail

        await asyncio.to_thread(leave_with_answers_queued)
        await until(lambda: lent.ranges_out == 0)

        def long_poll_with_too_little() -> bytes:
            with KafkaWire(address) as wire:
                body = fetch_request(TOPIC, max_wait_ms=300, min_bytes=1 << 30)  # reads, rereads
                answer = wire.request(API_FETCH, 4, body, flexible=False, flexible_response=False)
                return records_of(answer)

        partition = broker.topics.get(TOPIC, 0)
        assert partition is not None
        assert await asyncio.to_thread(long_poll_with_too_little) == everything(partition)
        await until(lambda: lent.ranges_out == 0)

        def failing(*_args: object) -> list[Part]:
            raise RuntimeError("encoding failed")

        monkeypatch.setattr(k01_fetch, "encode_fetch_response", failing)

        def request_that_fails() -> bool:
            with KafkaWire(address) as wire:
                wire.send_request(API_FETCH, 4, fetch_request(TOPIC), False)
                return wire.is_closed_by_peer()

        assert await asyncio.to_thread(request_that_fails)
        await until(lambda: lent.ranges_out == 0)
        await until(lambda: open_fds(broker) == fds)

    run_with_broker(scenario)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_tls_connection_reads_its_ranges_and_writes_them_through_the_transport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loop: str
) -> None:
    """TLS encrypts in Python: no direct write, the ranges are read, the answer is the same."""
    pki = make_pki(tmp_path / "pki")
    settings = {"listeners": "SSL://127.0.0.1:0", **pki.server_settings("none")}

    async def main() -> None:
        async with disk_broker(tmp_path / "data", settings) as broker:
            expected = await fill(broker, TOPIC, 40, 4_000)
            left = spy_on_direct_writes(monkeypatch)
            read: list[int] = []  # the sizes of the ranges the copying path read
            original = socket_writes.as_buffers

            def spy(parts: list[Part]) -> list[Buffer]:
                read.extend(len(p) for p in parts if isinstance(p, FileRange))
                return original(parts)

            monkeypatch.setattr(connection_module, "as_buffers", spy)

            def client() -> bytes:
                context = ssl.create_default_context(cafile=pki.ca)
                with KafkaWire(f"127.0.0.1:{broker.port}", timeout=30) as wire:
                    wire.sock = context.wrap_socket(wire.sock, server_hostname="127.0.0.1")
                    answer = wire.request(
                        API_FETCH, 4, fetch_request(TOPIC), flexible=False, flexible_response=False
                    )
                    return records_of(answer)

            assert await asyncio.to_thread(client) == expected
            assert left == [] and read == [len(expected)]
            await until(lambda: storage(broker).handles.ranges_out == 0)

    if loop == "uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())
