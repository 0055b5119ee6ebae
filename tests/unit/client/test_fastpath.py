# The producer's per-record work, compiled (lockgate.client._fastpath) and pure
# (lockgate.client._purepath): every rule is checked against both, and hypothesis checks that
# both frame the same bytes as batches.encode_records and hand out the same RecordMetadata.
# Under CI (CI=true) the compiled one must have been built: a missing compiler must not go
# unnoticed behind the fallback.
from __future__ import annotations

import asyncio
import gc
import itertools
import os
import weakref
from types import ModuleType
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.client import _purepath, fastpath
from lockgate.client.batches import RECORD_OVERHEAD_BOUND, encode_records
from lockgate.client.partitioner import DefaultPartitioner, partition_for_key
from lockgate.client.producer import RecordMetadata

COMPILED = fastpath.load(pure=False)
BUILT = COMPILED.IMPLEMENTATION == "compiled"


def implementations() -> list[Any]:
    compiled = pytest.param(
        COMPILED,
        id="compiled",
        marks=pytest.mark.skipif(
            not BUILT and os.environ.get("CI") != "true", reason="the extension is not built"
        ),
    )
    return [compiled, pytest.param(_purepath, id="pure")]


@pytest.fixture(params=implementations())
def impl(request: pytest.FixtureRequest) -> ModuleType:
    module: ModuleType = request.param
    assert request.node.callspec.id.split("-")[0] == module.IMPLEMENTATION
    return module


def test_ci_runs_the_compiled_fast_path() -> None:
    if os.environ.get("CI") != "true":
        pytest.skip("checked under CI, where the build must have compiled the extension")
    assert BUILT, "lockgate.client._fastpath was not built: pip install -e . needs gcc"
    expected = "pure" if os.environ.get(fastpath.PURE_PYTHON_VARIABLE) == "1" else "compiled"
    assert expected == fastpath.IMPLEMENTATION


def test_the_environment_variable_selects_the_pure_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fastpath.PURE_PYTHON_VARIABLE, "1")
    assert fastpath.load() is _purepath
    monkeypatch.setenv(fastpath.PURE_PYTHON_VARIABLE, "0")
    assert fastpath.load() is COMPILED


# -- record queues and runs ---------------------------------------------------------------------

keys_or_values = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(
    st.tuples(
        st.text(st.characters(codec="utf-8"), max_size=8),
        st.one_of(st.none(), st.binary(max_size=20)),
    ),
    max_size=2,
).map(tuple)
records = st.lists(
    st.tuples(
        keys_or_values,
        keys_or_values,
        headers,
        # around a base, sometimes far before or after it (multi-byte timestamp deltas)
        st.one_of(
            st.integers(1_700_000_000_000 - 5_000, 1_700_000_000_000 + 5_000),
            st.integers(0, 2**45),
        ),
    ),
    min_size=1,
    max_size=40,
)


class Waiter:
    """What a run needs of a future (done, set_result), without an event loop."""

    def __init__(self) -> None:
        self.result: Any = None
        self.is_done = False

    def done(self) -> bool:
        return self.is_done

    def set_result(self, result: Any) -> None:
        self.result, self.is_done = result, True


def fill(module: ModuleType, items: list[Any]) -> tuple[Any, list[Waiter]]:
    queue = module.RecordQueue("t", 3)
    waiters = [Waiter() for _ in items]
    for index, ((key, value, record_headers, timestamp), waiter) in enumerate(
        zip(items, waiters, strict=True)
    ):
        size = RECORD_OVERHEAD_BOUND + len(key or b"") + len(value or b"") + index
        queue.append(key, value, record_headers, timestamp, size, waiter, float(index))
    return queue, waiters


