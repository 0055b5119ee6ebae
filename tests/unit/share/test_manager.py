"""The share-partition manager (share/manager.py) around a fake persister, fake timers and a
fake clock: loading and the auto offset reset, writes after changes, an acknowledgement
refused when its write fails, fencing, lock expiry through the timers port, and the end of
sessions."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from lockgate.config.group_configs import open_group_configs
from lockgate.config.log import LogConfig
from lockgate.config.properties import BrokerConfig
from lockgate.coordinator.share.records import StateBatch
from lockgate.coordinator.share.results import ReadResult, StateResult, SummaryResult
from lockgate.log.partition import Partition
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import build_batch, validate_produced_batch
from lockgate.share.manager import PersistError, ShareManager, client_error
from lockgate.share.partition import ACCEPT, AckBatch, AcquiredRange, RecordState
from lockgate.storage.memory import MemoryEngine

TOPIC_ID = uuid.uuid4()
KEY = ("g", TOPIC_ID, 0)


@dataclass
class FakePersister:
    start_offset: int = 0
    batches: tuple[StateBatch, ...] = ()
    read_error: ErrorCode = ErrorCode.none
    write_error: ErrorCode = ErrorCode.none
    writes: list[tuple[int, int, tuple[StateBatch, ...]]] = field(default_factory=list)

    async def initialize(self, *args: Any) -> StateResult:
        return StateResult()

    async def read(self, group: str, topic: uuid.UUID, partition: int, epoch: int) -> ReadResult:
        if self.read_error:
            return ReadResult(error=self.read_error)
        return ReadResult(state_epoch=4, start_offset=self.start_offset, state_batches=self.batches)

    async def write(
        self, group: str, topic: uuid.UUID, partition: int, state_epoch: int,
        leader_epoch: int, start_offset: int, delivery_complete_count: int,
        state_batches: Sequence[StateBatch],
    ) -> StateResult:  # fmt: skip
        if self.write_error:
            return StateResult(error=self.write_error)
        assert state_epoch == 4
        self.writes.append((start_offset, delivery_complete_count, tuple(state_batches)))
        return StateResult()

    async def delete(self, *args: Any) -> StateResult:
        return StateResult()

    async def read_summary(self, *args: Any) -> SummaryResult:
        return SummaryResult()


@dataclass
class FakeTimer:
    at_s: float
    callback: Callable[..., object]
    args: tuple[Any, ...]
    cancelled_: bool = False

    def cancel(self) -> None:
        self.cancelled_ = True

    def cancelled(self) -> bool:
        return self.cancelled_


@dataclass
class FakeTimers:
    armed: list[FakeTimer] = field(default_factory=list)

    def call_soon(self, callback: Callable[..., object], *args: Any) -> FakeTimer:
        return self.call_later(0, callback, *args)

    def call_later(self, delay_s: float, callback: Callable[..., object], *args: Any) -> FakeTimer:
        timer = FakeTimer(delay_s, callback, args)
        self.armed.append(timer)
        return timer

    def live(self) -> list[FakeTimer]:
        return [t for t in self.armed if not t.cancelled_]

    def fire(self) -> None:
        """Runs the one armed timer (as the loop would: once)."""
        (timer,) = self.live()
        self.armed.remove(timer)
        timer.callback(*timer.args)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@dataclass
class Setup:
    manager: ShareManager
    persister: FakePersister
    timers: FakeTimers
    clock: Clock
    log: Partition


async def make(
    persister: FakePersister | None = None, overrides: dict[str, str] | None = None
) -> Setup:
    engine = MemoryEngine()
    log = Partition(engine, "t", 0, TOPIC_ID, LogConfig)
    log.load(0)
    for count in (2, 3):
        batch = build_batch([(None, b"x")] * count, timestamp_ms=1000 * count)
        log.append(bytearray(batch), validate_produced_batch(batch), 0)
    log.advance_high_watermark(log.log_end_offset)
    config = BrokerConfig()
    group_configs = open_group_configs(config, engine, "")
    group_configs.groups = {"g": overrides} if overrides else {}
    persister = persister or FakePersister()
    timers = FakeTimers()
    clock = Clock()
    manager = ShareManager(config, group_configs, persister, timers, clock)
    return Setup(manager, persister, timers, clock, log)


async def test_load_fetch_and_acknowledge_write() -> None:
    s = await make()
    share = await s.manager.load(KEY, s.log)
    assert share.start_offset == 0
    fetched = s.manager.fetch(KEY, "m", s.log, 1, 1 << 20)
    assert fetched.acquired == (AcquiredRange(0, 1, 1),)
    assert s.persister.writes == []  # acquisitions are never written
    await s.manager.acknowledge(KEY, "m", [AckBatch(0, 1, (ACCEPT,))])
    assert s.persister.writes == [(2, 0, (StateBatch(0, 1, 2, 1),))]
    assert share.start_offset == 2


async def test_failed_write_refuses_the_acknowledgement() -> None:
    s = await make()
    await s.manager.load(KEY, s.log)
    s.manager.fetch(KEY, "m", s.log, 1, 1 << 20)
    s.persister.write_error = ErrorCode.coordinator_load_in_progress
    with pytest.raises(PersistError) as raised:
        await s.manager.acknowledge(KEY, "m", [AckBatch(0, 1, (ACCEPT,))])
    assert raised.value.code == ErrorCode.coordinator_not_available
    share = s.manager.cached(KEY)
    assert share is not None
    assert share.state_of(0).state == RecordState.ACQUIRED  # type: ignore[union-attr]


async def test_fenced_write_drops_the_share_partition() -> None:
    s = await make()
    await s.manager.load(KEY, s.log)
    s.manager.fetch(KEY, "m", s.log, 1, 1 << 20)
    s.persister.write_error = ErrorCode.fenced_state_epoch
    with pytest.raises(PersistError) as raised:
        await s.manager.acknowledge(KEY, "m", [AckBatch(0, 1, (ACCEPT,))])
    assert raised.value.code == ErrorCode.not_leader_or_follower
    assert s.manager.cached(KEY) is None


def test_persister_errors_as_clients_see_them() -> None:
    assert client_error(ErrorCode.not_coordinator) == ErrorCode.coordinator_not_available
    assert client_error(ErrorCode.fenced_leader_epoch) == ErrorCode.not_leader_or_follower
    assert client_error(ErrorCode.group_id_not_found) == ErrorCode.group_id_not_found
    assert client_error(ErrorCode.invalid_request) == ErrorCode.unknown_server_error


async def test_load_failure_is_mapped_and_not_cached() -> None:
    s = await make(FakePersister(read_error=ErrorCode.not_coordinator))
    with pytest.raises(PersistError) as raised:
        await s.manager.load(KEY, s.log)
    assert raised.value.code == ErrorCode.coordinator_not_available
    assert s.manager.cached(KEY) is None


@pytest.mark.parametrize(
    ("policy", "start"), [("earliest", 0), ("latest", 5), ("by_duration:PT0S", 5)]
)
async def test_auto_offset_reset_resolves_and_writes_the_start(policy: str, start: int) -> None:
    s = await make(FakePersister(start_offset=-1), {"share.auto.offset.reset": policy})
    share = await s.manager.load(KEY, s.log)
    assert share.start_offset == start
    await s.manager.settle()
    assert s.persister.writes == [(start, 0, ())]


async def test_by_duration_finds_the_first_record_at_or_after() -> None:
    # records at 2000 and 3000: "now - 1.5 s" with now = 3500 is 2000: the first batch
    s = await make(
        FakePersister(start_offset=-1), {"share.auto.offset.reset": "by_duration:PT1.5S"}
    )
    s.clock.now = 3500
    assert (await s.manager.load(KEY, s.log)).start_offset == 0
    s = await make(FakePersister(start_offset=-1), {"share.auto.offset.reset": "by_duration:PT1S"})
    s.clock.now = 3500
    assert (await s.manager.load(KEY, s.log)).start_offset == 2


async def test_lock_expiry_through_the_timers_port() -> None:
    s = await make(overrides={"share.record.lock.duration.ms": "15000"})
    await s.manager.load(KEY, s.log)
    s.manager.fetch(KEY, "m", s.log, 100, 1 << 20)
    (timer,) = s.timers.live()
    assert timer.at_s == 15.0
    woken: list[bool] = []
    s.manager.available_listeners(KEY).add(lambda: woken.append(True))
    s.manager.available_listeners(("other", TOPIC_ID, 0)).add(lambda: woken.append(False))
    s.clock.now += 15_000
    s.timers.fire()
    await s.manager.settle()
    assert s.persister.writes == [(0, 0, (StateBatch(0, 4, 0, 1),))]
    assert woken == [True]
    assert s.timers.live() == []  # nothing acquired: no timer
    assert s.manager.fetch(KEY, "n", s.log, 100, 1 << 20).acquired == (AcquiredRange(0, 4, 2),)


async def test_session_end_and_connection_close_release() -> None:
    s = await make()
    await s.manager.load(KEY, s.log)
    session = s.manager.sessions.open("g", "m", 9, [(TOPIC_ID, 0)])
    assert session is not None
    s.manager.fetch(KEY, "m", s.log, 100, 1 << 20)
    s.manager.connection_closed(8)
    assert s.manager.sessions.get("g", "m") is session
    s.manager.connection_closed(9)
    assert s.manager.sessions.get("g", "m") is None
    await s.manager.settle()
    assert s.persister.writes == [(0, 0, (StateBatch(0, 4, 0, 1),))]


async def test_delivery_limit_from_group_config() -> None:
    s = await make(overrides={"share.delivery.count.limit": "2"})
    await s.manager.load(KEY, s.log)
    for _ in range(2):
        s.manager.fetch(KEY, "m", s.log, 1, 1 << 20)
        s.clock.now += 30_000
        s.timers.fire()
    share = s.manager.cached(KEY)
    assert share is not None and share.start_offset == 2  # 0-1 archived after 2 deliveries


async def test_a_new_leader_epoch_reads_the_state_again() -> None:
    s = await make()
    first = await s.manager.load(KEY, s.log)
    assert await s.manager.load(KEY, s.log) is first
    s.log.leader_epoch += 1  # leadership lost and regained: another leader may have written
    assert await s.manager.load(KEY, s.log) is not first


async def test_forget_drops_a_groups_share_partitions() -> None:
    s = await make()
    first = await s.manager.load(KEY, s.log)
    assert s.manager.forget("other") == 0
    assert s.manager.forget("g", uuid.uuid4()) == 0
    assert s.manager.forget("g", TOPIC_ID) == 1
    assert s.manager.cached(KEY) is None
    assert await s.manager.load(KEY, s.log) is not first


async def test_a_deleted_topic_drops_every_groups_share_partitions_of_it() -> None:
    s = await make()
    other_group = ("h", TOPIC_ID, 0)
    other_topic = ("g", uuid.uuid4(), 0)
    for key in (KEY, other_group, other_topic):
        await s.manager.load(key, s.log)
    s.manager.fetch(KEY, "m", s.log, 100, 1 << 20)
    assert len(s.timers.live()) == 1  # (a lock-expiry timer armed)
    woken: list[str] = []
    s.manager.available_listeners(KEY).add(lambda: woken.append("fetch"))  # a waiting fetch
    assert s.manager.topic_deleted(TOPIC_ID, "t") == 2
    assert s.manager.available_listeners(KEY) == set() and woken == []  # dropped, not woken
    assert s.manager.cached(KEY) is None and s.manager.cached(other_group) is None
    assert s.manager.cached(other_topic) is not None
    assert s.timers.live() == []  # nothing fires, nothing writes the state again
    assert s.manager.topic_deleted(TOPIC_ID, "t") == 0
