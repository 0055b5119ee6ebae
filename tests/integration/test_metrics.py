"""The Prometheus endpoint: off by default, and when on, the KIP-939 metric tracks an open
transaction, and request counts/latencies per API appear."""

from __future__ import annotations

import asyncio
import re

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.txn import rules
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine


async def scrape(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    return body.decode()


def value(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing"
    return float(match.group(1))


async def test_metrics_are_off_by_default() -> None:
    broker = Broker(BrokerConfig({"listeners": "127.0.0.1:0"}), MemoryEngine())
    await broker.start()
    assert broker.metrics_port == -1
    await broker.stop()


async def test_open_transaction_time_and_request_metrics() -> None:
    config = BrokerConfig(
        {
            "listeners": "127.0.0.1:0",
            "lockgate.metrics.port": "0",
            "lockgate.durability": "page-cache",
            "transaction.state.log.num.partitions": "2",
            "offsets.topic.num.partitions": "2",
        }
    )
    broker = Broker(config, MemoryEngine())
    await broker.start()
    try:
        broker.topics.create("m", 1, 1, {})
        await asyncio.sleep(0.05)  # coordinators load
        assert (
            value(await scrape(broker.metrics_port), "lockgate_active_transaction_open_time_max_ms")
            == 0
        )
        coordinator = broker.transactions
        init = rules.init_producer_id(
            None, "t", 60000, -1, -1, 0, 900000, broker.producer_ids.allocate
        )
        await coordinator.apply("t", init)
        meta = coordinator.txns["t"]
        added = rules.add_partitions(meta, meta.producer_id, meta.producer_epoch, [("m", 0)], 1)
        assert added.transition is not None
        await coordinator.apply("t", added)
        await asyncio.sleep(0.2)
        text = await scrape(broker.metrics_port)
        assert value(text, "lockgate_active_transaction_open_time_max_ms") > 0
        assert value(text, 'lockgate_transactions{state="Ongoing"}') == 1
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        writer.write(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x07\xff\xff")  # ApiVersions v0
        await writer.drain()
        await reader.readexactly(4)
        writer.close()
        await asyncio.sleep(0.05)
        text = await scrape(broker.metrics_port)
        assert value(text, 'lockgate_requests_total{api="API_VERSIONS"}') == 1
        assert 'lockgate_request_latency_seconds_bucket{api="API_VERSIONS",le="0.5"} 1.0' in text
        # the event loop lag probe runs with the endpoint: it has woken by now
        assert value(text, "lockgate_event_loop_lag_seconds_count") > 0
        assert value(text, "lockgate_event_loop_stalls_total") >= 0
    finally:
        await broker.stop()