@settings(max_examples=150, deadline=None)
@given(
    items=records,
    max_bytes=st.integers(1, 4_000),
    limit=st.one_of(st.none(), st.integers(1, 50)),
    base_offset=st.integers(-1, 2**40),
    append_time=st.one_of(st.just(-1), st.integers(0, 2**41)),
)
def test_both_take_frame_and_complete_alike(
    items: list[Any], max_bytes: int, limit: int | None, base_offset: int, append_time: int
) -> None:
    outcomes = []
    for module in (COMPILED, _purepath):
        queue, waiters = fill(module, items)
        run = queue.take(max_bytes, limit)
        taken = len(run)
        assert 1 <= taken <= len(items)
        assert len(queue) == len(items) - taken
        assert run.size + queue.size == sum(
            RECORD_OVERHEAD_BOUND + len(k or b"") + len(v or b"") + i
            for i, (k, v, _h, _t) in enumerate(items)
        )
        assert run.first_enqueued == 0.0
        assert run.records() == [tuple(item) for item in items[:taken]]
        encoded, base, highest = run.frame()
        assert encoded == encode_records(items[:taken], items[0][3])
        assert (base, highest) == (items[0][3], max(item[3] for item in items[:taken]))
        run.complete(RecordMetadata, "t", 3, base_offset, append_time)
        results = [w.result for w in waiters[:taken]]
        assert all(type(r) is RecordMetadata for r in results)
        assert not any(w.is_done for w in waiters[taken:])
        outcomes.append((taken, encoded, results))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize(
    ("max_bytes", "limit", "expected"),
    [
        (10**9, None, 5),  # everything
        (10**9, 3, 3),  # the sequence window
        (2 * 50 + 1, None, 2),  # the batch size: each record is 50 bytes here
        (10, None, 1),  # at least one record, however large
        (10**9, 1, 1),
    ],
)
def test_take_cuts_the_longest_prefix_within_both_bounds(
    impl: ModuleType, max_bytes: int, limit: int | None, expected: int
) -> None:
    queue = impl.RecordQueue("t", 0)
    for index in range(5):
        queue.append(b"k", b"v", (), 1_000 + index, 50, Waiter(), float(index))
    run = queue.take(max_bytes, limit)
    assert (len(run), run.size, queue.size) == (expected, 50 * expected, 50 * (5 - expected))
    assert [r[3] for r in run.records()] == [1_000 + i for i in range(expected)]
    assert queue.first_enqueued == float(expected) if expected < 5 else len(queue) == 0


def test_expired_and_leftover_records_leave_in_order(impl: ModuleType) -> None:
    queue = impl.RecordQueue("t", 0)
    for index in range(4):
        queue.append(None, b"v", (), index, 40, Waiter(), float(index))
    assert queue.take_expired(-1.0) is None
    expired = queue.take_expired(1.0)
    assert [r[3] for r in expired.records()] == [0, 1] and expired.size == 80
    rest = queue.take_all()
    assert [r[3] for r in rest.records()] == [2, 3]
    assert (len(queue), queue.size, queue.take_all()) == (0, 0, None)
    with pytest.raises(IndexError):
        queue.take(100, None)


def test_queues_refuse_what_they_cannot_frame(impl: ModuleType) -> None:
    queue = impl.RecordQueue("t", 0)
    with pytest.raises(TypeError):
        queue.append("text", b"v", (), 0, 40, Waiter(), 0.0)
    with pytest.raises(TypeError):
        queue.append(b"k", bytearray(b"v"), (), 0, 40, Waiter(), 0.0)
    assert len(queue) == 0


class Group(NamedTuple):
    future: Any


async def test_completion_fills_groups_in_order_and_skips_done_futures(impl: ModuleType) -> None:
    loop = asyncio.get_running_loop()
    group_future: asyncio.Future[list[RecordMetadata]] = loop.create_future()
    group = impl.RecordGroup(group_future, 3)
    own = loop.create_future()
    cancelled = loop.create_future()
    cancelled.cancel()
    queue = impl.RecordQueue("t", 1)
    queue.append(b"a", b"1", (), 10, 40, group, 0.0, 2)
    queue.append(b"b", b"2", (), 11, 40, own, 0.0)
    queue.append(b"c", b"3", (), 12, 40, group, 0.0, 0)
    queue.append(b"d", b"4", (), 13, 40, cancelled, 0.0)
    first = queue.take(10**9, None)
    assert first.futures() == [group_future, own, group_future, cancelled]
    first.complete(RecordMetadata, "t", 1, 100, -1)
    assert own.result() == RecordMetadata("t", 1, 101, 11)
    assert not group_future.done() and group.remaining == 1
    queue.append(b"e", b"5", (), 14, 40, group, 0.0, 1)
    queue.take(10**9, None).complete(RecordMetadata, "t", 1, -1, 999)  # acks=0, LogAppendTime
    assert group_future.result() == [
        RecordMetadata("t", 1, 102, 12),
        RecordMetadata("t", 1, -1, 999),
        RecordMetadata("t", 1, 100, 10),
    ]
    group_failed: asyncio.Future[list[RecordMetadata]] = loop.create_future()
    impl.RecordGroup(group_failed, 2).fail(ValueError("x"))
    with pytest.raises(ValueError):
        group_failed.result()


