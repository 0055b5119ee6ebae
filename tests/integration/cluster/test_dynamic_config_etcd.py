"""Dynamic broker configs in cluster mode: two brokers' stores on one etcd namespace (a real
3-member etcd); a change made through one is applied by the other from its watch, the cluster
default for both and a per-broker value for its broker only. Group configs likewise: a group's
override set through one broker is what the other's consumer groups use."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest

from lockgate.config.dynamic import DYNAMIC_BROKER_CONFIG, open_dynamic_configs
from lockgate.config.group_configs import SET, open_group_configs
from lockgate.config.properties import BrokerConfig
from lockgate.storage.memory import MemoryEngine
from tests.support.etcd import EtcdCluster

pytestmark = pytest.mark.timeout(120)


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_a_change_through_one_broker_applies_on_the_other(etcd: EtcdCluster) -> None:
    url = f"etcd://{','.join(etcd.endpoints)}/{uuid.uuid4().hex[:8]}"
    configs = [BrokerConfig(), BrokerConfig()]
    stores = [open_dynamic_configs(c, node, MemoryEngine(), url) for node, c in enumerate(configs)]
    for store in stores:
        await store.start()
    try:
        await stores[0].alter("", {"log.retention.ms": "60000"}, [])
        await stores[0].alter("1", {"message.max.bytes": "2000000"}, [])
        await until(lambda: configs[1].values["message.max.bytes"] == "2000000")
        assert configs[1].values["log.retention.ms"] == "60000"
        assert configs[0].values["log.retention.ms"] == "60000"
        assert configs[0].values["message.max.bytes"] == "1048588"  # broker 1's value only
        assert stores[1].resolve("message.max.bytes").source == DYNAMIC_BROKER_CONFIG
        await stores[1].alter("", {}, ["log.retention.ms"])
        await until(lambda: configs[0].values["log.retention.ms"] == str(7 * 24 * 3600 * 1000))
    finally:
        for store in stores:
            await store.close()


async def test_a_groups_configs_set_through_one_broker_apply_on_the_other(
    etcd: EtcdCluster,
) -> None:
    url = f"etcd://{','.join(etcd.endpoints)}/{uuid.uuid4().hex[:8]}"
    stores = [open_group_configs(BrokerConfig(), MemoryEngine(), url) for _ in range(2)]
    for store in stores:
        await store.start()
    try:
        await stores[0].alter("g", changes=[("consumer.heartbeat.interval.ms", SET, "7000")])
        await until(lambda: stores[1].consumer_heartbeat_interval_ms("g") == 7000)
        await stores[1].alter("g", replace={})
        await until(lambda: stores[0].consumer_heartbeat_interval_ms("g") is None)
        assert stores[0].groups == stores[1].groups == {}
    finally:
        for store in stores:
            await store.close()
