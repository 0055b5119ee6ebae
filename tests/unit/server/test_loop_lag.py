"""The event loop lag probe: how late its timer fires, stalls of 50 ms or more counted and
logged at most once per 10 s, the figures exported with the metrics, and a real stall of the
running loop seen by the running probe."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lockgate.config.properties import BrokerConfig
from lockgate.server.broker import Broker
from lockgate.server.loop_lag import INTERVAL_S, STALL_S, LoopLagProbe
from lockgate.storage.memory import MemoryEngine

LOGGER = "lockgate.server.loop_lag"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_stalls_are_counted_each_and_logged_once_per_ten_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    probe = LoopLagProbe(clock)
    with caplog.at_level(logging.WARNING, LOGGER):
        probe.observe(0.001)
        probe.observe(STALL_S - 0.001)  # late, but not a stall
        assert probe.stalls == 0 and lines(caplog) == []
        probe.observe(0.2, 0.15)
        clock.now += 1
        probe.observe(0.08)  # a second stall, within the quiet period: counted only
        assert probe.stalls == 2
        assert lines(caplog) == ["event loop stalled for 200 ms, 150 ms of it the loop's own work"]
        clock.now += 10
        probe.observe(0.06, 0.001)
    assert probe.stalls == 3 and probe.worst_s == 0.2 and probe.worst_hold_s == 0.15
    assert lines(caplog)[1:] == [
        "event loop stalled for 60 ms, 1 ms of it the loop's own work"
        " (1 more since the last report)"
    ]
    assert probe.lag.count == probe.hold.count == 5


async def test_the_running_probe_sees_the_loop_held() -> None:
    probe = LoopLagProbe()
    task = asyncio.create_task(probe.run())
    try:
        await asyncio.sleep(3 * INTERVAL_S)
        time.sleep(0.2)  # a callback holding the loop
        for _ in range(100):  # the probe's next wake-up reports it
            if probe.stalls:
                break
            await asyncio.sleep(INTERVAL_S)
    finally:
        task.cancel()
    # a stall of D shows as a lag of at least D - INTERVAL_S, however loaded the machine; a
    # wait is no work of the loop's
    assert probe.stalls >= 1 and probe.worst_s >= 0.2 - INTERVAL_S
    assert probe.worst_hold_s < 0.1


async def test_the_running_probe_tells_the_loops_own_work() -> None:
    probe = LoopLagProbe()
    task = asyncio.create_task(probe.run())
    try:
        await asyncio.sleep(3 * INTERVAL_S)
        until = time.thread_time() + 0.2
        while time.thread_time() < until:  # a callback working for 0.2 s of CPU
            pass
        for _ in range(100):  # the probe's next wake-up reports it
            if probe.stalls:
                break
            await asyncio.sleep(INTERVAL_S)
    finally:
        task.cancel()
    assert probe.worst_hold_s >= 0.2


def test_the_metrics_export_the_probe() -> None:
    broker = Broker(
        BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.metrics.port": "0"}), MemoryEngine()
    )
    try:
        broker.metrics.loop_lag.observe(0.07, 0.06)
        text = broker.metrics.render().decode()
    finally:
        broker.topics.close()
    found = {family.name: family for family in text_string_to_metric_families(text)}
    count = [
        s for s in found["lockgate_event_loop_lag_seconds"].samples if s.name.endswith("_count")
    ]
    assert [s.value for s in count] == [1]
    assert found["lockgate_event_loop_lag_max_seconds"].samples[0].value == 0.07
    assert found["lockgate_event_loop_stalls"].samples[0].value == 1
    assert found["lockgate_event_loop_hold_max_seconds"].samples[0].value == 0.06
    assert [
        s.value
        for s in found["lockgate_event_loop_hold_seconds"].samples
        if s.name.endswith("_count")
    ] == [1]