# -- the accumulator: send()'s and send_batch()'s per-record work -------------------------------


class Cluster:
    def __init__(self) -> None:
        self.metadata = object()


class Setup(NamedTuple):
    accumulator: Any
    cluster: Cluster
    queues: dict[tuple[str, int], Any]
    wakeups: list[int]
    partitioner: DefaultPartitioner


def accumulate(
    module: ModuleType,
    *,
    batch_size: int = 1_000,
    max_request_size: int = 500,
    buffer_memory: int = 10_000,
    txn_check: Any = None,
) -> Setup:
    cluster = Cluster()
    queues: dict[tuple[str, int], Any] = {}
    wakeups: list[int] = []

    def new_queue(topic: str, partition: int) -> Any:
        queue = queues[topic, partition] = module.RecordQueue(topic, partition)
        return queue

    accumulator = module.Accumulator(
        cluster,
        new_queue,
        lambda: wakeups.append(1),
        txn_check,
        batch_size,
        max_request_size,
        buffer_memory,
        4,
    )
    partitioner = DefaultPartitioner()
    accumulator.register("t", cluster.metadata, 3, partitioner.counter("t"), None)
    return Setup(accumulator, cluster, queues, wakeups, partitioner)


async def test_append_queues_the_common_record(impl: ModuleType) -> None:
    setup = accumulate(impl)
    accumulator = setup.accumulator
    assert accumulator.append("t", b"v", b"k", None, (), 5) is None  # not started
    accumulator.start(asyncio.get_running_loop())
    future = accumulator.append("t", b"value", b"foobar", None, (), 5)
    assert isinstance(future, asyncio.Future) and not future.done()
    chosen = partition_for_key(b"foobar", 3)
    run = setup.queues["t", chosen].take(10**9, None)
    assert run.records() == [(b"foobar", b"value", (), 5)]
    assert run.futures() == [future]
    assert accumulator.buffered_bytes == RECORD_OVERHEAD_BOUND + 11 == run.size
    assert setup.wakeups == [1]  # the partition's first record wakes the sender
    assert accumulator.unfinished == [future]
    # no key: the partitioner's own round robin, shared with the general path
    before = setup.partitioner("t", None, 3)
    accumulator.append("t", None, None, None, (), 6)
    assert len(setup.queues["t", (before + 1) % 3]) == 1
    # an explicit partition, and a timestamp taken from the clock when none is given
    accumulator.append("t", b"v", None, 2, [], None)
    [record] = setup.queues["t", 2].take_all().records()
    assert record[3] > 1_700_000_000_000


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("u", b"v", None, None, (), 1), "a topic not registered"),
        (("t", b"v", None, None, (("h", b"1"),), 1), "headers"),
        (("t", bytearray(b"v"), None, None, (), 1), "not bytes"),
        (("t", b"v", "key", None, (), 1), "a str key"),
        (("t", b"v" * 500, None, None, (), 1), "larger than max_request_size"),
        (("t", b"v", None, 3, (), 1), "no such partition"),
        (("t", b"v", None, -1, (), 1), "no such partition"),
        (("t", b"v", None, True, (), 1), "a bool partition"),
        (("t", b"v", None, None, (), 1.5), "a float timestamp"),
        (("t", b"v", None, None, (), 2**63), "a timestamp past 64 bits"),
    ],
)
async def test_append_leaves_everything_else_to_the_general_path(
    impl: ModuleType, args: tuple[Any, ...], why: str
) -> None:
    setup = accumulate(impl)
    setup.accumulator.start(asyncio.get_running_loop())
    counter_before = setup.partitioner("t", None, 3)
    assert setup.accumulator.append(*args) is None, why
    assert setup.accumulator.buffered_bytes == 0 and not setup.queues
    assert setup.accumulator.unfinished == []
    assert setup.partitioner("t", None, 3) == (counter_before + 1) % 3  # the counter kept still


