"""broker.rack on a single node: registered with the broker, so that Metadata and
DescribeCluster (lockgate's client and confluent-kafka's admin client) show the configured
rack, or none; and replica.selector.class checked before the broker starts."""

from __future__ import annotations

import asyncio
import re

import pytest
from confluent_kafka.admin import AdminClient

from lockgate.client.connection import BrokerConnection
from lockgate.config.properties import BrokerConfig, ConfigError
from lockgate.protocol.api import ApiKey
from lockgate.replication.selector import RACK_AWARE_REPLICA_SELECTOR, RackAwareReplicaSelector
from lockgate.server.broker import Broker
from lockgate.storage.memory import MemoryEngine


def config(**settings: str) -> BrokerConfig:
    return BrokerConfig({"listeners": "127.0.0.1:0", "lockgate.durability": "page-cache",
                         **{k.replace("_", "."): v for k, v in settings.items()}})  # fmt: skip


async def racks_shown(broker: Broker) -> tuple[str | None, str | None, str | None]:
    """The rack of the broker in Metadata, in DescribeCluster, and in confluent-kafka's
    description of the cluster."""
    connection = BrokerConnection("127.0.0.1", broker.port)
    await connection.connect()
    try:
        metadata = await connection.request(
            ApiKey.METADATA,
            {"topics": [], "allow_auto_topic_creation": False,
             "include_topic_authorized_operations": False},
            version=12,
        )  # fmt: skip
        described = await connection.request(
            ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False}, version=1
        )
    finally:
        await connection.close()
    (in_metadata,) = metadata.brokers
    (in_description,) = described.brokers

    def confluent() -> str | None:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
        (node,) = admin.describe_cluster(request_timeout=10).result(20).nodes
        return node.rack  # type: ignore[no-any-return]

    return in_metadata.rack, in_description.rack, await asyncio.to_thread(confluent)


@pytest.mark.parametrize(("rack", "shown"), [("rack-a", "rack-a"), ("", None)])
async def test_metadata_and_describe_cluster_show_the_configured_rack(
    rack: str, shown: str | None
) -> None:
    broker = Broker(config(broker_rack=rack), MemoryEngine())
    await broker.start()
    try:
        assert await racks_shown(broker) == (shown, shown, shown)
    finally:
        await broker.stop()


def test_the_replica_selector_is_checked_before_anything_starts() -> None:
    assert Broker(config(), MemoryEngine()).replica_selector is None
    broker = Broker(config(replica_selector_class=RACK_AWARE_REPLICA_SELECTOR), MemoryEngine())
    assert isinstance(broker.replica_selector, RackAwareReplicaSelector)
    refused = re.escape("replica.selector.class='org.example.Nearest'")
    with pytest.raises(ConfigError, match=refused):
        Broker(config(replica_selector_class="org.example.Nearest"), MemoryEngine())
