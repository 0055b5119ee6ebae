# BrokerConnection against scripted brokers on 127.0.0.1: version negotiation (including the
# KIP-511 downgrade), pipelining, and how timeouts and broken streams fail requests.
from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from lockgate.client.connection import BrokerConnection, kio_versions
from lockgate.client.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from lockgate.protocol.api import (
    ApiKey,
    build,
    decode_body,
    encode,
    is_flexible,
    request_class,
    response_class,
)
from lockgate.protocol.frame import parse_request_header, response_frame

METADATA_REQUEST = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


@dataclass
class Received:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any


Reply = Callable[[Received], Awaitable[bytes | None]]


@dataclass
class FakeBroker:
    """Reads requests and hands each to `reply`, which returns a whole response frame (or
    None to stay silent)."""

    reply: Reply
    received: list[Received] = field(default_factory=list)
    port: int = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                payload = await reader.readexactly(size)
                api_key, version = struct.unpack_from(">hh", payload)
                header = parse_request_header(payload, is_flexible(api_key, version))
                cls = request_class(api_key, version)
                body = decode_body(cls, payload, header.body_offset) if cls else None
                request = Received(api_key, version, header.correlation_id, header.client_id, body)
                self.received.append(request)
                frame = await self.reply(request)
                if frame is not None:
                    writer.write(frame)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def fake_broker(reply: Reply) -> AsyncIterator[FakeBroker]:
    broker = FakeBroker(reply)
    server = await asyncio.start_server(broker._serve, "127.0.0.1", 0)
    broker.port = server.sockets[0].getsockname()[1]
    try:
        yield broker
    finally:
        server.close()
        await server.wait_closed()


def api_versions_frame(
    correlation_id: int, version: int, ranges: Mapping[int, tuple[int, int]], error: int = 0
) -> bytes:
    body = build(
        response_class(ApiKey.API_VERSIONS, version),
        {
            "error_code": error,
            "api_keys": [
                {"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in ranges.items()
            ],
            "throttle_time": 0,
        },
    )
    return response_frame(correlation_id, False, encode(body))  # always header v0


def metadata_frame(correlation_id: int, version: int, cluster_id: str) -> bytes:
    body = build(
        response_class(ApiKey.METADATA, version),
        {
            "throttle_time": 0,
            "brokers": [],
            "cluster_id": cluster_id,
            "controller_id": 0,
            "topics": [],
        },
    )
    return response_frame(correlation_id, is_flexible(ApiKey.METADATA, version), encode(body))


BASIC_RANGES: dict[int, tuple[int, int]] = {ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 12)}


async def answer_versions(request: Received) -> bytes | None:
    assert request.api_key == ApiKey.API_VERSIONS
    return api_versions_frame(request.correlation_id, request.version, BASIC_RANGES)


async def connect(broker: FakeBroker, **options: Any) -> BrokerConnection:
    connection = BrokerConnection("127.0.0.1", broker.port, client_id="unit", **options)
    await connection.connect()
    return connection


async def test_negotiation_picks_the_highest_common_version() -> None:
    async def reply(request: Received) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            ranges = {**BASIC_RANGES, ApiKey.PRODUCE: (0, 99)}
            return api_versions_frame(request.correlation_id, request.version, ranges)
        return metadata_frame(request.correlation_id, request.version, "c")

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        try:
            first = broker.received[0]
            assert (first.api_key, first.version, first.client_id) == (18, 4, "unit")
            assert first.body.client_software_name == "lockgate-python"
            assert connection.version_for(ApiKey.METADATA) == 12
            assert connection.version_for(ApiKey.METADATA, max_version=5) == 5
            produce_max = kio_versions(ApiKey.PRODUCE)
            assert produce_max is not None
            assert connection.version_for(ApiKey.PRODUCE) == produce_max.max  # capped by kio
            with pytest.raises(UnsupportedVersionError, match="FETCH"):
                connection.version_for(ApiKey.FETCH)
            with pytest.raises(UnsupportedVersionError):
                connection.version_for(ApiKey.METADATA, min_version=13)
            response = await connection.request(ApiKey.METADATA, METADATA_REQUEST)
            assert broker.received[-1].version == 12
            assert response.cluster_id == "c"
        finally:
            await connection.close()


