"""ListConfigResources (74) at the handler, as Kafka 4.4's KafkaApis answers it: the config
resources of the types asked (none: all the version knows), DESCRIBE_CONFIGS on the cluster
needed, an unknown type refused whole with UNSUPPORTED_VERSION."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lockgate.protocol.api import ApiKey
from lockgate.protocol.errors import ErrorCode
from lockgate.security.acls import CLUSTER_NAME, Operation, ResourceType
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine
from tests.unit.handlers.support import ALICE, SHARE_SETTINGS, call, grant, started

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    broker = await started(MemoryEngine(), SHARE_SETTINGS)
    broker.topics.create("t", 1, 1, {})
    await broker.group_configs.alter("configured", changes=[("share.delivery.count.limit", 0, "3")])
    await broker.group_configs.alter("emptied", changes=[("share.delivery.count.limit", 0, "3")])
    await broker.group_configs.alter("emptied", changes=[("share.delivery.count.limit", 1, None)])
    try:
        yield broker
    finally:
        await broker.stop()


def listed(answer: dict[str, object]) -> list[tuple[str, int]]:
    resources = answer["config_resources"]
    assert isinstance(resources, list)
    return [(r["resource_name"], r["resource_type"]) for r in resources]


async def test_every_type_when_none_is_asked(broker: Broker) -> None:
    answer = await call(broker, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": []})
    assert answer["error_code"] == ErrorCode.none
    node = str(broker.config.integer("node.id"))
    # groups with configs (not one whose last override went), no client-metrics resource
    # (KIP-714 is not served), every broker twice, every topic (internal ones too)
    found = listed(answer)
    assert found[:3] == [("configured", GROUP), (node, BROKER_LOGGER), (node, BROKER)]
    assert ("t", TOPIC) in found and all(kind == TOPIC for _, kind in found[3:])


async def test_only_the_types_asked(broker: Broker) -> None:
    answer = await call(broker, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP]})
    assert listed(answer) == [("configured", GROUP)]
    answer = await call(broker, ApiKey.LIST_CONFIG_RESOURCES, 0, {})  # ListClientMetricsResources
    assert answer["error_code"] == ErrorCode.none and listed(answer) == []


async def test_an_unknown_type_is_refused_whole(broker: Broker) -> None:
    for types in ([GROUP, 64], [3]):
        body = {"resource_types": types}
        answer = await call(broker, ApiKey.LIST_CONFIG_RESOURCES, 1, body)
        assert answer["error_code"] == ErrorCode.unsupported_version and listed(answer) == []


async def test_needs_describe_configs_on_the_cluster(broker: Broker) -> None:
    body: dict[str, list[int]] = {"resource_types": []}
    answer = await call(broker, ApiKey.LIST_CONFIG_RESOURCES, 1, body, session=ALICE)
    assert answer["error_code"] == ErrorCode.cluster_authorization_failed
    assert listed(answer) == []
    grant(broker, [(ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE_CONFIGS)])
    answer = await call(broker, ApiKey.LIST_CONFIG_RESOURCES, 1, body, session=ALICE)
    assert answer["error_code"] == ErrorCode.none and ("t", TOPIC) in listed(answer)
