# How the producer's sender cuts batches off a partition's queue, without a broker: an
# idempotent partition's batches carry at most BATCH_RECORDS records (the broker's duplicate
# window); a batch that cannot grow any more goes without waiting for its linger; a window
# with little room left waits for an acknowledgement rather than sending a runt; a request
# going to a leader anyway takes its other partitions' records along. Checked with both
# implementations of the per-record work.
from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from lockgate.client import _purepath, fastpath
from lockgate.client.batches import RECORD_OVERHEAD_BOUND, ProducerIdentity
from lockgate.client.cluster import PartitionInfo, TopicPartition
from lockgate.client.sender import (
    BATCH_RECORDS,
    ProducerStats,
    Sender,
    SenderSettings,
    _PartitionQueue,
)
from lockgate.client.sequences import DUPLICATE_WINDOW

COMPILED = fastpath.load(pure=False)
TP = TopicPartition("t", 0)
LINGER = 0.005


@pytest.fixture(
    params=[
        pytest.param(COMPILED, id="compiled"),
        pytest.param(_purepath, id="pure"),
    ]
)
def impl(request: pytest.FixtureRequest) -> ModuleType:
    module: ModuleType = request.param
    return module


class Cluster:
    def __init__(self) -> None:
        self.metadata = object()


def sender(impl: ModuleType, *, idempotent: bool = True) -> Sender:
    settings = SenderSettings(
        acks=-1 if idempotent else 1,
        codec=0,
        linger=LINGER,
        batch_size=1_000_000,
        max_request_size=1_048_576,
        buffer_memory=10**9,
        request_timeout_ms=30_000,
        delivery_timeout=120.0,
        retry_backoff=0.1,
        idempotent=idempotent,
        max_in_flight=5 if idempotent else 1,
        transaction_timeout_ms=60_000,
        max_block=60.0,
        sequence_overflow_threshold=2**31 - 1,
        transactional_id=None,
    )
    return Sender(Cluster(), settings, None, ProducerStats(), impl)  # type: ignore[arg-type]


def queue_records(
    sender: Sender, count: int, enqueued: float, tp: TopicPartition = TP
) -> _PartitionQueue:
    if tp not in sender._queues:
        sender._new_queue(tp.topic, tp.partition)
    queue = sender._queues[tp]
    for _ in range(count):
        queue.pending.append(None, b"v", (), 1, RECORD_OVERHEAD_BOUND + 1, None, enqueued)
    return queue


def cut(sender: Sender, queue: _PartitionQueue, now: float) -> tuple[int | None, Any]:
    """The size of the batch _next_batch cuts now (None: none), and when to look again."""
    batch, later = sender._next_batch(TP, queue, now)
    if batch is None:
        return None, later
    queue.in_flight.append(batch)
    return len(batch.records), later


async def test_a_batch_that_cannot_grow_goes_at_once(impl: ModuleType) -> None:
    assert BATCH_RECORDS == DUPLICATE_WINDOW + 1
    producer = sender(impl)
    queue = queue_records(producer, BATCH_RECORDS + 300, enqueued=10.0)
    # full in records long before its linger: cut at once
    assert cut(producer, queue, 10.0)[0] == BATCH_RECORDS
    # 300 left: they wait for their linger, then for room in the window
    assert cut(producer, queue, 10.0) == (None, pytest.approx(LINGER))
    assert cut(producer, queue, 11.0) == (None, None)
    first = queue.in_flight.pop(0)
    queue.sequences.acknowledge(first.base_sequence)
    assert cut(producer, queue, 11.0)[0] == 300
    assert len(queue.pending) == 0


async def test_a_partial_batch_waits_for_its_linger(impl: ModuleType) -> None:
    producer = sender(impl)
    queue = queue_records(producer, BATCH_RECORDS - 1, enqueued=10.0)
    size, later = cut(producer, queue, 10.001)
    assert size is None and later == pytest.approx(LINGER - 0.001)
    assert cut(producer, queue, 10.0 + LINGER)[0] == BATCH_RECORDS - 1


async def test_a_producer_without_idempotence_has_no_record_limit(impl: ModuleType) -> None:
    producer = sender(impl, idempotent=False)
    queue = queue_records(producer, 3 * BATCH_RECORDS, enqueued=10.0)
    assert cut(producer, queue, 10.0) == (None, pytest.approx(LINGER))  # not full in bytes
    assert cut(producer, queue, 10.0 + LINGER)[0] == 3 * BATCH_RECORDS


async def test_the_window_leaves_no_runts(impl: ModuleType) -> None:
    producer = sender(impl)
    queue = queue_records(producer, 10, enqueued=10.0)
    assert cut(producer, queue, 10.0 + LINGER)[0] == 10
    queue_records(producer, BATCH_RECORDS, enqueued=11.0)
    # room for 991 more: rather than 991 now and a runt of 10 next, the batch waits for the
    # acknowledgement of the 10
    assert cut(producer, queue, 11.0) == (None, None)
    ten = queue.in_flight.pop(0)
    queue.sequences.acknowledge(ten.base_sequence)
    assert cut(producer, queue, 11.0)[0] == BATCH_RECORDS
    span = queue.sequences.next_sequence - queue.sequences.unacknowledged[0][0]
    assert span == DUPLICATE_WINDOW + 1


async def test_a_request_takes_the_other_partitions_of_its_leader_along(
    impl: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = sender(impl)
    producer._identity = ProducerIdentity(1, 0)
    full, along, elsewhere = (TopicPartition("t", i) for i in range(3))
    leaders = {full: 1, along: 1, elsewhere: 2}
    requests: list[tuple[Any, list[tuple[TopicPartition, int]]]] = []

    def leader_of(tp: TopicPartition) -> PartitionInfo:
        return PartitionInfo(tp.topic, tp.partition, leaders[tp], 0, (), (), ())

    monkeypatch.setattr(producer, "_leader_of", leader_of)
    monkeypatch.setattr(producer, "_connection_to", lambda node: f"broker {node}")
    monkeypatch.setattr(
        producer,
        "_produce",
        lambda connection, group: requests.append(
            (connection, [(b.topic_partition, len(b.records)) for b, _epoch in group])
        ),
    )
    queue_records(producer, BATCH_RECORDS, enqueued=10.0, tp=full)
    queue_records(producer, 10, enqueued=10.0, tp=along)
    queue_records(producer, 20, enqueued=10.0, tp=elsewhere)
    wait = producer._send_ready(10.001)
    # the full batch goes, and the records of its leader's other partition with it, long
    # before their linger; the other leader's partition waits for its own
    assert requests == [("broker 1", [(full, BATCH_RECORDS), (along, 10)])]
    assert wait == pytest.approx(LINGER - 0.001)
    assert len(producer._queues[elsewhere].pending) == 20
    # an answer's callback looks at its own partitions, and takes the others of the leader
    # it writes to along as well
    for tp in (full, along):
        done = producer._queues[tp].in_flight.pop(0)
        producer._queues[tp].sequences.acknowledge(done.base_sequence)
    queue_records(producer, BATCH_RECORDS, enqueued=10.01, tp=full)
    queue_records(producer, 5, enqueued=10.01, tp=along)
    requests.clear()
    producer._send_ready(10.011, [full])
    assert requests == [("broker 1", [(full, BATCH_RECORDS), (along, 5)])]
    assert len(producer._queues[elsewhere].pending) == 20