async def test_an_old_broker_gets_apiversions_again_in_its_version() -> None:
    async def reply(request: Received) -> bytes | None:
        if request.version > 2:  # KIP-511: answer in the v0 layout, listing what we know
            return api_versions_frame(
                request.correlation_id, 0, {ApiKey.API_VERSIONS: (0, 2)}, error=35
            )
        return api_versions_frame(request.correlation_id, request.version, BASIC_RANGES)

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        try:
            assert [r.version for r in broker.received] == [4, 2]
            assert connection.version_for(ApiKey.METADATA) == 12
        finally:
            await connection.close()


async def test_pipelined_requests_each_get_their_own_response() -> None:
    held: list[Received] = []
    release = asyncio.Event()

    async def reply(request: Received) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return await answer_versions(request)
        held.append(request)
        if len(held) < 3:
            return None
        # the third request releases all three answers, in order, in one write
        release.set()
        return b"".join(
            metadata_frame(r.correlation_id, r.version, f"cluster-{r.correlation_id}") for r in held
        )

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        try:
            responses = await asyncio.gather(
                *(connection.request(ApiKey.METADATA, METADATA_REQUEST) for _ in range(3))
            )
            assert release.is_set()
            ids = [r.correlation_id for r in held]
            assert len(set(ids)) == 3
            assert [r.cluster_id for r in responses] == [f"cluster-{i}" for i in ids]
            assert connection.in_flight_count == 0
        finally:
            await connection.close()


async def test_a_response_out_of_step_closes_the_connection() -> None:
    async def reply(request: Received) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return await answer_versions(request)
        return metadata_frame(request.correlation_id + 1000, request.version, "x")

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        try:
            with pytest.raises(KafkaConnectionError, match="correlation id"):
                await connection.request(ApiKey.METADATA, METADATA_REQUEST)
            assert not connection.connected
            with pytest.raises(KafkaConnectionError):
                await connection.request(ApiKey.METADATA, METADATA_REQUEST)
        finally:
            await connection.close()


async def test_a_timeout_fails_that_request_and_closes_the_connection() -> None:
    async def reply(request: Received) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return await answer_versions(request)
        return None  # never answers

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        try:
            slow = asyncio.create_task(
                connection.request(ApiKey.METADATA, METADATA_REQUEST, timeout_ms=5_000)
            )
            await asyncio.sleep(0.05)
            with pytest.raises(KafkaTimeoutError, match="METADATA"):
                await connection.request(ApiKey.METADATA, METADATA_REQUEST, timeout_ms=100)
            with pytest.raises(KafkaConnectionError, match="timeout"):
                await asyncio.wait_for(slow, 2)
            assert not connection.connected
        finally:
            await connection.close()


async def test_the_broker_closing_fails_requests_in_flight() -> None:
    async def reply(request: Received) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return await answer_versions(request)
        raise ConnectionResetError  # the fake hangs up

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        try:
            with pytest.raises(KafkaConnectionError, match="closed"):
                await asyncio.wait_for(connection.request(ApiKey.METADATA, METADATA_REQUEST), 5)
        finally:
            await connection.close()


async def test_nothing_listening_is_a_connection_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    connection = BrokerConnection("127.0.0.1", port, connect_timeout_ms=2_000)
    with pytest.raises(KafkaConnectionError, match="cannot connect"):
        await connection.connect()


# -- send_encoded_then: the producer's requests, answered through a callback --------------------

Outcome = tuple[Any, KafkaError | None]


def metadata_body(version: int) -> bytes:
    cls = request_class(ApiKey.METADATA, version)
    assert cls is not None
    return encode(build(cls, METADATA_REQUEST))


