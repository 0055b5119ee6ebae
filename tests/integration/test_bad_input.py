"""Bad input from some connections never disturbs the others or the stored data.

While a confluent-kafka producer keeps producing a numbered sequence (a bounded count) in a
background thread, other raw sockets send malformed and unsupported requests. Each bad input
uses its own connection and client id, and must get the answer a Kafka broker gives (an error
code, a v0 ApiVersions answer, or a closed connection), be logged on exactly one broker log
line naming the client id and address, and change nothing stored: afterwards the background
topic holds the producer's sequence exactly once, in order, at consecutive offsets (several
bad Produce requests target that very partition).
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
import pytest
from confluent_kafka import Producer

from lockgate.protocol.records import build_batch, build_control_batch
from tests.support.broker import BrokerProcess
from tests.support.clients import consume_all, create_topic
from tests.support.kafka_wire import (
    KafkaWire,
    api_versions,
    frame,
    int16,
    int32,
    produce,
    produce_body,
    request_header,
    string,
)
from tests.support.sequences import check_partitions, sequence_of, sequence_value

MAX_REQUEST_BYTES = 1_048_576
TOPIC = "bad-input-background"
PARTITIONS = 3
MAX_BACKGROUND_MESSAGES = 50_000

CORRUPT_MESSAGE = 2
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87

CLOSED = "connection closed"


# ---------------------------------------------------------------------------------------------
# Record batches that a broker must refuse. Offsets are those of the v2 batch header.

_BATCH_LENGTH = 8
_CRC = 17
_LAST_OFFSET_DELTA = 23
_RECORD_COUNT = 57


def _good_batch(count: int = 3) -> bytearray:
    return bytearray(build_batch([(None, b"bad-input-%d" % i) for i in range(count)]))


def _resign(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, _CRC, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def bad_crc() -> bytes:
    batch = _good_batch()
    batch[-1] ^= 0xFF
    return bytes(batch)


def magic_1_message() -> bytes:
    """A legacy v1 message (offset, size, crc32, magic 1, attributes, timestamp, key, value)."""
    body = struct.pack(">bbq", 1, 0, int(time.time() * 1000)) + int32(-1) + int32(5) + b"magic"
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def control_batch() -> bytes:
    return build_control_batch(1000, 0, True, 0, int(time.time() * 1000))


def record_count_mismatch() -> bytes:
    batch = _good_batch(3)
    struct.pack_into(">i", batch, _RECORD_COUNT, 5)  # lastOffsetDelta still says 3 records
    return _resign(batch)


def records_cannot_fit() -> bytes:
    batch = _good_batch(3)
    struct.pack_into(">i", batch, _LAST_OFFSET_DELTA, 499)
    struct.pack_into(">i", batch, _RECORD_COUNT, 500)  # consistent, but 3 records of bytes
    return _resign(batch)


def batch_length_beyond_data() -> bytes:
    batch = _good_batch()
    (length,) = struct.unpack_from(">i", batch, _BATCH_LENGTH)
    struct.pack_into(">i", batch, _BATCH_LENGTH, length + 100)  # outside the CRC
    return bytes(batch)


def batch_length_below_header() -> bytes:
    batch = _good_batch()
    struct.pack_into(">i", batch, _BATCH_LENGTH, 10)
    return bytes(batch)


def two_batches() -> bytes:
    return bytes(_good_batch(1)) + bytes(_good_batch(1))


# ---------------------------------------------------------------------------------------------
# The bad inputs. Each one runs on a fresh connection and returns what the broker did.


def _closed(wire: KafkaWire) -> str:
    return CLOSED if wire.is_closed_by_peer(10) else "connection left open"


def _introduce(wire: KafkaWire) -> None:
    """A valid request first, so the broker knows the client id before the bytes that do not
    carry one."""
    assert api_versions(wire).error_code == 0


def garbage_frame(wire: KafkaWire) -> object:
    _introduce(wire)
    wire.send_raw(frame(b"\x01\x02\x03"))
    return _closed(wire)


def truncated_header(wire: KafkaWire) -> object:
    _introduce(wire)
    header = int16(3) + int16(7) + int32(99) + int16(40) + b"cut-short"  # client id of 40 bytes
    wire.send_raw(frame(header))
    return _closed(wire)


def truncated_metadata_body(wire: KafkaWire) -> object:
    header = request_header(3, 7, wire.next_correlation_id(), wire.client_id, False)
    wire.send_raw(frame(header + int32(2) + string("a")))  # two topics announced, one cut
    return _closed(wire)


def truncated_produce_body(wire: KafkaWire) -> object:
    body = produce_body(9, TOPIC, {0: build_batch([(None, b"cut")])})
    header = request_header(0, 9, wire.next_correlation_id(), wire.client_id, True)
    wire.send_raw(frame(header + body[: len(body) // 2]))
    return _closed(wire)


def stream_ends_inside_frame(wire: KafkaWire) -> object:
    _introduce(wire)
    wire.send_raw(int32(100) + b"only ten b")
    wire.sock.shutdown(socket.SHUT_WR)  # the broker reads EOF in the middle of the frame
    return _closed(wire)


def oversized_frame(wire: KafkaWire) -> object:
    _introduce(wire)
    wire.send_raw(int32(MAX_REQUEST_BYTES + 1) + b"\x00" * 64)
    return _closed(wire)


def negative_size(wire: KafkaWire) -> object:
    _introduce(wire)
    wire.send_raw(int32(-5))
    return _closed(wire)


def unknown_api_key(wire: KafkaWire) -> object:
    wire.send_request(999, 0, b"", flexible=False)
    return _closed(wire)


def unsupported_fetch_version(wire: KafkaWire) -> object:
    wire.send_request(1, 3, b"", flexible=False)  # lockgate serves Fetch 4+
    return _closed(wire)


def unknown_metadata_version(wire: KafkaWire) -> object:
    wire.send_request(3, 99, b"", flexible=True)
    return _closed(wire)


def api_versions_unknown_version(wire: KafkaWire) -> object:
    answer = api_versions(wire, 999)
    # The connection stays usable: the client retries with a version from the list.
    retry = api_versions(wire, 0)
    return (answer.error_code, answer.api_keys == retry.api_keys, retry.error_code)


def _produce_error(
    records: bytes | None, version: int = 9, acks: int = -1
) -> Callable[[KafkaWire], object]:
    def send(wire: KafkaWire) -> object:
        result = produce(wire, version, TOPIC, {0: records}, acks=acks)
        (partitions,) = result.topics.values()
        # Per-partition errors leave the connection usable.
        assert api_versions(wire).error_code == 0
        return [(p.index, p.error_code, p.base_offset) for p in partitions]

    return send


def _partition_error(code: int) -> object:
    return [(0, code, -1)]


@dataclass(frozen=True)
class BadInput:
    name: str
    send: Callable[[KafkaWire], object]
    expected: object


BAD_INPUTS = [
    BadInput("garbage-frame", garbage_frame, CLOSED),
    BadInput("truncated-header", truncated_header, CLOSED),
    BadInput("truncated-metadata-body", truncated_metadata_body, CLOSED),
    BadInput("truncated-produce-body", truncated_produce_body, CLOSED),
    BadInput("stream-ends-inside-frame", stream_ends_inside_frame, CLOSED),
    BadInput("oversized-frame", oversized_frame, CLOSED),
    BadInput("negative-size", negative_size, CLOSED),
    BadInput("unknown-api-key", unknown_api_key, CLOSED),
    BadInput("unsupported-fetch-version", unsupported_fetch_version, CLOSED),
    BadInput("unknown-metadata-version", unknown_metadata_version, CLOSED),
    BadInput(
        "api-versions-unknown-version", api_versions_unknown_version, (UNSUPPORTED_VERSION, True, 0)
    ),
    BadInput("bad-crc", _produce_error(bad_crc()), _partition_error(CORRUPT_MESSAGE)),
    BadInput("magic-1", _produce_error(magic_1_message()), _partition_error(INVALID_RECORD)),
    BadInput("control-batch", _produce_error(control_batch()), _partition_error(INVALID_RECORD)),
    BadInput(
        "record-count-mismatch",
        _produce_error(record_count_mismatch()),
        _partition_error(INVALID_RECORD),
    ),
    BadInput(
        "records-cannot-fit", _produce_error(records_cannot_fit()), _partition_error(INVALID_RECORD)
    ),
    BadInput(
        "batch-length-beyond-data",
        _produce_error(batch_length_beyond_data()),
        _partition_error(CORRUPT_MESSAGE),
    ),
    BadInput(
        "batch-length-below-header",
        _produce_error(batch_length_below_header()),
        _partition_error(CORRUPT_MESSAGE),
    ),
    BadInput(
        "batch-cut-inside-header",
        _produce_error(bytes(_good_batch()[:40])),
        _partition_error(CORRUPT_MESSAGE),
    ),
    BadInput("two-batches", _produce_error(two_batches()), _partition_error(INVALID_RECORD)),
    BadInput(
        "produce-v2",
        _produce_error(build_batch([(None, b"v2")]), version=2),
        _partition_error(UNSUPPORTED_VERSION),
    ),
    BadInput(
        "acks-5",
        _produce_error(build_batch([(None, b"acks")]), acks=5),
        _partition_error(INVALID_REQUIRED_ACKS),
    ),
]


# ---------------------------------------------------------------------------------------------
# The scenario, run once for the module.


@dataclass
class Observed:
    client_id: str
    address: str
    outcome: object


@dataclass
class Scenario:
    broker: BrokerProcess
    observed: dict[str, Observed] = field(default_factory=dict)
    produced: int = 0
    produced_before_first_bad_input: int = 0
    produced_after_last_bad_input: int = 0
    delivery_errors: list[str] = field(default_factory=list)
    stored: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    log: str = ""


class BackgroundProducer(threading.Thread):
    """Produces sequence numbers 0, 1, 2... (message i to partition i % 3) until told to stop
    or MAX_BACKGROUND_MESSAGES are sent, at a bounded pace so that it overlaps the bad input."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="background-producer", daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "background-producer",
                "acks": "all",
                "linger.ms": 2,
            }
        )
        self.stop_requested = threading.Event()
        self.sent = 0
        self.acknowledged = 0
        self.errors: list[str] = []
        self.unflushed = -1

    def _delivered(self, error: object, _message: object) -> None:
        if error is None:
            self.acknowledged += 1
        else:
            self.errors.append(str(error))

    def run(self) -> None:
        while not self.stop_requested.is_set() and self.sent < MAX_BACKGROUND_MESSAGES:
            for sequence in range(self.sent, self.sent + 50):
                self.producer.produce(
                    TOPIC,
                    sequence_value(sequence),
                    partition=sequence % PARTITIONS,
                    on_delivery=self._delivered,
                )
            self.sent += 50
            self.producer.poll(0.005)
        self.unflushed = self.producer.flush(60)


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    data_dir: Path = tmp_path_factory.mktemp("bad-input") / "data"
    broker = BrokerProcess(data_dir, {"socket.request.max.bytes": str(MAX_REQUEST_BYTES)}).start()
    try:
        create_topic(broker.bootstrap, TOPIC, PARTITIONS)
        result = Scenario(broker)
        background = BackgroundProducer(broker.bootstrap)
        background.start()
        try:
            _wait(lambda: background.acknowledged >= 500, 30)
            result.produced_before_first_bad_input = background.acknowledged
            for bad in BAD_INPUTS:
                client_id = f"bad-{bad.name}"
                with KafkaWire(broker.bootstrap, client_id=client_id) as wire:
                    address = wire.local_address
                    try:
                        outcome = bad.send(wire)
                    except Exception as exc:  # recorded, and reported by the test for it
                        outcome = f"{type(exc).__name__}: {exc}"
                result.observed[bad.name] = Observed(client_id, address, outcome)
            last = background.acknowledged
            _wait(lambda: background.acknowledged >= last + 500, 30)
            result.produced_after_last_bad_input = background.acknowledged - last
        finally:
            background.stop_requested.set()
            background.join(90)
        assert background.unflushed == 0, "background producer could not flush"
        result.produced = background.sent
        result.delivery_errors = background.errors
        received = consume_all(broker.bootstrap, TOPIC, PARTITIONS, background.sent)
        result.stored = {
            partition: [(offset, sequence_of(value)) for offset, value in got]
            for partition, got in received.items()
        }
        time.sleep(0.2)  # let the broker's log handler write the last lines
        result.log = broker.log()
        yield result
    finally:
        broker.kill()


