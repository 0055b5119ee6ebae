"""The topic directory tells its deletion listeners of a topic that leaves (its id and name),
whichever way it leaves: an admin deletion on a single node (at its first step, when the
topic is already unknown), the cluster metadata dropping it, or the cluster metadata having
it again under another id; a listener that raises leaves the deletion and the other
listeners alone."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from lockgate.cluster.local import LocalMetadataStore
from lockgate.config.properties import BrokerConfig
from lockgate.log.steps import run
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.directory import TopicManager

Told = list[tuple[uuid.UUID, str, bool]]


def directory() -> tuple[TopicManager, Told]:
    engine = MemoryEngine()
    topics = TopicManager(engine, LocalMetadataStore(engine, 1), BrokerConfig(), lambda: 1_000)
    topics.step_s = 0
    told: Told = []
    topics.deletion_listeners.append(
        lambda topic_id, name: told.append((topic_id, name, name in topics.topics))
    )
    return topics, told


def test_an_admin_deletion_is_told_at_its_first_step_when_the_topic_is_unknown() -> None:
    topics, told = directory()
    record = topics.create("orders", 3, 1, {})
    topics.create("audit", 1, 1, {})
    steps = topics.deleting("orders")
    next(steps)
    assert told == [(record.topic_id, "orders", False)]
    run(steps)
    assert told == [(record.topic_id, "orders", False)]  # once


def test_the_cluster_metadata_dropping_or_replacing_a_topic_is_told() -> None:
    topics, told = directory()
    first = topics.create("orders", 2, 1, {})
    again = replace(first, topic_id=uuid.uuid4())  # deleted and created again meanwhile
    topics.apply_record(again)
    assert told == [(first.topic_id, "orders", False)]
    topics.forget(topics.topics["orders"])
    assert told[1:] == [(again.topic_id, "orders", False)]


def test_a_failing_listener_leaves_the_deletion_and_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    topics, told = directory()

    def broken(topic_id: uuid.UUID, name: str) -> None:
        raise RuntimeError("a bug")

    topics.deletion_listeners.insert(0, broken)
    record = topics.create("orders", 1, 1, {})
    _deleted, trash = run(topics.deleting("orders"))
    assert told == [(record.topic_id, "orders", False)]
    assert "orders" not in topics.topics and len(trash) == 1
    assert "a deletion listener failed" in caplog.text