async def test_callbacks_get_their_responses_in_order_as_the_reader_reads_them() -> None:
    async def reply(request: Received) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return await answer_versions(request)
        return metadata_frame(
            request.correlation_id, request.version, f"c-{request.correlation_id}"
        )

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        try:
            version = connection.version_for(ApiKey.METADATA)
            outcomes: list[Outcome] = []
            done = asyncio.Event()

            def record(response: Any, error: Any) -> None:
                outcomes.append((response, error))
                if len(outcomes) == 3:
                    done.set()

            for _ in range(3):
                connection.send_encoded_then(
                    ApiKey.METADATA, version, metadata_body(version), record
                )
            assert connection.in_flight_count == 3  # written at once, nothing awaited
            await asyncio.wait_for(done.wait(), 5)
            ids = [r.correlation_id for r in broker.received[1:]]
            assert [(r.cluster_id, e) for r, e in outcomes] == [(f"c-{i}", None) for i in ids]
            assert connection.in_flight_count == 0
        finally:
            await connection.close()


async def test_a_callback_request_times_out_and_closing_fails_the_others_from_the_loop() -> None:
    async def reply(request: Received) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return await answer_versions(request)
        return None  # never answers

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        try:
            version = connection.version_for(ApiKey.METADATA)
            outcomes: dict[str, Outcome] = {}
            body = metadata_body(version)

            def outcome_of(name: str) -> Callable[[Any, KafkaError | None], None]:
                return lambda response, error: outcomes.__setitem__(name, (response, error))

            for name, timeout_ms in (("first", 100), ("second", 5_000)):
                connection.send_encoded_then(
                    ApiKey.METADATA, version, body, outcome_of(name), timeout_ms=timeout_ms
                )
            await asyncio.sleep(0.3)
            first, second = outcomes["first"], outcomes["second"]
            assert first[0] is None and isinstance(first[1], KafkaTimeoutError)
            assert "METADATA" in str(first[1])
            assert second[0] is None and isinstance(second[1], KafkaConnectionError)
            assert "timeout" in str(second[1])
            assert not connection.connected
            with pytest.raises(KafkaConnectionError):
                connection.send_encoded_then(ApiKey.METADATA, version, body, lambda r, e: None)
        finally:
            await connection.close()


async def test_closing_calls_back_later_never_from_inside_close() -> None:
    async def reply(request: Received) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return await answer_versions(request)
        return None

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        version = connection.version_for(ApiKey.METADATA)
        outcomes: list[Outcome] = []
        connection.send_encoded_then(
            ApiKey.METADATA,
            version,
            metadata_body(version),
            lambda response, error: outcomes.append((response, error)),
        )
        try:
            connection._abort(KafkaConnectionError("cut"))  # what close() and the reader call
            assert outcomes == []  # not yet: the closer may be inside the callback's owner
            await asyncio.sleep(0)
            [(response, error)] = outcomes
            assert response is None and isinstance(error, KafkaConnectionError)
            assert "cut" in str(error)
        finally:
            await connection.close()


async def test_an_undecodable_answer_fails_only_its_callback() -> None:
    async def reply(request: Received) -> bytes | None:
        if request.api_key == ApiKey.API_VERSIONS:
            return await answer_versions(request)
        if len(broker.received) == 2:  # the first Metadata request: a body cut short
            return response_frame(request.correlation_id, True, b"\x00")
        return metadata_frame(request.correlation_id, request.version, "fine")

    async with fake_broker(reply) as broker:
        connection = await connect(broker)
        try:
            version = connection.version_for(ApiKey.METADATA)
            outcomes: list[Outcome] = []
            for _ in range(2):
                connection.send_encoded_then(
                    ApiKey.METADATA,
                    version,
                    metadata_body(version),
                    lambda response, error: outcomes.append((response, error)),
                )
            async with asyncio.timeout(5):
                while len(outcomes) < 2:
                    await asyncio.sleep(0.01)
            (bad, bad_error), (good, good_error) = outcomes
            assert bad is None and isinstance(bad_error, KafkaConnectionError)
            assert "undecodable" in str(bad_error)
            assert good.cluster_id == "fine" and good_error is None
            assert connection.connected
        finally:
            await connection.close()
