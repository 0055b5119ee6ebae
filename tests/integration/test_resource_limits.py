"""What clients can make a broker hold, through real sockets and clients: idle connections are
closed after connections.max.idle.ms, connections beyond max.connections.per.ip are refused at
once, and clients that send huge frames only partly cannot grow the broker's memory beyond
queued.max.request.bytes (psutil RSS) while a normal client keeps producing and consuming."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.kafka_wire import KafkaWire, api_versions

MIB = 1 << 20


def test_idle_connections_are_closed_and_busy_ones_are_not(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"connections.max.idle.ms": "1000"}).start()
    try:
        with KafkaWire(broker.bootstrap) as idle, KafkaWire(broker.bootstrap) as busy:
            started = time.monotonic()
            while time.monotonic() - started < 3:
                assert api_versions(busy).error_code == 0
                time.sleep(0.3)
            assert idle.is_closed_by_peer(timeout=3)
            assert api_versions(busy).error_code == 0
        assert "idle for" in broker.log()
    finally:
        broker.kill()


def test_connections_beyond_the_per_address_limit_are_refused(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"max.connections.per.ip": "3"}).start()
    try:
        time.sleep(0.5)  # the start-up probe's connection is counted until the broker sees it go
        wires = [KafkaWire(broker.bootstrap) for _ in range(3)]
        try:
            assert all(api_versions(w).error_code == 0 for w in wires)
            with KafkaWire(broker.bootstrap) as extra:
                assert extra.is_closed_by_peer(timeout=5)
            wires.pop().close()
            time.sleep(0.2)
            with KafkaWire(broker.bootstrap) as again:
                assert api_versions(again).error_code == 0
        finally:
            for wire in wires:
                wire.close()
        assert "max.connections.per.ip" in broker.log()
    finally:
        broker.kill()


def _trickle(port: int, stop: threading.Event) -> None:
    """A 90 MiB frame announced, then as much of its body as the broker takes (at most 60 MiB)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.settimeout(1.0)
        sock.sendall(struct.pack(">i", 90 * MIB))
        chunk = b"\0" * MIB
        for _ in range(60):
            if stop.is_set():
                return
            try:
                sock.sendall(chunk)
            except OSError:  # blocked by the broker not reading (timeout) or closed
                break
        stop.wait(30)


def test_partial_huge_frames_cannot_grow_memory_past_the_budget(tmp_path: Path) -> None:
    settings = {
        "socket.request.max.bytes": str(95 * MIB),
        "queued.max.request.bytes": str(100 * MIB),
        "connections.max.idle.ms": "6000",
    }
    broker = BrokerProcess(tmp_path / "data", settings).start()
    stop = threading.Event()
    try:
        assert broker.process is not None
        process = psutil.Process(broker.process.pid)
        create_topic(broker.bootstrap, "alongside", 1)
        before = process.memory_info().rss
        threads = [
            threading.Thread(target=_trickle, args=(broker.port, stop), daemon=True)
            for _ in range(12)
        ]
        for thread in threads:
            thread.start()
        time.sleep(4)  # the trickles send what they can
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for number in range(100):
            producer.produce("alongside", f"v{number}".encode())
        assert producer.flush(20) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "alongside-reader",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition("alongside", 0, 0)])
        received = 0
        deadline = time.monotonic() + 20
        while received < 100 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received += 1
        consumer.close()
        assert received == 100
        grown = process.memory_info().rss - before
        print(f"RSS growth with 12 partial 90 MiB frames: {grown / MIB:.0f} MiB")
        # 12 x 60 MiB were sent to a broker that would buffer them all before
        assert grown < 200 * MIB, f"{grown / MIB:.0f} MiB"
    finally:
        stop.set()
        broker.kill()
