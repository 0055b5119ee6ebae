# Prometheus metrics, served on their own port by a small asyncio HTTP endpoint in the broker's
# event loop (so collectors read broker state without locks). Off unless lockgate.metrics.port
# is set; off, the hot-path hooks return at once.
#
# Two kinds of figures, kept apart so the hot path stays cheap:
# - events (requests, error codes, bytes in/out, connections, flushes, loads, ISR changes) are
#   tallied as they happen in plain dicts keyed by a topic name or an API key: one dict lookup
#   and an addition on the event loop, no labels() call and no lock. They are turned into
#   Prometheus families only when scraped.
# - state (log offsets and sizes, transactions, consumer lag, disk space, ISR health) is read
#   at scrape time from the sources the composition root gives (ScrapeSources) and never
#   stored here; the families with a series per partition are rendered straight to text by
#   partition_metrics.py.
# Label cardinality is bounded by what the broker holds: topics and partitions it hosts, API
# keys, error codes, listeners, and consumer-lag series capped at
# lockgate.metrics.consumer.lag.max.series (docs/metrics.md).
from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from lockgate.coordinator.txn.state import TxnState
from lockgate.log.partition import Partition
from lockgate.log.stats import LATENCY_BUCKETS, Histogram
from lockgate.log.steps import run_yielding
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.replication.group_commit import GroupCommit
from lockgate.server import partition_metrics
from lockgate.server.loop_lag import LoopLagProbe
from lockgate.server.partition_metrics import GroupOffsets
from lockgate.tiered.manager import RemoteLogManager
from lockgate.topics.directory import TopicManager

log = logging.getLogger(__name__)

OPEN_STATES = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
# Coordinator kinds whose load (replay of their internal partition) is timed.
COORDINATOR_KINDS = ("group", "transaction", "share")


def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