# ---------------------------------------------------------------------------------------------
# The checks


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda bad: bad.name)
def test_bad_input_gets_kafkas_answer(scenario: Scenario, bad: BadInput) -> None:
    assert scenario.observed[bad.name].outcome == bad.expected


def test_api_versions_of_unknown_version_lists_the_supported_apis(scenario: Scenario) -> None:
    with KafkaWire(scenario.broker.bootstrap) as wire:
        answer = api_versions(wire, 999)
    assert answer.error_code == UNSUPPORTED_VERSION
    assert answer.api_keys[18][0] == 0 and answer.api_keys[18][1] >= 3  # ApiVersions itself
    assert answer.api_keys[0][0] == 0  # Produce advertised from v0 (librdkafka needs it)
    assert {1, 2, 3, 22} <= set(answer.api_keys)


def _log_lines_for(log: str, address: str) -> list[str]:
    pattern = re.compile(re.escape(address) + r"(?!\d)")
    return [line for line in log.splitlines() if pattern.search(line)]


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda bad: bad.name)
def test_bad_input_is_logged_once_with_client_id_and_address(
    scenario: Scenario, bad: BadInput
) -> None:
    observed = scenario.observed[bad.name]
    lines = _log_lines_for(scenario.log, observed.address)
    assert len(lines) == 1, f"log lines for {observed.address}: {lines}"
    assert observed.client_id in lines[0], lines[0]


def test_background_producer_overlapped_the_bad_input(scenario: Scenario) -> None:
    assert scenario.produced_before_first_bad_input >= 500
    assert scenario.produced_after_last_bad_input >= 500
    assert scenario.produced <= MAX_BACKGROUND_MESSAGES


def test_background_messages_stored_exactly_once_in_order(scenario: Scenario) -> None:
    assert scenario.delivery_errors == []
    check_partitions(scenario.stored, scenario.produced, PARTITIONS)