async def test_append_falls_back_once_the_metadata_changes_or_the_buffer_is_full(
    impl: ModuleType,
) -> None:
    setup = accumulate(impl, buffer_memory=100)
    accumulator = setup.accumulator
    accumulator.start(asyncio.get_running_loop())
    assert accumulator.append("t", b"v" * 50, None, 0, (), 1) is not None
    assert accumulator.append("t", b"v" * 50, None, 0, (), 1) is None  # 87 + 87 > 100
    accumulator.buffered_bytes = 0
    setup.cluster.metadata = object()  # refreshed: the producer must look again
    assert accumulator.append("t", b"v", None, 0, (), 1) is None
    accumulator.register("t", setup.cluster.metadata, 3, setup.partitioner.counter("t"), None)
    assert accumulator.append("t", b"v", None, 0, (), 1) is not None
    assert len(setup.queues["t", 0]) == 2  # the queue survived the registration


async def test_append_raises_outside_a_transaction(impl: ModuleType) -> None:
    def refuse() -> None:
        raise RuntimeError("not in a transaction")

    setup = accumulate(impl, txn_check=refuse)
    setup.accumulator.start(asyncio.get_running_loop())
    with pytest.raises(RuntimeError):
        setup.accumulator.append("t", b"v", None, 0, (), 1)
    assert not setup.queues


async def test_a_full_batch_asks_the_caller_to_yield(impl: ModuleType) -> None:
    setup = accumulate(impl, batch_size=100)
    accumulator = setup.accumulator
    accumulator.start(asyncio.get_running_loop())
    accumulator.append("t", b"v" * 20, None, 1, (), 1)  # 57 bytes
    assert not accumulator.filled and setup.wakeups == [1]
    accumulator.append("t", b"v" * 20, None, 1, (), 1)  # 114: a batch is full
    assert accumulator.filled and setup.wakeups == [1, 1]


async def test_a_batch_full_in_records_wakes_the_sender_and_asks_for_a_yield(
    impl: ModuleType,
) -> None:
    setup = accumulate(impl, batch_size=10**6, max_request_size=10**6, buffer_memory=10**9)
    accumulator = setup.accumulator
    accumulator.start(asyncio.get_running_loop())
    accumulator.batch_records = 3
    for expected in (False, False, True):
        accumulator.append("t", b"v", None, 0, (), 1)
        assert accumulator.filled is expected
    assert setup.wakeups == [1, 1]  # the first record, then the full batch
    accumulator.filled = False
    future = asyncio.get_running_loop().create_future()
    accumulator.append_group("t", 0, [(None, b"v")] * 2, 1, impl.RecordGroup(future, 2))
    assert not accumulator.filled  # 5 in the queue
    accumulator.append_group("t", 0, [(None, b"v")] * 2, 1, impl.RecordGroup(future, 2))
    assert accumulator.filled and len(setup.wakeups) == 3  # 7: the second batch filled


async def test_every_yield_every_records_the_caller_is_asked_to_yield(impl: ModuleType) -> None:
    setup = accumulate(impl, batch_size=10**6, max_request_size=10**6, buffer_memory=10**9)
    accumulator = setup.accumulator
    accumulator.start(asyncio.get_running_loop())
    accumulator.append("t", b"v", None, 0, (), 1)
    assert not accumulator.filled  # off by default: only a full batch asks
    accumulator.yield_every = 3
    for expected in (False, False, True):  # counted from when it was set
        accumulator.append("t", b"v", None, 0, (), 1)
        assert accumulator.filled is expected
    accumulator.filled = False
    future = asyncio.get_running_loop().create_future()
    # send_batch()'s records count one by one: four of them pass the next three
    accumulator.append_group("t", None, [(None, b"v")] * 4, 1, impl.RecordGroup(future, 4))
    assert accumulator.filled
    accumulator.filled = False
    accumulator.append("t", b"v", None, 0, (), 1)  # the 2nd since the last yield
    assert not accumulator.filled
    accumulator.append("t", b"v", None, 0, (), 1)
    assert accumulator.filled


