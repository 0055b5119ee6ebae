# Raw Kafka wire access for tests that must send what no client sends: hand-built frames,
# malformed bytes, lockgate's KIP-359 tag. Encoders and decoders here are written from the
# protocol schemas, independently of lockgate's own codec, so they can catch its mistakes.
# Every socket operation has a timeout.
from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

API_PRODUCE = 0
API_METADATA = 3
API_API_VERSIONS = 18

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# ---------------------------------------------------------------------------------------------
# Encoding


def int8(value: int) -> bytes:
    return _I8.pack(value)


def int16(value: int) -> bytes:
    return _I16.pack(value)


def int32(value: int) -> bytes:
    return _I32.pack(value)


def int64(value: int) -> bytes:
    return _I64.pack(value)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(value: str | None) -> bytes:
    if value is None:
        return int16(-1)
    raw = value.encode()
    return int16(len(raw)) + raw


def compact_string(value: str | None) -> bytes:
    if value is None:
        return uvarint(0)
    raw = value.encode()
    return uvarint(len(raw) + 1) + raw


def tagged_fields(fields: dict[int, bytes] | None = None) -> bytes:
    fields = fields or {}
    out = uvarint(len(fields))
    for tag in sorted(fields):
        out += uvarint(tag) + uvarint(len(fields[tag])) + fields[tag]
    return out


