# Prometheus metrics, served on their own port by a small asyncio HTTP endpoint in the broker's
# event loop (so collectors read broker state without locks). Off unless lockgate.metrics.port
# is set. Gauges that describe state (open transactions, producer entries, LSO lag) are
# computed at scrape time; request counts and latencies are recorded as requests finish.
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lockgate.coordinator.txn.state import TxnState

if TYPE_CHECKING:
    from lockgate.server.broker import Broker

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class BrokerStateCollector(Collector):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterable[Metric]:
        now = int(time.time() * 1000)
        coordinator = self.broker.transactions
        open_times = [
            now - meta.start_ms
            for meta in coordinator.txns.values()
            if meta.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
            and meta.start_ms >= 0
        ]
        longest = GaugeMetricFamily(
            "lockgate_active_transaction_open_time_max_ms",
            "active-transaction-open-time-max (KIP-939): the longest a currently open transaction "
            "has been open, in milliseconds",
        )
        longest.add_metric([], max(open_times, default=0))
        yield longest
        by_state = GaugeMetricFamily(
            "lockgate_transactions", "Transactional ids by transaction state", labels=["state"]
        )
        counts = dict.fromkeys(TxnState, 0)
        for meta in coordinator.txns.values():
            counts[meta.state] += 1
        for state, count in counts.items():
            by_state.add_metric([state.display_name], count)
        yield by_state
        partitions = self.broker.topics.partitions
        entries = GaugeMetricFamily(
            "lockgate_producer_state_entries", "(producer, partition) entries in producer state"
        )
        entries.add_metric([], sum(len(p.producers) for p in partitions.values()))
        yield entries
        lag = GaugeMetricFamily(
            "lockgate_last_stable_offset_lag",
            "High watermark minus last stable offset: what read_committed consumers wait for",
            labels=["topic", "partition"],
        )
        for (topic, index), partition in partitions.items():
            lag.add_metric(
                [topic, str(index)], partition.high_watermark - partition.last_stable_offset
            )
        yield lag


class BrokerMetrics:
    def __init__(self, broker: Broker) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "lockgate_requests", "Requests answered", ["api"], registry=self.registry
        )
        self.latency = Histogram(
            "lockgate_request_latency_seconds",
            "Time from request arrival to response",
            ["api"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(BrokerStateCollector(broker))
        self._server: asyncio.Server | None = None

    def request_done(self, api: str, seconds: float) -> None:
        self.requests.labels(api).inc()
        self.latency.labels(api).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def serve(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._answer, host, port)
        bound = int(self._server.sockets[0].getsockname()[1])
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            if len(parts) >= 2 and parts[0] == "GET" and parts[1].split("?")[0] == "/metrics":
                body = self.render()
                status = "200 OK"
            else:
                body, status = b"not found\n", "404 Not Found"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