async def test_unfinished_futures_are_pruned_as_they_grow(impl: ModuleType) -> None:
    setup = accumulate(impl)
    accumulator = setup.accumulator
    accumulator.start(asyncio.get_running_loop())
    unfinished = accumulator.unfinished
    futures = [accumulator.append("t", b"v", None, 0, (), 1) for _ in range(3)]
    for future in futures:
        future.cancel()
    last = accumulator.append("t", b"v", None, 0, (), 1)  # the 4th: prune_at
    assert accumulator.unfinished == [last]
    assert accumulator.prune_at == 4  # never below where it started
    # in place: the long-lived list stays (a new one would be young for the collector)
    assert accumulator.unfinished is unfinished
    more = [accumulator.append("t", b"v", None, 0, (), 1) for _ in range(4)]
    assert accumulator.unfinished == [last, *more]  # pruned at 4 again: none was done
    assert accumulator.prune_at == 8  # twice what was kept
    last.cancel()
    accumulator.prune()  # flush() asks too
    assert accumulator.unfinished == more and accumulator.unfinished is unfinished


async def test_append_group_places_records_as_one_append_each_would(impl: ModuleType) -> None:
    loop = asyncio.get_running_loop()
    one_by_one, at_once = accumulate(impl), accumulate(impl)
    for setup in (one_by_one, at_once):
        setup.accumulator.start(loop)
    items: list[tuple[bytes | None, bytes | None]] = [
        (b"foobar", b"1"),
        (None, b"2"),
        (b"abc", None),
        (None, b"4"),
        (b"foobar", b"5"),
    ]
    for key, value in items:
        one_by_one.accumulator.append("t", value, key, None, (), 7)
    assert at_once.accumulator.measure(items) == (5 * RECORD_OVERHEAD_BOUND + 19, 43)
    future: asyncio.Future[list[RecordMetadata]] = loop.create_future()
    group = impl.RecordGroup(future, len(items))
    at_once.accumulator.append_group("t", None, items, 7, group)
    assert set(one_by_one.queues) == set(at_once.queues)
    for where, queue in at_once.queues.items():
        run = queue.take_all()
        assert run.records() == one_by_one.queues[where].take_all().records()
        assert set(run.futures()) == {future}
        run.complete(RecordMetadata, "t", where[1], 0, -1)
    assert [m.partition for m in future.result()] == [
        partition_for_key(b"foobar", 3),
        0,
        partition_for_key(b"abc", 3),
        1,
        partition_for_key(b"foobar", 3),
    ]
    assert at_once.accumulator.buffered_bytes == one_by_one.accumulator.buffered_bytes
    fixed = accumulate(impl)
    fixed.accumulator.start(loop)
    fixed.accumulator.append_group("t", 2, items, 7, impl.RecordGroup(future, len(items)))
    assert list(fixed.queues) == [("t", 2)] and len(fixed.queues["t", 2]) == 5


@pytest.mark.parametrize(
    "items", [[(b"k", "v")], [(b"k", b"v", b"x")], [[b"k", b"v"]], [(b"k", memoryview(b"v"))]]
)
def test_measure_refuses_anything_but_pairs_of_bytes(impl: ModuleType, items: Any) -> None:
    setup = accumulate(impl)
    with pytest.raises(TypeError):
        setup.accumulator.measure(items)


async def test_a_custom_partitioner_is_asked(impl: ModuleType) -> None:
    setup = accumulate(impl)
    asked: list[tuple[str, bytes | None, int]] = []

    def partitioner(topic: str, key: bytes | None, count: int) -> int:
        asked.append((topic, key, count))
        return count - 1

    setup.accumulator.register("t", setup.cluster.metadata, 3, itertools.count(), partitioner)
    setup.accumulator.start(asyncio.get_running_loop())
    setup.accumulator.append("t", b"v", b"k", None, (), 1)
    assert asked == [("t", b"k", 3)] and len(setup.queues["t", 2]) == 1
    assert setup.accumulator.partition_of("t", b"k") == 2


@pytest.mark.skipif(not BUILT, reason="the extension is not built")
async def test_compiled_futures_stay_out_of_the_collector_unless_they_fail() -> None:
    setup = accumulate(COMPILED)
    setup.accumulator.start(asyncio.get_running_loop())
    delivered = setup.accumulator.append("t", b"v", None, 0, (), 1)
    failed = setup.accumulator.append("t", b"v", None, 1, (), 1)
    assert not gc.is_tracked(delivered)  # held by its queue: nothing for the collector to find
    run = setup.queues["t", 0].take_all()
    run.complete(RecordMetadata, "t", 0, 5, -1)
    metadata = delivered.result()
    assert not gc.is_tracked(metadata)  # a str and ints: in no cycle
    del run
    assert not gc.is_tracked(delivered)  # done with a result: no callbacks, no cycle
    # a record failed from Python: its exception (and traceback) may form cycles
    leftovers = setup.queues["t", 1].take_all()
    for future in leftovers.futures():
        future.set_exception(ValueError("failed"))
    del leftovers
    assert gc.is_tracked(failed)
    with pytest.raises(ValueError):
        failed.result()


