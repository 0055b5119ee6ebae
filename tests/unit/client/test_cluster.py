# Bootstrap address parsing, and how Metadata answers are merged.
from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from lockgate.client.cluster import NO_LEADER, NO_LEADER_EPOCH, Cluster, parse_bootstrap


def test_parses_lists_defaults_and_ipv6() -> None:
    assert parse_bootstrap("127.0.0.1:9092") == [("127.0.0.1", 9092)]
    assert parse_bootstrap(" a:1 , b:2,") == [("a", 1), ("b", 2)]
    assert parse_bootstrap("broker") == [("broker", 9092)]
    assert parse_bootstrap("[::1]:9093,[fe80::1]") == [("::1", 9093), ("fe80::1", 9092)]
    assert parse_bootstrap("PLAINTEXT://h:19092") == [("h", 19092)]
    assert parse_bootstrap(["x:1", "y:2"]) == [("x", 1), ("y", 2)]


@pytest.mark.parametrize("text", ["", ",", "h:port", "h:0", "h:70000", ":9092"])
def test_rejects_bad_addresses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bootstrap(text)


# KIP-320: a lagging broker's older leader is not taken over a newer one already seen.

TOPIC_ID = uuid.uuid4()


def answer(leader: int, epoch: int, topic_id: uuid.UUID = TOPIC_ID) -> SimpleNamespace:
    partition = SimpleNamespace(
        partition_index=0,
        leader_id=leader,
        leader_epoch=epoch,
        replica_nodes=[1, 2],
        isr_nodes=[1, 2],
        offline_replicas=[],
        error_code=0,
    )
    topic = SimpleNamespace(
        name="t", topic_id=topic_id, is_internal=False, partitions=[partition], error_code=0
    )
    return SimpleNamespace(brokers=[], topics=[topic], cluster_id="c", controller_id=1)


def merged(cluster: Cluster, response: SimpleNamespace) -> tuple[int, int]:
    cluster.metadata = cluster._merge(response, replace_all=False)
    leader = cluster.metadata.topics["t"].partition(0)
    return leader.leader_id, leader.leader_epoch


def test_an_older_leader_epoch_does_not_replace_a_newer_one() -> None:
    cluster = Cluster("127.0.0.1:1")
    assert merged(cluster, answer(leader=1, epoch=5)) == (1, 5)
    assert merged(cluster, answer(leader=2, epoch=4)) == (1, 5)  # a lagging broker's answer
    assert merged(cluster, answer(leader=2, epoch=6)) == (2, 6)
    assert merged(cluster, answer(leader=2, epoch=6)) == (2, 6)  # the same epoch again


def test_an_older_epoch_after_invalidation_leaves_the_partition_leaderless() -> None:
    cluster = Cluster("127.0.0.1:1")
    merged(cluster, answer(leader=1, epoch=5))
    cluster.invalidate("t")
    assert merged(cluster, answer(leader=2, epoch=4)) == (NO_LEADER, 4)  # asked again later
    assert merged(cluster, answer(leader=1, epoch=5)) == (1, 5)


def test_a_recreated_topic_or_an_answer_without_epochs_is_taken_as_it_is() -> None:
    cluster = Cluster("127.0.0.1:1")
    merged(cluster, answer(leader=1, epoch=5))
    assert merged(cluster, answer(leader=2, epoch=0, topic_id=uuid.uuid4())) == (2, 0)
    assert merged(cluster, answer(leader=3, epoch=NO_LEADER_EPOCH)) == (3, NO_LEADER_EPOCH)
