"""KIP-392's replica selection on the leader (replication/selector.py): Kafka's
RackAwareReplicaSelector rules (no client rack, no replica in its rack, or the leader in its
rack: the leader; otherwise the most caught-up replica of its rack: larger log end, then
shorter time since caught up, then larger broker id) and replica.selector.class as a broker
property (empty: none; Kafka's class: the rack-aware selector; anything else refused)."""

from __future__ import annotations

import pytest

from lockgate.config.properties import ConfigError
from lockgate.replication.selector import (
    RACK_AWARE_REPLICA_SELECTOR,
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector,
)

LEADER = ReplicaView(0, "a", 100, 0)
B1 = ReplicaView(1, "b", 100, 10)
B2 = ReplicaView(2, "b", 100, 10)
C3 = ReplicaView(3, "c", 100, 0)
NO_RACK = ReplicaView(4, None, 100, 0)
SELECT = RackAwareReplicaSelector().select


@pytest.mark.parametrize("rack", [None, ""])
def test_a_consumer_without_a_rack_reads_from_the_leader(rack: str | None) -> None:
    assert SELECT(rack, LEADER, [LEADER, B1, C3, NO_RACK]) is LEADER


def test_a_consumer_whose_rack_holds_no_replica_reads_from_the_leader() -> None:
    assert SELECT("z", LEADER, [LEADER, B1, C3, NO_RACK]) is LEADER


def test_a_consumer_in_the_leaders_rack_reads_from_the_leader() -> None:
    same_rack = ReplicaView(5, "a", 200, 0)  # even one more caught up than the leader
    assert SELECT("a", LEADER, [LEADER, same_rack, B1]) is LEADER


def test_a_consumer_reads_from_the_replica_of_its_rack() -> None:
    assert SELECT("c", LEADER, [LEADER, B1, C3]) is C3
    assert SELECT("b", LEADER, [LEADER, B1, C3]) is B1


def test_among_replicas_of_its_rack_the_most_caught_up_wins() -> None:
    further = ReplicaView(1, "b", 101, 500)
    assert SELECT("b", LEADER, [LEADER, further, B2]) is further  # larger log end first
    recent = ReplicaView(1, "b", 100, 5)
    assert SELECT("b", LEADER, [LEADER, recent, B2]) is recent  # then caught up more recently
    assert SELECT("b", LEADER, [LEADER, B1, B2]) is B2  # then the larger broker id
    assert SELECT("b", LEADER, [LEADER, B2, B1]) is B2


def test_the_rack_is_matched_exactly() -> None:
    assert SELECT("B", LEADER, [LEADER, B1]) is LEADER
    assert SELECT("b ", LEADER, [LEADER, B1]) is LEADER


@pytest.mark.parametrize("value", ["", "  "])
def test_no_selector_by_default(value: str) -> None:
    assert replica_selector(value) is None


def test_kafkas_rack_aware_selector_is_served() -> None:
    for value in (RACK_AWARE_REPLICA_SELECTOR, f" {RACK_AWARE_REPLICA_SELECTOR} "):
        assert isinstance(replica_selector(value), RackAwareReplicaSelector)


@pytest.mark.parametrize(
    "value",
    [
        "org.apache.kafka.common.replica.LeaderSelector",  # Kafka has no such class
        "com.example.MySelector",
        "RackAwareReplicaSelector",
    ],
)
def test_other_selectors_are_refused_naming_the_served_one(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        replica_selector(value)
    assert value in str(refused.value) and RACK_AWARE_REPLICA_SELECTOR in str(refused.value)
