"""The metric families at the collector level: hot-path tallies and their export, the off
switch, deleted topics, error names, the consumer-lag cap, hanging-transaction candidates,
two-phase and timed-out transactions, and the histogram's buckets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.group.committed import CommittedOffsets
from lockgate.coordinator.group.group import Group
from lockgate.coordinator.group.records import CommittedOffset, offset_value
from lockgate.coordinator.txn.metadata import TxnMetadata
from lockgate.coordinator.txn.state import TxnState
from lockgate.log.producer_state import ProducerEntry
from lockgate.log.stats import Histogram
from lockgate.log.steps import run
from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.server import partition_metrics
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine


def make_broker(**settings: str) -> Broker:
    config = {"listeners": "127.0.0.1:0", "lockgate.metrics.port": "0", **settings}
    return Broker(BrokerConfig(config), MemoryEngine())


@pytest.fixture
def broker() -> Iterator[Broker]:
    broker = make_broker()
    broker.topics.create("t", 2, 1, {})
    yield broker
    broker.topics.close()


def families(broker: Broker) -> dict[str, Metric]:
    """The families of one scrape, parsed back from the text format."""
    text = broker.metrics.render().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(broker: Broker, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    """A family's samples by their sorted labels (histograms: their _count samples)."""
    found = families(broker)[family]
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for sample in found.samples
        if found.type != "histogram" or sample.name.endswith("_count")
    }


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    histogram = Histogram((1.0, 2.0))
    for observed in (0.5, 1.0, 1.5, 3.0):
        histogram.observe(observed)
    assert histogram.cumulative() == [("1.0", 2), ("2.0", 3), ("+Inf", 4)]
    assert histogram.count == 4
    assert histogram.total == 6.0


def test_requests_errors_and_topic_tallies(broker: Broker) -> None:
    metrics = broker.metrics
    metrics.request_done(ApiKey.PRODUCE, 0.002)
    metrics.request_done(ApiKey.FIND_COORDINATOR, 0.001, ErrorCode.coordinator_not_available)
    metrics.partition_errors(ApiKey.PRODUCE, [ErrorCode.none, ErrorCode.not_leader_or_follower])
    metrics.appended("t", 100, 3)
    metrics.appended("t", 50, 1)
    metrics.fetched([("t", {"records": b"x" * 70, "error_code": 0})], follower=False)
    metrics.fetched([("t", {"records": b"y" * 9, "error_code": 0})], follower=True)
    metrics.fetched([(None, {"records": b"", "error_code": ErrorCode.unknown_topic_id})], False)
    metrics.share_fetched([("t", 5)])  # a ShareFetch's records count as bytes out too
    requests = {(("api", "FIND_COORDINATOR"),): 1, (("api", "PRODUCE"),): 1}
    assert samples(broker, "lockgate_requests") == requests
    assert samples(broker, "lockgate_request_latency_seconds") == requests
    assert samples(broker, "lockgate_request_errors") == {
        (("api", "FETCH"), ("error", "NONE")): 2,
        (("api", "FETCH"), ("error", "UNKNOWN_TOPIC_ID")): 1,
        (("api", "FIND_COORDINATOR"), ("error", "COORDINATOR_NOT_AVAILABLE")): 1,
        (("api", "PRODUCE"), ("error", "NONE")): 1,
        (("api", "PRODUCE"), ("error", "NOT_LEADER_OR_FOLLOWER")): 1,
    }
    assert samples(broker, "lockgate_topic_bytes_in") == {(("topic", "t"),): 150}
    assert samples(broker, "lockgate_topic_messages_in") == {(("topic", "t"),): 4}
    assert samples(broker, "lockgate_topic_bytes_out") == {(("topic", "t"),): 75}
    assert samples(broker, "lockgate_replication_bytes_out") == {(): 9}


def test_a_deleted_topic_loses_its_series(broker: Broker) -> None:
    broker.metrics.appended("t", 10, 1)
    broker.metrics.fetched([("t", {"records": b"x", "error_code": 0})], follower=False)
    broker.topics.remove(run(broker.topics.deleting("t"))[1])
    assert samples(broker, "lockgate_topic_bytes_in") == {}
    assert samples(broker, "lockgate_topic_bytes_out") == {}
    assert broker.metrics.topic_in == {}


def test_off_records_nothing() -> None:
    broker = make_broker(**{"lockgate.metrics.port": "-1"})
    metrics = broker.metrics
    metrics.request_done(ApiKey.PRODUCE, 0.1, 0)
    metrics.appended("t", 10, 1)
    metrics.connection_opened("PLAINTEXT")
    metrics.coordinator_loaded("group", 1.0)
    metrics.isr_changed(-1)
    assert not metrics.latency and not metrics.errors and not metrics.topic_in
    assert not metrics.opened and metrics.loads["group"].count == 0 and metrics.isr_shrinks == 0


def test_connections_loads_and_isr_changes(broker: Broker) -> None:
    metrics = broker.metrics
    metrics.connection_opened("PLAINTEXT")
    metrics.connection_opened("PLAINTEXT")
    metrics.connection_closed("PLAINTEXT")
    metrics.coordinator_loaded("transaction", 0.3)
    metrics.isr_changed(-1)
    metrics.isr_changed(2)
    metrics.isr_changed(0)
    assert samples(broker, "lockgate_connections_opened") == {(("listener", "PLAINTEXT"),): 2}
    assert samples(broker, "lockgate_connections_closed") == {(("listener", "PLAINTEXT"),): 1}
    # open connections are counted from the broker's set: none in this test
    assert samples(broker, "lockgate_connections") == {(("listener", "PLAINTEXT"),): 0}
    loads = samples(broker, "lockgate_coordinator_load_seconds")
    assert loads == {
        (("coordinator", "group"),): 0,
        (("coordinator", "transaction"),): 1,
        (("coordinator", "share"),): 0,
    }
    assert samples(broker, "lockgate_isr_shrinks") == {(): 1}
    assert samples(broker, "lockgate_isr_expands") == {(): 1}
    assert samples(broker, "lockgate_under_replicated_partitions") == {(): 0}