class _Transaction(Protocol):
    """A transactional id's state, as the transaction gauges read it."""

    @property
    def state(self) -> TxnState: ...

    @property
    def start_ms(self) -> int: ...

    @property
    def timeout_ms(self) -> int: ...

    @property
    def two_phase_commit(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ScrapeSources:
    """What a scrape reads of the broker's state. The callables are read at each scrape: they
    answer from pieces the composition root builds after the metrics (which they feed)."""

    topics: TopicManager
    group_commit: GroupCommit
    transactions: Callable[[], Iterable[_Transaction]]  # the transaction coordinator's ids
    groups: Callable[[], Mapping[str, GroupOffsets]]  # the groups coordinated here, by id
    # partitions led here whose ISR is below their replica count, and below
    # min.insync.replicas (0, 0 on a single node)
    under_replicated: Callable[[], tuple[int, int]]
    connections: Callable[[], Iterable[str]]  # each open client connection's listener
    listeners: tuple[str, ...]  # the listener names, in configuration order
    data_dir: str | None  # None: storage in memory
    transaction_max_timeout_ms: int  # older open transactions are hanging candidates
    lag_series_max: int  # lockgate.metrics.consumer.lag.max.series
    clock: Callable[[], int]
    # tiered storage's manager (None when the broker has it off)
    tiered: Callable[[], RemoteLogManager | None] = lambda: None


class BrokerMetrics:
    """The broker's registry and the event tallies its hot paths feed."""

    def __init__(self, enabled: bool, sources: ScrapeSources) -> None:
        self.sources = sources
        self.enabled = enabled
        self.registry = CollectorRegistry()
        self.latency: dict[int, Histogram] = {}  # API key → request latency
        self.errors: dict[tuple[int, int], int] = {}  # (API key, error code) → count
        self.topic_in: dict[str, list[int]] = {}  # topic → [bytes, messages] appended
        self.topic_out: dict[str, int] = {}  # topic → bytes fetched by consumers
        self.replication_out = 0  # bytes fetched by followers
        self.opened: dict[str, int] = {}  # listener → connections accepted
        self.closed: dict[str, int] = {}
        self.loads = {kind: Histogram(LATENCY_BUCKETS) for kind in COORDINATOR_KINDS}
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.loop_lag = LoopLagProbe()  # runs while the endpoint does
        self.registry.register(EventCollector(self))
        self.registry.register(BrokerStateCollector(sources))
        # the process's figures read only /proc: rendered in a worker thread (counting 10,000
        # open descriptors is a listing of as many entries, ~20 ms)
        self.process_registry = CollectorRegistry()
        ProcessCollector(registry=self.process_registry)
        PlatformCollector(registry=self.registry)
        self.registry.register(GC_COLLECTOR)
        self._server: asyncio.Server | None = None
        self._probe: asyncio.Task[None] | None = None

    # -- hot-path hooks: O(1), nothing when metrics are off ---------------------------------------

    def request_done(self, api_key: int, seconds: float, error: int | None = None) -> None:
        """A request answered (`error`: its top-level error code, when it has one)."""
        if not self.enabled:
            return
        histogram = self.latency.get(api_key)
        if histogram is None:
            histogram = self.latency[api_key] = Histogram(LATENCY_BUCKETS)
        histogram.observe(seconds)
        if error is not None:
            key = (api_key, error)
            self.errors[key] = self.errors.get(key, 0) + 1

    def partition_errors(self, api_key: int, codes: Iterable[int]) -> None:
        """The per-partition error codes of a response (Produce, Fetch)."""
        if not self.enabled:
            return
        errors = self.errors
        for code in codes:
            key = (api_key, code)
            errors[key] = errors.get(key, 0) + 1

    def appended(self, topic: str, size: int, messages: int) -> None:
        if not self.enabled:
            return
        tally = self.topic_in.get(topic)
        if tally is None:
            tally = self.topic_in[topic] = [0, 0]
        tally[0] += size
        tally[1] += messages

    def fetched(
        self, entries: Iterable[tuple[str | None, Mapping[str, Any]]], follower: bool
    ) -> None:
        """A Fetch's answer: bytes per topic (a follower's count as replication) and the
        partitions' error codes."""
        if not self.enabled:
            return
        errors = self.errors
        out = self.topic_out
        for topic, entry in entries:
            size = len(entry["records"] or b"")
            if follower:
                self.replication_out += size
            elif topic is not None:
                out[topic] = out.get(topic, 0) + size
            key = (ApiKey.FETCH.value, int(entry["error_code"]))
            errors[key] = errors.get(key, 0) + 1

    def share_fetched(self, sizes: Iterable[tuple[str, int]]) -> None:
        """A ShareFetch's records: bytes out per topic, as a consumer's Fetch counts them."""
        if not self.enabled:
            return
        out = self.topic_out
        for topic, size in sizes:
            out[topic] = out.get(topic, 0) + size

    def connection_opened(self, listener: str) -> None:
        if self.enabled:
            self.opened[listener] = self.opened.get(listener, 0) + 1

    def connection_closed(self, listener: str) -> None:
        if self.enabled:
            self.closed[listener] = self.closed.get(listener, 0) + 1

    def coordinator_loaded(self, kind: str, seconds: float) -> None:
        """One internal partition replayed by a coordinator (`kind`: group, transaction, share)."""
        if self.enabled:
            self.loads[kind].observe(seconds)

    def isr_changed(self, delta: int) -> None:
        """A leader's ISR change was written: it shrank (delta < 0) or grew."""
        if not self.enabled or delta == 0:
            return
        if delta < 0:
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1

    # -- the endpoint -----------------------------------------------------------------------------

    def render(self) -> bytes:
        """One scrape: the registry's families, then the per-partition ones (rendered
        directly: there may be thousands of series)."""
        families = generate_latest(self.registry) + generate_latest(self.process_registry)
        return families + partition_metrics.render(*self.partition_sources()).encode()

    async def render_yielding(self) -> bytes:
        """render(), giving the event loop back between pieces of the per-partition walk
        (what the endpoint serves: a large scrape must not stall requests)."""
        process = asyncio.create_task(asyncio.to_thread(generate_latest, self.process_registry))
        families = generate_latest(self.registry)
        text = await run_yielding(partition_metrics.render_steps(*self.partition_sources()))
        return families + await process + text.encode()

    def partition_sources(
        self,
    ) -> tuple[Mapping[partition_metrics.Key, Partition], Mapping[str, GroupOffsets], int, int]:
        sources = self.sources
        return (
            sources.topics.partitions,
            sources.groups(),
            sources.clock() - sources.transaction_max_timeout_ms,
            sources.lag_series_max,
        )

    async def serve(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._answer, host, port)
        self._probe = asyncio.create_task(self.loop_lag.run())
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
                body = await self.render_yielding()
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
        if self._probe is not None:
            self._probe.cancel()


def _histogram(name: str, documentation: str, label: str = "") -> HistogramMetricFamily:
    return HistogramMetricFamily(name, documentation, labels=[label] if label else None)


def _add(family: HistogramMetricFamily, labels: list[str], histogram: Histogram) -> None:
    family.add_metric(labels, histogram.cumulative(), histogram.total)


class EventCollector(Collector):
    """Exports the tallies of BrokerMetrics; topics deleted since are dropped here."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        requests = CounterMetricFamily(
            "lockgate_requests", "Requests answered, per API", labels=["api"]
        )
        latency = _histogram(
            "lockgate_request_latency_seconds", "Time from request arrival to response", "api"
        )
        for api_key, histogram in sorted(metrics.latency.items()):
            requests.add_metric([api_name(api_key)], histogram.count)
            _add(latency, [api_name(api_key)], histogram)
        yield requests
        yield latency
        errors = CounterMetricFamily(
            "lockgate_request_errors",
            "Error codes in responses, per API: the top-level code of each response that has "
            "one, and each partition's code in Produce and Fetch (NONE included)",
            labels=["api", "error"],
        )
        for (api_key, code), count in sorted(metrics.errors.items()):
            errors.add_metric([api_name(api_key), error_name(code)], count)
        yield errors
        yield from self._topics()
        listeners = sorted(set(metrics.opened) | set(metrics.closed))
        opened = CounterMetricFamily(
            "lockgate_connections_opened", "Connections accepted, per listener", labels=["listener"]
        )
        closed = CounterMetricFamily(
            "lockgate_connections_closed", "Connections closed, per listener", labels=["listener"]
        )
        for listener in listeners:
            opened.add_metric([listener], metrics.opened.get(listener, 0))
            closed.add_metric([listener], metrics.closed.get(listener, 0))
        yield opened
        yield closed
        flush = _histogram(
            "lockgate_log_flush_seconds", "Group commit: time of one fsync pass over the logs"
        )
        _add(flush, [], metrics.sources.group_commit.flush_latency)
        yield flush
        batch = _histogram(
            "lockgate_log_flush_partitions", "Group commit: partitions covered by one fsync pass"
        )
        _add(batch, [], metrics.sources.group_commit.flush_partitions)
        yield batch
        loads = _histogram(
            "lockgate_coordinator_load_seconds",
            "Time to load (replay) one internal partition, per coordinator",
            "coordinator",
        )
        for kind, histogram in metrics.loads.items():
            _add(loads, [kind], histogram)
        yield loads
        shrinks = CounterMetricFamily("lockgate_isr_shrinks", "ISR shrinks written by this leader")
        shrinks.add_metric([], metrics.isr_shrinks)
        yield shrinks
        expands = CounterMetricFamily(
            "lockgate_isr_expands", "ISR expansions written by this leader"
        )
        expands.add_metric([], metrics.isr_expands)
        yield expands
        probe = metrics.loop_lag
        lag = _histogram(
            "lockgate_event_loop_lag_seconds",
            "How late the broker's event loop ran a timer (sampled every 10 ms)",
        )
        _add(lag, [], probe.lag)
        yield lag
        worst = GaugeMetricFamily(
            "lockgate_event_loop_lag_max_seconds", "The largest event loop lag since start"
        )
        worst.add_metric([], probe.worst_s)
        yield worst
        hold = _histogram(
            "lockgate_event_loop_hold_seconds",
            "CPU time the event loop's thread used between two of the probe's timers: what the "
            "broker's own work held the loop for, apart from waits for a core",
        )
        _add(hold, [], probe.hold)
        yield hold
        worst_hold = GaugeMetricFamily(
            "lockgate_event_loop_hold_max_seconds", "The largest event loop hold since start"
        )
        worst_hold.add_metric([], probe.worst_hold_s)
        yield worst_hold
        stalls = CounterMetricFamily(
            "lockgate_event_loop_stalls",
            "Event loop lags of 50 ms or more (logged, a line per 10 s at most)",
        )
        stalls.add_metric([], probe.stalls)
        yield stalls

    def _topics(self) -> Iterator[Metric]:
        metrics = self.metrics
        existing = metrics.sources.topics.topics
        for tallies in (metrics.topic_in, metrics.topic_out):
            for gone in [name for name in tallies if name not in existing]:
                del tallies[gone]  # as Kafka removes a deleted topic's metrics
        bytes_in = CounterMetricFamily(
            "lockgate_topic_bytes_in", "Record batch bytes appended, per topic", labels=["topic"]
        )
        messages_in = CounterMetricFamily(
            "lockgate_topic_messages_in", "Records appended, per topic", labels=["topic"]
        )
        for topic, (size, messages) in sorted(metrics.topic_in.items()):
            bytes_in.add_metric([topic], size)
            messages_in.add_metric([topic], messages)
        yield bytes_in
        yield messages_in
        bytes_out = CounterMetricFamily(
            "lockgate_topic_bytes_out",
            "Record batch bytes returned to consumers' fetches, per topic",
            labels=["topic"],
        )
        for topic, size in sorted(metrics.topic_out.items()):
            bytes_out.add_metric([topic], size)
        yield bytes_out
        replication = CounterMetricFamily(
            "lockgate_replication_bytes_out", "Record batch bytes returned to followers' fetches"
        )
        replication.add_metric([], metrics.replication_out)
        yield replication


class BrokerStateCollector(Collector):
    """Gauges read from the broker's state at scrape time."""

    def __init__(self, sources: ScrapeSources) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        yield from self._transactions()
        yield from self._replication()
        yield from self._connections()
        yield from self._disk()
        yield from self._tiered()

    def _transactions(self) -> Iterator[Metric]:
        now = self.sources.clock()
        open_times: list[int] = []
        two_phase: list[int] = []
        past_timeout = 0
        counts = dict.fromkeys(TxnState, 0)
        for meta in self.sources.transactions():
            counts[meta.state] += 1
            if meta.state not in OPEN_STATES or meta.start_ms < 0:
                continue
            age = now - meta.start_ms
            open_times.append(age)
            if meta.two_phase_commit and meta.state == TxnState.ONGOING:
                two_phase.append(age)
            elif not meta.two_phase_commit and age > meta.timeout_ms:
                past_timeout += 1
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
        for state, count in counts.items():
            by_state.add_metric([state.display_name], count)
        yield by_state
        late = GaugeMetricFamily(
            "lockgate_transactions_past_timeout",
            "Open transactions (not two-phase) older than their transaction.timeout.ms: the "
            "timeout aborter should end them within one check interval",
        )
        late.add_metric([], past_timeout)
        yield late
        waiting = GaugeMetricFamily(
            "lockgate_two_phase_transactions_waiting",
            "Open two-phase (KIP-939) transactions: never timed out, they wait for their "
            "external transaction manager's commit or abort",
        )
        waiting.add_metric([], len(two_phase))
        yield waiting
        oldest = GaugeMetricFamily(
            "lockgate_two_phase_transaction_open_time_max_seconds",
            "How long the oldest open two-phase transaction has been open",
        )
        oldest.add_metric([], max(two_phase, default=0) / 1000)
        yield oldest

    def _replication(self) -> Iterator[Metric]:
        under, under_min = self.sources.under_replicated()
        for name, text, count in (
            ("lockgate_under_replicated_partitions",
             "Partitions led here whose ISR is smaller than their replica set", under),
            ("lockgate_under_min_isr_partitions",
             "Partitions led here whose ISR is smaller than min.insync.replicas", under_min),
        ):  # fmt: skip
            family = GaugeMetricFamily(name, text)
            family.add_metric([], count)
            yield family

    def _connections(self) -> Iterator[Metric]:
        connections = GaugeMetricFamily(
            "lockgate_connections", "Open client connections, per listener", labels=["listener"]
        )
        counts: dict[str, int] = {}
        for listener in self.sources.connections():
            counts[listener] = counts.get(listener, 0) + 1
        for listener in self.sources.listeners:
            connections.add_metric([listener], counts.get(listener, 0))
        yield connections

    def _tiered(self) -> Iterator[Metric]:
        """Kafka's RemoteCopy*/RemoteFetch*/RemoteDelete* meters as counters, and per tiered
        partition led here its remote size and copy lag (RemoteLogSizeBytes,
        RemoteCopyLagSegments, RemoteCopyLagBytes)."""
        tiered = self.sources.tiered()
        if tiered is None:
            return
        stats = tiered.stats
        for name, text, value in (
            ("lockgate_remote_copy_bytes", "Bytes of segments copied to the object store",
             stats.copied_bytes),
            ("lockgate_remote_copy_segments", "Segments copied to the object store",
             stats.copied_segments),
            ("lockgate_remote_copy_errors", "Segment copies that failed", stats.copy_errors),
            ("lockgate_remote_delete_segments", "Remote segments deleted",
             stats.deleted_segments),
            ("lockgate_remote_delete_errors", "Remote segment deletes that failed",
             stats.delete_errors),
            ("lockgate_remote_fetch_requests", "Fetches read from the object store",
             stats.fetch_requests),
            ("lockgate_remote_fetch_bytes", "Bytes read from the object store for fetches",
             stats.fetch_bytes),
            ("lockgate_remote_fetch_errors", "Fetches from the object store that failed",
             stats.fetch_errors),
        ):  # fmt: skip
            family = CounterMetricFamily(name, text)
            family.add_metric([], value)
            yield family
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(
            "lockgate_remote_log_size_bytes",
            "Bytes of the partition in the object store",
            labels=labels,
        )
        lag_segments = GaugeMetricFamily(
            "lockgate_remote_copy_lag_segments", "Rolled segments not copied yet", labels=labels
        )
        lag_bytes = GaugeMetricFamily(
            "lockgate_remote_copy_lag_bytes", "Bytes of rolled segments not copied yet",
            labels=labels,
        )  # fmt: skip
        for (topic, index), partition in list(self.sources.topics.partitions.items()):
            if not (partition.is_leader and partition.config.remote_storage):
                continue
            key = [topic, str(index)]
            segments, waiting = tiered.copy_lag(partition)
            size.add_metric(key, tiered.remote_size(partition))
            lag_segments.add_metric(key, segments)
            lag_bytes.add_metric(key, waiting)
        yield size
        yield lag_segments
        yield lag_bytes

    def _disk(self) -> Iterator[Metric]:
        free = GaugeMetricFamily(
            "lockgate_log_dir_free_bytes",
            "Bytes available to the broker on the data directory's file system",
            labels=["dir"],
        )
        total = GaugeMetricFamily(
            "lockgate_log_dir_total_bytes",
            "Size of the data directory's file system",
            labels=["dir"],
        )
        root = self.sources.data_dir
        if root is not None:
            try:
                usage = shutil.disk_usage(root)
            except OSError:
                pass
            else:
                free.add_metric([root], usage.free)
                total.add_metric([root], usage.total)
        yield free
        yield total
