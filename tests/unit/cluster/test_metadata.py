"""Cluster metadata records round-trip through their stored form; cluster URLs parse or are
refused with the reason."""

from __future__ import annotations

import uuid

import pytest

from lockgate.cluster.metadata import BrokerRegistration, PartitionState, TopicRecord
from lockgate.storage.documents import parse_cluster_url


def test_records_round_trip() -> None:
    broker = BrokerRegistration(3, "127.0.0.1", 9093, "rack-a")
    assert BrokerRegistration.decode(broker.encode()) == broker
    state = PartitionState((1, 2, 3), 2, 7, (2, 3), 11)
    assert PartitionState.decode(state.encode()) == state
    topic = TopicRecord("orders", uuid.uuid4(), 6, {"cleanup.policy": "compact"}, False)
    assert TopicRecord.decode(topic.encode()) == topic


def test_new_incarnation_per_registration() -> None:
    assert BrokerRegistration(1, "h", 1).incarnation != BrokerRegistration(1, "h", 1).incarnation


@pytest.mark.parametrize(
    ("url", "endpoints", "namespace"),
    [
        ("etcd://127.0.0.1:2379", ["127.0.0.1:2379"], "lockgate"),
        ("etcd://a:1,b:2,c:3/prod", ["a:1", "b:2", "c:3"], "prod"),
        ("etcd://a:1, b:2/", ["a:1", "b:2"], "lockgate"),
    ],
)
def test_cluster_url(url: str, endpoints: list[str], namespace: str) -> None:
    assert parse_cluster_url(url) == (endpoints, namespace)


@pytest.mark.parametrize(
    "url", ["http://a:1", "etcd://", "etcd://a", "etcd://a:x", "etcd://a:1/x/y", "a:1"]
)
def test_bad_cluster_url(url: str) -> None:
    with pytest.raises(ValueError):
        parse_cluster_url(url)