def committed(offset: int) -> bytes:
    return offset_value(CommittedOffset(offset, -1, "", 0))


def group_with(group_id: str, offsets: dict[tuple[str, int], bytes]) -> Group:
    group = Group(group_id)
    group.offsets.update(offsets)
    return group


def test_consumer_lag_is_capped(broker: Broker) -> None:
    broker = make_broker(**{"lockgate.metrics.consumer.lag.max.series": "2"})
    broker.topics.create("t", 2, 1, {})
    for index in (0, 1):
        partition = broker.topics.partitions[("t", index)]
        partition.high_watermark = 10  # (no data needed: lag reads the high watermark)
    broker.groups.groups["a"] = group_with("a", {("t", 0): committed(4), ("t", 1): committed(10)})
    broker.groups.groups["b"] = group_with("b", {("t", 0): committed(1), ("gone", 0): committed(1)})
    lag = samples(broker, "lockgate_consumer_lag")
    assert lag == {
        (("group", "a"), ("partition", "0"), ("topic", "t")): 6,
        (("group", "a"), ("partition", "1"), ("topic", "t")): 0,
    }
    assert samples(broker, "lockgate_consumer_group_lag") == {
        (("group", "a"),): 6,
        (("group", "b"),): 9,
    }
    assert samples(broker, "lockgate_consumer_lag_series_dropped") == {(): 1}
    broker.topics.close()


def test_hanging_candidates_and_transaction_gauges(broker: Broker) -> None:
    now = int(time.time() * 1000)
    max_timeout = broker.config.integer("transaction.max.timeout.ms")
    partition = broker.topics.partitions[("t", 1)]
    for producer_id, last_write in ((7, now - max_timeout - 1000), (8, now)):
        partition.open_txns[producer_id] = 0
        partition.producers.put(ProducerEntry(producer_id, 0, 0, 0, 0, last_write, 0, 0))
    assert samples(broker, "lockgate_hanging_transaction_candidates") == {
        (("partition", "1"), ("topic", "t")): 1
    }
    assert samples(broker, "lockgate_producer_state_entries") == {(): 2}
    txns = broker.transactions.txns
    txns["late"] = TxnMetadata("late", 1, 0, 1000, TxnState.ONGOING, start_ms=now - 5000)
    txns["2pc"] = TxnMetadata(
        "2pc", 2, 0, 1000, TxnState.ONGOING, start_ms=now - 60_000, two_phase_commit=True
    )
    txns["done"] = TxnMetadata("done", 3, 0, 1000, TxnState.COMPLETE_COMMIT, start_ms=now - 1)
    assert samples(broker, "lockgate_transactions_past_timeout") == {(): 1}
    assert samples(broker, "lockgate_two_phase_transactions_waiting") == {(): 1}
    oldest = samples(broker, "lockgate_two_phase_transaction_open_time_max_seconds")[()]
    assert 60 <= oldest < 70
    assert samples(broker, "lockgate_active_transaction_open_time_max_ms")[()] >= 60_000
    by_state = samples(broker, "lockgate_transactions")
    assert by_state[(("state", "Ongoing"),)] == 2
    assert by_state[(("state", "CompleteCommit"),)] == 1


def test_label_values_are_escaped(broker: Broker) -> None:
    odd = 'a "quoted"\\ group\nid'
    broker.topics.partitions[("t", 0)].high_watermark = 3
    broker.groups.groups[odd] = group_with(odd, {("t", 0): committed(1)})
    assert samples(broker, "lockgate_consumer_group_lag") == {(("group", odd),): 2}


async def test_a_scrape_gives_the_loop_back_every_chunk_and_renders_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(partition_metrics, "CHUNK", 2)  # (a real chunk: 500 partitions)
    broker = make_broker()
    try:
        broker.topics.create("many", 5, 1, {})
        turns = 0

        async def other_work() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        worker = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        started = turns
        yielded = await broker.metrics.render_yielding()
        worker.cancel()
        # the walk paused at 2 and 4 partitions: the other task ran meanwhile
        assert turns - started >= 2
        # the per-partition families alike (the registry's process figures move between two)
        first = b"# HELP lockgate_log_size_bytes"
        assert yielded.split(first)[1] == broker.metrics.render().split(first)[1]
    finally:
        broker.topics.close()


def test_the_walk_pauses_every_chunk_of_committed_offsets() -> None:
    @dataclass
    class Offsets:
        offsets: CommittedOffsets

    committed = offset_value(CommittedOffset(0, -1, "", 0))
    many = Offsets(
        CommittedOffsets("g", {("gone", i): committed for i in range(2 * partition_metrics.CHUNK)})
    )
    steps = partition_metrics.render_steps({}, {"g": many}, 0, 10)
    pauses = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            text = done.value
            break
        pauses += 1
    assert pauses == 2
    assert "lockgate_consumer_lag_series_dropped 0" in text
