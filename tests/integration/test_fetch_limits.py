"""Fetch size limits: the broker's fetch.max.bytes caps a response whatever the client asks
for, each partition keeps to its PartitionMaxBytes, and only the response's first batch may
exceed them (KIP-74). A fetch asking for 2 GiB of a 96 MiB partition leaves the broker's
memory (psutil RSS) where the cap puts it; real clients consume everything as before."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.kafka_wire import API_FETCH, KafkaWire, int8, int32, int64, string

CAP = 1 << 20
RECORD = 60_000  # one record per batch (linger 0, batch.size below two records)
ASK = (1 << 31) - 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("fetch-limits") / "data"
    process = BrokerProcess(data, {"fetch.max.bytes": str(CAP)}).start()
    try:
        yield process
    finally:
        process.kill()


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    create_topic(bootstrap, topic, partitions)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": RECORD + 1000}
    )
    payload = b"x" * RECORD
    for number in range(per_partition):
        for partition in range(partitions):
            producer.produce(topic, payload, partition=partition)
        if number % 100 == 99:
            producer.flush(30)
    assert producer.flush(60) == 0


def fetch_sizes(
    wire: KafkaWire, topic: str, partitions: int, max_bytes: int, partition_max: int
) -> list[int]:
    """Bytes of records per partition in one Fetch v4 answer (offset 0 everywhere)."""
    body = int32(-1) + int32(0) + int32(1) + int32(max_bytes) + int8(0)
    body += int32(1) + string(topic) + int32(partitions)
    for partition in range(partitions):
        body += int32(partition) + int64(0) + int32(partition_max)
    response = wire.request(API_FETCH, 4, body, flexible=False, flexible_response=False)
    response.int32()
    sizes = [0] * partitions
    for _ in range(response.array_length()):
        response.string()
        for _ in range(response.array_length()):
            index = response.int32()
            assert response.int16() == 0
            response.int64()
            response.int64()
            for _ in range(max(response.array_length(), 0)):
                response.int64()
                response.int64()
            size = response.int32()
            records = response.data[response.pos : response.pos + max(size, 0)]
            response.pos += max(size, 0)
            sizes[index] = len(records)
            if records:
                (length,) = struct.unpack_from(">i", records, 8)
                assert len(records) % (12 + length) == 0  # whole batches only
    return sizes


def test_the_broker_caps_a_fetch_at_fetch_max_bytes(broker: BrokerProcess) -> None:
    fill(broker.bootstrap, "limits", 3, 40)  # 2.4 MB per partition
    with KafkaWire(broker.bootstrap) as wire:
        sizes = fetch_sizes(wire, "limits", 3, ASK, ASK)
        assert 0 < sum(sizes) <= CAP
        assert sizes[0] > CAP - 2 * RECORD  # the first partition takes what the cap allows
        per_partition = fetch_sizes(wire, "limits", 3, ASK, 3 * RECORD)
        assert all(3 * RECORD - RECORD < s <= 3 * RECORD for s in per_partition), per_partition
        # a first batch larger than every limit still comes whole; nothing after it does
        tiny = fetch_sizes(wire, "limits", 3, 10, 10)
        assert tiny[0] > 10 and tiny[1:] == [0, 0]


def test_clients_still_consume_everything(broker: BrokerProcess) -> None:
    fill(broker.bootstrap, "limits-read", 2, 30)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        fetch_max_bytes=64 << 20,
        max_partition_fetch_bytes=32 << 20,
        consumer_timeout_ms=5000,
    )
    partitions = [TopicPartition("limits-read", p) for p in range(2)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    count = sum(1 for _ in consumer)
    consumer.close()
    assert count == 60


def test_a_huge_fetch_leaves_memory_bounded_by_the_cap(tmp_path: Path) -> None:
    cap = 8 << 20
    process = BrokerProcess(tmp_path / "data", {"fetch.max.bytes": str(cap)}).start()
    try:
        fill(process.bootstrap, "big", 1, 1600)  # 96 MB in one partition
        assert process.process is not None
        broker = psutil.Process(process.process.pid)
        before = broker.memory_info().rss
        with KafkaWire(process.bootstrap, timeout=60) as wire:
            for _ in range(3):
                sizes = fetch_sizes(wire, "big", 1, ASK, ASK)
                assert 0 < sizes[0] <= cap
        grown = broker.memory_info().rss - before
        # the old behaviour read the whole partition (96 MB) into one response
        assert grown < 8 * cap, f"RSS grew by {grown / 2**20:.0f} MiB"
        print(f"RSS growth during 2 GiB fetches: {grown / 2**20:.1f} MiB (cap 8 MiB)")
    finally:
        process.kill()
