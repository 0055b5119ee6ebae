"""CoordinatorRuntime alone, with a shard that records what the runtime asks of it: a partition
is NOT_COORDINATOR until it is coordinated here, COORDINATOR_LOAD_IN_PROGRESS until its replay
ends, served after; the shard replays every record in order and hears of the load only once the
partition is served; giving a partition up (or taking it in a newer epoch) makes the shard
forget its keys; appends go to the key's partition only while it is coordinated here. The
coordinators' own behaviour on top of it: test_txn_ownership.py, test_group_ownership.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from lockgate.cluster.local import LocalMetadataStore
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.runtime import (
    HELD_MS,
    CoordinatorRuntime,
    Deadline,
    Loaded,
    LoopTimers,
    Replay,
    Voice,
    pause,
)
from lockgate.coordinator.txn.log import partition_for
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import (
    BatchHeader,
    Decoded,
    build_batch,
    iter_records,
    validate_produced_batch,
)
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.directory import TopicManager
from tests.unit.coordinator.group.support import wait_until

TOPIC = "__internal"
PARTITIONS = 2
NOW = 1_700_000_000_000
log = logging.getLogger("tests.coordinator.runtime")


def key_in(index: int) -> str:
    return next(f"key-{n}" for n in range(100) if partition_for(f"key-{n}", PARTITIONS) == index)


class RecordingShard:
    """Holds the keys it replayed, by partition; records what the runtime asked."""

    def __init__(self) -> None:
        self.runtime: CoordinatorRuntime | None = None
        self.keys: dict[int, list[bytes]] = {}
        self.calls: list[tuple[str, int]] = []
        self.served_when_loaded: list[ErrorCode] = []
        self.resumes: int | None = None

    def size(self) -> int:
        return sum(len(keys) for keys in self.keys.values())

    def attach(self, index: int) -> None:
        self.calls.append(("attach", index))

    def replay(self, index: int) -> Replay:
        self.calls.append(("replay", index))
        self.keys[index] = []

        def visit(header: BatchHeader, data: bytes, records: Decoded) -> None:
            # decoded once, for the shard and the image (control batches: not at all)
            assert records == ([] if header.is_control else iter_records(data))
            self.keys[index].extend(k for _, _, k, _ in records if k is not None)

        def loaded() -> Loaded:
            assert self.runtime is not None
            self.served_when_loaded.append(self.runtime.serving(key_in(index)))
            return Loaded(len(self.keys[index]), self.resumes)

        return Replay(visit, loaded)

    def unload(self, index: int) -> int:
        self.calls.append(("unload", index))
        return len(self.keys.pop(index, []))


class Harness:
    def __init__(self, shard: RecordingShard) -> None:
        engine = MemoryEngine()
        self.topics = TopicManager(
            engine, LocalMetadataStore(engine, 0), BrokerConfig({}), lambda: NOW
        )
        self.writes: list[tuple[Partition, bytes]] = []
        self.load_times: list[float] = []
        self.runtime = CoordinatorRuntime(
            TOPIC,
            self.topics,
            PARTITIONS,
            shard=shard,
            write=self.write,
            clock=lambda: NOW,
            on_loaded=self.load_times.append,
            snapshots=None,
            timers=LoopTimers(),
            voice=Voice(log, "test", "keys", logging.DEBUG, logging.INFO),
        )
        shard.runtime = self.runtime

    def write(self, partition: Partition, batch: bytes) -> asyncio.Future[None]:
        self.writes.append((partition, batch))
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    def fill(self, index: int, count: int) -> None:
        partition = self.topics.get(TOPIC, index)
        assert partition is not None
        for n in range(count):
            batch = build_batch([(f"{index}-{n}".encode(), b"v")], timestamp_ms=NOW)
            partition.append(bytearray(batch), validate_produced_batch(batch), NOW, internal=True)


@pytest.fixture
def shard() -> RecordingShard:
    return RecordingShard()


async def test_a_single_node_coordinates_every_partition_and_loads_them_in_order(
    shard: RecordingShard, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness(shard)
    runtime = harness.runtime
    assert runtime.serving(key_in(0)) == ErrorCode.not_coordinator
    runtime.ensure_topic()
    assert TOPIC in harness.topics.topics and runtime.owned == {0: 0, 1: 0}
    assert runtime.serving(key_in(0)) == ErrorCode.coordinator_load_in_progress
    assert not runtime.loaded
    harness.fill(0, 3)
    harness.fill(1, 2)
    shard.resumes = 1
    with caplog.at_level(logging.DEBUG, logger=log.name):
        await runtime.load()
    assert runtime.loaded and runtime.serving(key_in(1)) == ErrorCode.none
    assert shard.calls == [("attach", 0), ("attach", 1), ("replay", 0), ("replay", 1)]
    assert shard.keys == {0: [b"0-0", b"0-1", b"0-2"], 1: [b"1-0", b"1-1"]}
    assert shard.served_when_loaded == [ErrorCode.none, ErrorCode.none]
    assert runtime.replayed_batches == 5 and len(harness.load_times) == 2
    levels = [(r.levelno, r.getMessage().split(" in ")[0]) for r in caplog.records]
    assert levels[:2] == [
        (logging.DEBUG, f"{TOPIC}-0 loaded"),
        (logging.DEBUG, f"{TOPIC}-1 loaded"),
    ]
    assert caplog.records[0].getMessage().endswith("; resuming 1")
    summary = caplog.records[2].getMessage()
    assert summary.startswith("test coordinator loaded 5 keys from 0 snapshots and 5 batches")
    assert summary.endswith("; resuming 2")


async def test_a_shard_that_resumes_nothing_says_nothing_of_it(
    shard: RecordingShard, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = Harness(shard).runtime
    runtime.ensure_topic()
    with caplog.at_level(logging.DEBUG, logger=log.name):
        await runtime.load()
    assert caplog.records and not any("resuming" in r.getMessage() for r in caplog.records)


async def test_leadership_loads_in_the_background_and_giving_up_forgets(
    shard: RecordingShard, caplog: pytest.LogCaptureFixture
) -> None:
    harness = Harness(shard)
    runtime = harness.runtime
    harness.topics.create(TOPIC, PARTITIONS, 1, {}, internal=True)
    harness.fill(0, 4)
    with caplog.at_level(logging.INFO, logger=log.name):
        runtime.on_leadership(0, 7)
        assert runtime.owned == {0: 7} and runtime.epoch(key_in(0)) == 7
        assert runtime.serving(key_in(0)) == ErrorCode.coordinator_load_in_progress
        assert runtime.serving(key_in(1)) == ErrorCode.not_coordinator
        await wait_until(lambda: runtime.loaded)
        assert runtime.serving(key_in(0)) == ErrorCode.none
        assert "loaded in epoch 7: 4 keys from no snapshot and 4 batches" in caplog.text
        runtime.on_leadership(0, None)
    assert runtime.serving(key_in(0)) == ErrorCode.not_coordinator
    assert runtime.owned == {} and runtime.epoch(key_in(0)) == -1
    assert shard.calls == [("unload", 0), ("attach", 0), ("replay", 0), ("unload", 0)]
    assert f"no longer coordinating {TOPIC}-0: 4 keys unloaded" in caplog.text


async def test_a_newer_epoch_cancels_the_load_and_starts_again(shard: RecordingShard) -> None:
    harness = Harness(shard)
    runtime = harness.runtime
    harness.topics.create(TOPIC, PARTITIONS, 1, {}, internal=True)
    harness.fill(0, 2_000)  # long enough for the replay to yield to the loop
    runtime.on_leadership(0, 1)
    for _ in range(3):
        await asyncio.sleep(0)
    assert runtime.serving(key_in(0)) == ErrorCode.coordinator_load_in_progress
    runtime.on_leadership(0, 2)
    await wait_until(lambda: runtime.loaded)
    assert runtime.owned == {0: 2}
    assert shard.calls.count(("replay", 0)) == 2 and shard.calls[-3:] == [
        ("unload", 0),
        ("attach", 0),
        ("replay", 0),
    ]
    assert len(shard.keys[0]) == 2_000 and shard.served_when_loaded == [ErrorCode.none]


async def test_appends_go_to_the_partition_of_the_key_while_coordinated_here(
    shard: RecordingShard,
) -> None:
    harness = Harness(shard)
    runtime = harness.runtime
    runtime.ensure_topic()
    batch = build_batch([(b"k", b"v")], timestamp_ms=NOW)
    await runtime.append(key_in(1), batch)
    assert [(p.index, b) for p, b in harness.writes] == [(1, batch)]
    runtime.unload(1)
    with pytest.raises(KafkaProtocolError) as refused:
        runtime.append(key_in(1), batch)
    assert refused.value.code == ErrorCode.not_coordinator and len(harness.writes) == 1


async def test_loop_timers_arm_and_cancel_on_the_running_loop() -> None:
    timers = LoopTimers()
    fired: list[str] = []
    timers.call_soon(fired.append, "soon")
    cancelled = timers.call_later(0.0, fired.append, "cancelled")
    timers.call_later(0.0, fired.append, "later")
    cancelled.cancel()
    assert cancelled.cancelled()
    await asyncio.sleep(0.01)
    assert fired == ["soon", "later"]


class HeldTimers:
    """A timers port whose timers fire only when the test says so."""

    def __init__(self) -> None:
        self.armed: list[tuple[float, asyncio.TimerHandle, Callable[[], object]]] = []

    def call_soon(self, callback: Callable[..., object], *args: Any) -> asyncio.Handle:
        return asyncio.get_running_loop().call_soon(callback, *args)

    def call_later(
        self, delay_s: float, callback: Callable[..., object], *args: Any
    ) -> asyncio.TimerHandle:
        handle = asyncio.get_running_loop().call_later(3600, lambda: None)  # (its cancel)
        self.armed.append((delay_s, handle, lambda: callback(*args)))
        return handle

    def fire(self) -> None:
        _delay, handle, run = self.armed.pop(0)
        if not handle.cancelled():
            handle.cancel()
            run()


async def test_a_pause_waits_on_the_timers_port_and_disarms_when_cancelled() -> None:
    timers = HeldTimers()
    paused = asyncio.ensure_future(pause(timers, 7.0))
    await asyncio.sleep(0)
    assert [delay for delay, _, _ in timers.armed] == [7.0] and not paused.done()
    timers.fire()
    await asyncio.wait_for(paused, 1)
    cancelled = asyncio.ensure_future(pause(timers, 3.0))
    await asyncio.sleep(0)
    ((_delay, handle, _run),) = timers.armed
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert handle.cancelled()  # nothing left armed behind it


async def test_a_deadline_fired_late_waits_as_long_again_for_what_arrived_meanwhile() -> None:
    timers, now = HeldTimers(), [1_000]
    expired: list[str] = []
    on_time = Deadline(timers, lambda: now[0], 1.5, expired.append, "on time")
    now[0] += 1_500 + HELD_MS  # fired within the margin: it expires
    timers.fire()
    assert expired == ["on time"] and on_time.late_ms == HELD_MS

    held = Deadline(timers, lambda: now[0], 1.5, expired.append, "held")
    now[0] += 1_500 + 400  # the loop was held: 400 ms late, it waits 400 ms more, once
    timers.fire()
    assert expired == ["on time"] and [delay for delay, _, _ in timers.armed] == [0.4]
    now[0] += 400
    timers.fire()
    assert expired == ["on time", "held"] and held.late_ms == 400

    beaten = Deadline(timers, lambda: now[0], 1.5, expired.append, "beaten")
    now[0] += 1_500 + 400
    timers.fire()
    beaten.cancel()  # a heartbeat read in its grace rearms the session instead
    assert beaten.cancelled()
    timers.fire()
    assert expired == ["on time", "held"]