def request_header(
    api_key: int, version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    """Request header v1, or v2 (with an empty tagged-field section) when flexible."""
    header = int16(api_key) + int16(version) + int32(correlation_id) + string(client_id)
    return header + (tagged_fields() if flexible else b"")


def frame(payload: bytes) -> bytes:
    return int32(len(payload)) + payload


# ---------------------------------------------------------------------------------------------
# Decoding


class Cursor:
    """Reads big-endian Kafka primitives from a response body."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _unpack(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def int8(self) -> int:
        return self._unpack(_I8)

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def int64(self) -> int:
        return self._unpack(_I64)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self, compact: bool = False) -> str | None:
        size = self.uvarint() - 1 if compact else self.int16()
        if size < 0:
            return None
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        return raw.decode()

    def array_length(self, compact: bool = False) -> int:
        return self.uvarint() - 1 if compact else self.int32()

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()

    def remaining(self) -> int:
        return len(self.data) - self.pos


# ---------------------------------------------------------------------------------------------
# A connection


class ConnectionClosed(Exception):
    pass


class KafkaWire:
    """One TCP connection to a broker on 127.0.0.1, speaking raw frames."""

    def __init__(self, bootstrap: str, client_id: str = "wire-test", timeout: float = 10.0):
        host, port = bootstrap.rsplit(":", 1)
        self.client_id = client_id
        self.timeout = timeout
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(timeout)
        self._correlation_id = 0

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    @property
    def local_address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    def next_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_request(self, api_key: int, version: int, body: bytes, flexible: bool) -> int:
        correlation_id = self.next_correlation_id()
        header = request_header(api_key, version, correlation_id, self.client_id, flexible)
        self.send_raw(frame(header + body))
        return correlation_id

    def _read_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionClosed(f"connection closed after {len(chunks)}/{size} bytes")
            chunks += chunk
        return bytes(chunks)

    def read_frame(self) -> bytes:
        (size,) = _I32.unpack(self._read_exactly(4))
        return self._read_exactly(size)

    def request(
        self, api_key: int, version: int, body: bytes, *, flexible: bool, flexible_response: bool
    ) -> Cursor:
        """Sends one request and returns a cursor on the response body (header consumed)."""
        correlation_id = self.send_request(api_key, version, body, flexible)
        response = Cursor(self.read_frame())
        got = response.int32()
        if got != correlation_id:
            raise AssertionError(f"correlation id {got}, expected {correlation_id}")
        if flexible_response:
            response.skip_tagged_fields()
        return response

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within `timeout` seconds
        without sending anything; False if it sends bytes or keeps the socket open."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
            finally:
                self.sock.settimeout(self.timeout)
            return not data
        return False


# ---------------------------------------------------------------------------------------------
# Produce (key 0): v2-v12, by topic name. In flexible versions (v9+) lockgate reads tag 0 of a
# partition's data as KIP-359 CurrentLeaderEpoch (int32).

CURRENT_LEADER_EPOCH_TAG = 0


@dataclass
class ProducePartitionResult:
    index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int = -1
    error_message: str | None = None


@dataclass
class ProduceResult:
    topics: dict[str, list[ProducePartitionResult]] = field(default_factory=dict)

    def only(self) -> ProducePartitionResult:
        (results,) = self.topics.values()
        (result,) = results
        return result


def produce_body(
    version: int,
    topic: str,
    partitions: dict[int, bytes | None],
    *,
    acks: int = -1,
    timeout_ms: int = 10_000,
    transactional_id: str | None = None,
    current_leader_epoch: dict[int, int] | None = None,
) -> bytes:
    flexible = version >= 9
    epochs = current_leader_epoch or {}
    if flexible and epochs.keys() - partitions.keys():
        raise ValueError("leader epoch for a partition that is not produced to")
    if not flexible and epochs:
        raise ValueError("the KIP-359 tag needs a flexible Produce version (v9+)")

    def length(size: int) -> bytes:
        return uvarint(size + 1) if flexible else int32(size)

    body = b""
    if version >= 3:
        body += compact_string(transactional_id) if flexible else string(transactional_id)
    body += int16(acks) + int32(timeout_ms)
    body += length(1)
    body += compact_string(topic) if flexible else string(topic)
    body += length(len(partitions))
    for index, records in partitions.items():
        body += int32(index)
        body += length(-1) if records is None else length(len(records)) + records
        if flexible:
            tags = {}
            if index in epochs:
                tags[CURRENT_LEADER_EPOCH_TAG] = int32(epochs[index])
            body += tagged_fields(tags)
    if flexible:
        body += tagged_fields()  # topic
        body += tagged_fields()  # request
    return body


def decode_produce_response(version: int, response: Cursor) -> ProduceResult:
    flexible = version >= 9
    result = ProduceResult()
    for _ in range(response.array_length(flexible)):
        name = response.string(flexible)
        assert name is not None
        partitions = result.topics.setdefault(name, [])
        for _ in range(response.array_length(flexible)):
            partition = ProducePartitionResult(response.int32(), response.int16(), response.int64())
            if version >= 2:
                partition.log_append_time_ms = response.int64()
            if version >= 5:
                response.int64()  # log start offset
            if version >= 8:
                for _ in range(response.array_length(flexible)):
                    response.int32()
                    response.string(flexible)
                    if flexible:
                        response.skip_tagged_fields()
                partition.error_message = response.string(flexible)
            if flexible:
                response.skip_tagged_fields()
            partitions.append(partition)
        if flexible:
            response.skip_tagged_fields()
    if version >= 1:
        response.int32()  # throttle time
    if flexible:
        response.skip_tagged_fields()
    return result


def produce(
    wire: KafkaWire,
    version: int,
    topic: str,
    partitions: dict[int, bytes | None],
    *,
    acks: int = -1,
    transactional_id: str | None = None,
    current_leader_epoch: dict[int, int] | None = None,
) -> ProduceResult:
    body = produce_body(
        version,
        topic,
        partitions,
        acks=acks,
        transactional_id=transactional_id,
        current_leader_epoch=current_leader_epoch,
    )
    response = wire.request(
        API_PRODUCE, version, body, flexible=version >= 9, flexible_response=version >= 9
    )
    return decode_produce_response(version, response)


# ---------------------------------------------------------------------------------------------
# Metadata (key 3) v7: the first version with leader epochs, still non-flexible.


def leader_epochs(wire: KafkaWire, topic: str) -> dict[int, int]:
    """Partition → leader epoch of `topic` as reported by Metadata v7."""
    body = int32(1) + string(topic) + int8(0)  # topics, allow_auto_topic_creation=false
    response = wire.request(API_METADATA, 7, body, flexible=False, flexible_response=False)
    response.int32()  # throttle
    for _ in range(response.array_length()):
        response.int32()
        response.string()
        response.int32()
        response.string()  # rack
    response.string()  # cluster id
    response.int32()  # controller id
    epochs: dict[int, int] = {}
    for _ in range(response.array_length()):
        topic_error = response.int16()
        name = response.string()
        response.int8()  # is_internal
        for _ in range(response.array_length()):
            partition_error = response.int16()
            index = response.int32()
            response.int32()  # leader id
            epoch = response.int32()
            for _ in range(3):  # replicas, isr, offline replicas
                for _ in range(response.array_length()):
                    response.int32()
            if name == topic:
                if topic_error or partition_error:
                    raise AssertionError(f"metadata error {topic_error}/{partition_error}")
                epochs[index] = epoch
    return epochs


# ---------------------------------------------------------------------------------------------
# ApiVersions (key 18): a v0 body is error code + [api key, min, max].


@dataclass
class ApiVersionsV0:
    error_code: int
    api_keys: dict[int, tuple[int, int]]


def decode_api_versions_v0(response: Cursor) -> ApiVersionsV0:
    error_code = response.int16()
    keys = {}
    for _ in range(response.array_length()):
        key = response.int16()
        keys[key] = (response.int16(), response.int16())
    return ApiVersionsV0(error_code, keys)


def api_versions(wire: KafkaWire, version: int = 0) -> ApiVersionsV0:
    """Sends ApiVersions `version` and reads a v0 response: only for v0 itself or for a version
    the broker does not know (KIP-511: answered with v0). v3+ requests carry an empty client
    software name and version."""
    flexible = version >= 3
    body = compact_string("") + compact_string("") + tagged_fields() if flexible else b""
    response = wire.request(
        API_API_VERSIONS, version, body, flexible=flexible, flexible_response=False
    )
    return decode_api_versions_v0(response)


# ---------------------------------------------------------------------------------------------
# Fetch (key 1) v4: the stored record batches of one partition, to look at their headers.

API_FETCH = 1
BATCH_HEADER_SIZE = 61


@dataclass
class StoredBatch:
    base_offset: int
    attributes: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & 0x07


def fetch_batches(
    wire: KafkaWire, topic: str, partition: int, offset: int = 0, max_bytes: int = 1 << 20
) -> tuple[int, list[StoredBatch]]:
    """(error code, complete batches) returned by one Fetch v4 from `offset`."""
    body = int32(-1) + int32(0) + int32(1) + int32(max_bytes) + int8(0)
    body += int32(1) + string(topic) + int32(1) + int32(partition) + int64(offset)
    body += int32(max_bytes)
    response = wire.request(API_FETCH, 4, body, flexible=False, flexible_response=False)
    response.int32()  # throttle
    error_code = -1
    records = b""
    for _ in range(response.array_length()):
        response.string()
        for _ in range(response.array_length()):
            response.int32()
            error_code = response.int16()
            response.int64()  # high watermark
            response.int64()  # last stable offset
            for _ in range(max(response.array_length(), 0)):  # aborted transactions
                response.int64()
                response.int64()
            size = response.int32()
            records = response.data[response.pos : response.pos + max(size, 0)]
            response.pos += max(size, 0)
    batches = []
    pos = 0
    while pos + BATCH_HEADER_SIZE <= len(records):
        base_offset, batch_length = struct.unpack_from(">qi", records, pos)
        if pos + 12 + batch_length > len(records):
            break  # a batch cut by max_bytes
        (attributes,) = _I16.unpack_from(records, pos + 21)
        (record_count,) = _I32.unpack_from(records, pos + 57)
        batches.append(StoredBatch(base_offset, attributes, record_count))
        pos += 12 + batch_length
    return error_code, batches