@pytest.mark.skipif(not BUILT, reason="the extension is not built")
async def test_compiled_futures_are_built_directly_and_work_as_any_future() -> None:
    loop = asyncio.get_running_loop()
    setup = accumulate(COMPILED)
    setup.accumulator.start(loop)
    # outside debug mode this Python's Future is built without its constructor
    assert setup.accumulator.direct_futures
    future = setup.accumulator.append("t", b"v", None, 0, (), 1)
    assert type(future) is asyncio.Future and future.get_loop() is loop
    assert not future.done() and not future.cancelled()
    seen: list[Any] = []
    future.add_done_callback(seen.append)
    setup.queues["t", 0].take_all().complete(RecordMetadata, "t", 0, 7, -1)
    assert await future == RecordMetadata("t", 0, 7, 1)
    await asyncio.sleep(0)
    assert seen == [future]
    cancelled = setup.accumulator.append("t", b"v", None, 0, (), 1)
    assert cancelled.cancel() and cancelled.cancelled()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    # in debug mode the constructor records where each future was made: it is used then
    loop.set_debug(True)
    try:
        debugging = accumulate(COMPILED)
        debugging.accumulator.start(loop)
        assert not debugging.accumulator.direct_futures
        built = debugging.accumulator.append("t", b"v", None, 0, (), 1)
        assert built is not None and built._source_traceback
    finally:
        loop.set_debug(False)


def test_a_queue_refuses_the_slots_it_keeps_for_itself(impl: ModuleType) -> None:
    queue = impl.RecordQueue("t", 0)
    with pytest.raises(ValueError):
        queue.append(b"k", b"v", (), 1, 40, None, 0.0, -3)
    assert len(queue) == 0


def test_the_collector_breaks_cycles_through_queued_records(impl: ModuleType) -> None:
    class Holder(Waiter):
        queue: Any = None

    queue = impl.RecordQueue("t", 0)
    holder = Holder()
    holder.queue = queue  # the queue holds the holder as a record's waiter: a cycle
    queue.append(b"k", b"v", (), 1, 40, holder, 0.0)
    reference = weakref.ref(holder)
    del queue, holder
    gc.collect()
    assert reference() is None


sends = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=12)),  # key
        st.one_of(st.none(), st.binary(max_size=40)),  # value
        st.one_of(st.none(), st.integers(-1, 3)),  # partition (3 and -1: the general path)
        st.integers(0, 2**44),  # timestamp
        st.booleans(),  # one send() or part of a send_batch() call
    ),
    max_size=40,
)


@pytest.mark.skipif(not BUILT, reason="the extension is not built")
@settings(max_examples=100, deadline=None)
@given(calls=sends)
def test_both_accumulators_queue_the_same_records(calls: list[Any]) -> None:
    async def queue_all(module: ModuleType) -> tuple[Any, ...]:
        setup = accumulate(module, batch_size=100, max_request_size=10**6, buffer_memory=10**9)
        setup.accumulator.start(asyncio.get_running_loop())
        setup.accumulator.yield_every = 7
        setup.accumulator.batch_records = 5
        taken: list[Any] = []
        group: list[tuple[bytes | None, bytes | None]] = []
        for key, value, partition, timestamp, batched in calls:
            if batched:
                group.append((key, value))
                continue
            future = setup.accumulator.append("t", value, key, partition, (), timestamp)
            taken.append(future is None)
        if group:
            future = asyncio.get_running_loop().create_future()
            setup.accumulator.append_group(
                "t", None, group, 7, module.RecordGroup(future, len(group))
            )
        queued = {
            where: queue.take_all().records() for where, queue in sorted(setup.queues.items())
        }
        return taken, queued, setup.accumulator.buffered_bytes, setup.accumulator.filled

    compiled, pure = (asyncio.run(queue_all(module)) for module in (COMPILED, _purepath))
    assert compiled == pure
