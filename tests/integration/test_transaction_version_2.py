"""Transaction version 2 (KIP-890) end to end over the wire, as a TV2 client drives it:
InitProducerId, Produce v12 adding partitions implicitly, EndTxn v5 bumping the epoch on
every commit and abort, and a delayed EndTxn of an older transaction being refused.

This is the test that justifies advertising the `transaction.version` = 2 feature."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockgate.config.properties import BrokerConfig
from lockgate.protocol.api import build, decode_body, encode, request_class, response_class
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.produce import ProduceRequestData, ProduceTopic, decode_produce
from lockgate.protocol.records import TRANSACTIONAL_BIT, build_batch, iter_records
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine

TOPIC = "tv2"


class Wire:
    """Just enough of a Kafka client to send one request at a time (header v2)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.correlation = 0

    async def send(self, api_key: int, version: int, body: bytes, flexible: bool = True) -> bytes:
        self.correlation += 1
        client = b"tv2-test"
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client)) + client
        frame = header + (b"\x00" if flexible else b"") + body
        self.writer.write(struct.pack(">i", len(frame)) + frame)
        await self.writer.drain()
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        payload = await self.reader.readexactly(size)
        (correlation,) = struct.unpack_from(">i", payload)
        assert correlation == self.correlation
        flexible_header = flexible and api_key != 18  # ApiVersions answers with header v0
        return payload[5 if flexible_header else 4 :]

    async def call(self, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        body = encode(build(request_class(api_key, version), fields))  # type: ignore[arg-type]
        answer = await self.send(api_key, version, body)
        return decode_body(response_class(api_key, version), answer, 0)


def produce_body(transactional_id: str, batch: bytes) -> bytes:
    """A Produce v12 body (flexible, topic by name) with one partition."""
    raw_id = transactional_id.encode()
    topic = TOPIC.encode()
    out = bytes([len(raw_id) + 1]) + raw_id + struct.pack(">hi", -1, 30000)
    out += b"\x02" + bytes([len(topic) + 1]) + topic + b"\x02" + struct.pack(">i", 0)
    out += _uvarint(len(batch) + 1) + batch + b"\x00" + b"\x00" + b"\x00"
    parsed: ProduceRequestData = decode_produce(out, 0, 12)  # the body must be well formed
    assert isinstance(parsed.topics[0], ProduceTopic)
    return out


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def produce_error(answer: bytes) -> tuple[int, int]:
    """(error code, base offset) of the single partition in a Produce v12 response."""
    pos = 1  # topics array length
    name_length = answer[pos] - 1
    pos += 1 + name_length + 1  # name, partitions array length
    _index, error, base_offset = struct.unpack_from(">ihq", answer, pos)
    return error, base_offset


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    config = BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "lockgate.durability": "page-cache",
            "transaction.state.log.num.partitions": "3",
            "offsets.topic.num.partitions": "3",
        }
    )
    instance = Broker(config, MemoryEngine())
    await instance.start()
    instance.topics.create(TOPIC, 1, 1, {})
    for _ in range(100):
        if instance.transactions.loaded:
            break
        await asyncio.sleep(0.01)
    try:
        yield instance
    finally:
        await instance.stop()


async def wait_complete(broker: Broker, transactional_id: str) -> None:
    for _ in range(200):
        meta = broker.transactions.txns.get(transactional_id)
        if meta is not None and meta.state.name.startswith("COMPLETE"):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("transaction did not complete")


async def test_tv2_commit_abort_and_delayed_end_txn(broker: Broker) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    wire = Wire(reader, writer)
    txn = "tv2-producer"
    init = await wire.call(
        22,
        5,
        {
            "transactional_id": txn,
            "transaction_timeout": 60000,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    assert init.error_code == ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch

    def batch(epoch: int, sequence: int, value: bytes) -> bytes:
        return build_batch(
            [(None, value)],
            attributes=TRANSACTIONAL_BIT,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=sequence,
        )

    # transaction 1: no AddPartitionsToTxn — Produce v12 adds the partition implicitly
    error, _ = produce_error(
        await wire.send(0, 12, produce_body(txn, batch(epoch, 0, b"committed")))
    )
    assert error == ErrorCode.none
    end = await wire.call(
        26,
        5,
        {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": True},
    )
    assert end.error_code == ErrorCode.none
    assert (end.producer_id, end.producer_epoch) == (
        pid,
        epoch + 1,
    )  # the epoch for the next transaction
    await wait_complete(broker, txn)

    # a retry of that EndTxn (its answer lost) is recognised and answered with success
    retry = await wire.call(
        26,
        5,
        {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": True},
    )
    assert (retry.error_code, retry.producer_epoch) == (ErrorCode.none, epoch + 1)

    # transaction 2 with the bumped epoch starts again at sequence 0
    error, _ = produce_error(
        await wire.send(0, 12, produce_body(txn, batch(epoch + 1, 0, b"aborted")))
    )
    assert error == ErrorCode.none
    # a delayed abort of transaction 1 (older epoch) must not touch transaction 2
    late = await wire.call(
        26,
        5,
        {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": False},
    )
    assert late.error_code == ErrorCode.producer_fenced
    assert broker.transactions.txns[txn].state.name == "ONGOING"
    # a marker carrying transaction 1's epoch is refused by the partition (TV2: must be newer)
    partition = broker.topics.get(TOPIC, 0)
    assert partition is not None
    with pytest.raises(KafkaProtocolError) as refused:
        partition.write_marker(pid, epoch + 1, True, 0, 0, strict_epoch=True)
    assert refused.value.code == ErrorCode.invalid_producer_epoch

    abort = await wire.call(
        26,
        5,
        {
            "transactional_id": txn,
            "producer_id": pid,
            "producer_epoch": epoch + 1,
            "committed": False,
        },
    )
    assert (abort.error_code, abort.producer_epoch) == (ErrorCode.none, epoch + 2)
    await wait_complete(broker, txn)
    writer.close()

    # read_committed view: only transaction 1's record, and transaction 2 listed as aborted
    assert partition.last_stable_offset == partition.high_watermark
    values = []
    aborted_ranges = [
        (a.first_offset, a.last_offset)
        for a in partition.aborted.overlapping(0, partition.high_watermark)
    ]
    for segment, position, header in partition.batches_from(0):
        if header.is_control:
            continue
        for offset, _ts, _key, value in iter_records(segment.log.read(position, header.size)):
            if not any(first <= offset <= last for first, last in aborted_ranges):
                values.append(value)
    assert values == [b"committed"]


async def test_api_versions_advertises_transaction_version_2(broker: Broker) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    wire = Wire(reader, writer)
    answer = await wire.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    writer.close()
    finalized = {
        f.name: (f.min_version_level, f.max_version_level) for f in answer.finalized_features
    }
    supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
    assert finalized["transaction.version"] == (2, 2)
    assert supported["transaction.version"] == (0, 2)
