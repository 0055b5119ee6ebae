"""The single node's engine of the metadata interface (cluster/local.py): a data directory written
by earlier releases opens unchanged and is written back in the same format; the view has this
node registered, as the controller and as the leader (at the log's own epoch, alone in the
ISR) of every partition it has open; the interface's writes are compare-and-swap as the etcd
engine's are, and listeners hear of every change."""

from __future__ import annotations

import errno
import json
import uuid

import pytest

from lockgate.cluster.local import COMPACT_AT, CONTROLLER_EPOCH, LocalMetadataStore
from lockgate.cluster.membership import ClusterMembership
from lockgate.cluster.metadata import (
    BrokerRegistration,
    Change,
    Controller,
    MetadataStore,
    PartitionState,
    TopicRecord,
)
from lockgate.config.properties import BrokerConfig
from lockgate.log.steps import run
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.storage.memory import MemoryEngine
from lockgate.topics.admin import LocalTopicAdmin
from lockgate.topics.directory import TopicManager

NODE = 4
ORDERS_ID = uuid.UUID("5f1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d")
AUDIT_ID = uuid.UUID("0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d")

# As earlier releases left them: the topics' document (an entry written before topics had
# config overrides or internal topics existed has neither key) and the producer id counter.
OLD_DOCUMENT = {
    "version": 1,
    "cluster_id": "q1Hf3kTbR0uZl2cQy8xv9A",
    "topics": {
        "orders": {"id": str(ORDERS_ID), "partitions": 3,
                   "configs": {"cleanup.policy": "compact"}, "internal": False},
        "audit": {"id": str(AUDIT_ID), "partitions": 1},
    },
}  # fmt: skip


def old_data_directory() -> MemoryEngine:
    engine = MemoryEngine()
    engine.write_atomic(LocalMetadataStore.PATH, json.dumps(OLD_DOCUMENT, indent=1).encode())
    engine.write_atomic(LocalMetadataStore.PRODUCER_IDS_PATH, b"3000\n")
    return engine


def test_a_data_directory_of_an_earlier_release_opens_unchanged() -> None:
    engine = old_data_directory()
    store = LocalMetadataStore(engine, NODE)
    assert store.cluster_id == "q1Hf3kTbR0uZl2cQy8xv9A"
    assert store.topics() == {
        "orders": TopicRecord("orders", ORDERS_ID, 3, {"cleanup.policy": "compact"}, False),
        "audit": TopicRecord("audit", AUDIT_ID, 1, {}, False),
    }
    assert {name: v.value for name, v in store.view.topics.items()} == store.topics()
    assert store.reserve_producer_ids(1000) == 3000  # the counter where it was left
    assert engine.read_all(LocalMetadataStore.PRODUCER_IDS_PATH) == b"4000\n"


def test_the_document_is_written_back_in_the_same_format() -> None:
    engine = old_data_directory()
    store = LocalMetadataStore(engine, NODE)
    store.put_topic(TopicRecord("payments", ORDERS_ID, 2, {}, True))
    assert json.loads(engine.read_all(LocalMetadataStore.PATH) or b"") == OLD_DOCUMENT
    reopened = LocalMetadataStore(engine, NODE)  # the change is in the journal
    assert reopened.topics() == store.topics()
    for _ in range(COMPACT_AT):  # the journal's lines reach COMPACT_AT: the document is rewritten
        store.put_topic(TopicRecord("payments", ORDERS_ID, 2, {}, True))
    assert engine.read_all(LocalMetadataStore.JOURNAL_PATH) == b""
    raw = engine.read_all(LocalMetadataStore.PATH)
    assert raw is not None
    written = json.loads(raw)
    expected = json.loads(json.dumps(OLD_DOCUMENT))
    expected["topics"]["audit"].update({"configs": {}, "internal": False})
    expected["topics"]["payments"] = {
        "id": str(ORDERS_ID), "partitions": 2, "configs": {}, "internal": True
    }  # fmt: skip
    assert written == expected
    reopened = LocalMetadataStore(engine, NODE)
    assert reopened.topics() == store.topics()
    assert reopened.cluster_id == store.cluster_id


def test_every_change_is_one_journal_line_and_a_restart_replays_them() -> None:
    """A change costs one line, whatever the number of topics, until the journal has as many
    lines as there are topics (and COMPACT_AT): then the document is rewritten. A torn last
    line (a crash amid an append) is dropped; a journal older than its document (a crash
    before it was emptied) replays to the same state."""
    engine = MemoryEngine()
    store = LocalMetadataStore(engine, NODE)
    document = engine.read_all(LocalMetadataStore.PATH)
    for i in range(COMPACT_AT + 10):
        store.put_topic(TopicRecord(f"t{i}", uuid.UUID(int=i + 1), 1, {}))
    journal = engine.read_all(LocalMetadataStore.JOURNAL_PATH) or b""
    assert journal.count(b"\n") == COMPACT_AT + 10  # more topics than lines: appended only
    assert engine.read_all(LocalMetadataStore.PATH) == document
    store.remove_topic("t7")  # as many lines as topics: rewritten, the journal emptied
    assert engine.read_all(LocalMetadataStore.JOURNAL_PATH) == b""
    assert "t7" not in json.loads(engine.read_all(LocalMetadataStore.PATH) or b"")["topics"]
    store.put_topic(TopicRecord("t7", uuid.UUID(int=99), 2, {}))
    store.remove_topic("t8")
    journal = engine.read_all(LocalMetadataStore.JOURNAL_PATH) or b""
    assert journal.count(b"\n") == 2
    torn = journal + b'{"topic":{"name":"half'
    engine.write_atomic(LocalMetadataStore.JOURNAL_PATH, torn)
    reopened = LocalMetadataStore(engine, NODE)
    assert reopened.topics() == store.topics() and "t8" not in reopened.topics()
    assert engine.read_all(LocalMetadataStore.JOURNAL_PATH) == journal  # the torn line cut off
    old_lines = b"".join(
        json.dumps({"topic": {"name": "t7", "id": str(uuid.UUID(int=8)), "partitions": 1}})
        .encode() + b"\n" + b'{"removed":"t7"}\n'
        for _ in range(2)
    )  # fmt: skip
    engine.write_atomic(LocalMetadataStore.JOURNAL_PATH, old_lines + journal)
    assert LocalMetadataStore(engine, NODE).topics() == store.topics()


def test_a_failed_append_leaves_the_next_change_to_rewrite_the_document() -> None:
    engine = MemoryEngine()
    store = LocalMetadataStore(engine, NODE)
    store.put_topic(TopicRecord("orders", ORDERS_ID, 1, {}))
    engine.faults.write_errno = errno.EIO
    with pytest.raises(OSError):
        store.put_topic(TopicRecord("audit", AUDIT_ID, 1, {}))
    engine.faults.write_errno = None
    store.remove_topic("audit")  # (as TopicManager undoes it): the document is rewritten
    assert engine.read_all(LocalMetadataStore.JOURNAL_PATH) == b""
    store.put_topic(TopicRecord("audit", AUDIT_ID, 2, {}))  # and the journal takes lines again
    assert engine.read_all(LocalMetadataStore.JOURNAL_PATH)
    assert LocalMetadataStore(engine, NODE).topics() == store.topics()


def test_a_new_data_directory_gets_a_cluster_id_that_stays() -> None:
    engine = MemoryEngine()
    first = LocalMetadataStore(engine, NODE)
    assert first.topics() == {}
    assert LocalMetadataStore(engine, NODE).cluster_id == first.cluster_id


async def test_this_node_is_the_registered_broker_and_the_controller() -> None:
    store = LocalMetadataStore(MemoryEngine(), NODE)
    assert store.live
    assert store.view.controller == Controller(NODE, CONTROLLER_EPOCH)
    assert await store.campaign() == Controller(NODE, CONTROLLER_EPOCH)
    await store.resign()  # nobody else could take over
    assert store.view.controller == Controller(NODE, CONTROLLER_EPOCH)
    registration = BrokerRegistration(NODE, "broker-4.example", 9094, incarnation="")
    changes: list[Change] = []
    store.view.listeners.append(changes.append)
    await store.register(registration)
    assert store.view.brokers == {NODE: registration}
    assert changes == [("broker", str(NODE))]
    membership = ClusterMembership(store, NODE)
    assert membership.brokers() == [registration]
    assert membership.controller_id() == NODE
    assert membership.cluster_id() == store.cluster_id


def test_every_open_partition_is_led_by_this_node_at_its_logs_epoch() -> None:
    engine = MemoryEngine()
    config = BrokerConfig({"node.id": str(NODE)})
    store = LocalMetadataStore(engine, NODE)
    topics = TopicManager(engine, store, config, lambda: 1_000)
    topics.create("orders", 2, 1, {})
    membership = ClusterMembership(store, NODE)
    assert membership.partition("orders", 1) == PartitionState((NODE,), NODE, 0, (NODE,))
    topics.add_partitions("orders", 3)
    assert membership.partition("orders", 2) == PartitionState((NODE,), NODE, 0, (NODE,))
    topics.close()
    # a restart opens every log in a new epoch, and leads it there
    store = LocalMetadataStore(engine, NODE)
    topics = TopicManager(engine, store, config, lambda: 2_000)
    topics.load()
    membership = ClusterMembership(store, NODE)
    for index in range(3):
        partition = topics.get("orders", index)
        assert partition is not None and partition.leader_epoch == 1
        assert membership.partition("orders", index) == PartitionState((NODE,), NODE, 1, (NODE,))
    topics.remove(run(topics.deleting("orders"))[1])
    assert store.view.topic_partitions("orders") == {}
    assert membership.partition("orders", 0) is None


def test_a_start_leads_every_partition_at_once_and_opens_the_logs_later() -> None:
    """Registered and led in the epoch after their checkpoints' last before any log opens
    (a broker with thousands of partitions serves at once); each log opens in `opening`'s
    rounds or at its first use, in the epoch announced; a pending topic can be deleted."""
    engine = MemoryEngine()
    config = BrokerConfig({"node.id": str(NODE)})
    topics = TopicManager(engine, LocalMetadataStore(engine, NODE), config, lambda: 1_000)
    topics.create("orders", 3, 1, {})
    topics.create("gone", 2, 1, {})
    topics.close()
    store = LocalMetadataStore(engine, NODE)
    topics = TopicManager(engine, store, config, lambda: 2_000)
    topics.load(clean=False)
    membership = ClusterMembership(store, NODE)
    assert topics.partitions == {} and topics.pending == 5
    assert topics.unverified  # a crash's logs, unopened: no clean-shutdown mark may vouch
    for index in range(3):
        assert membership.partition("orders", index) == PartitionState((NODE,), NODE, 1, (NODE,))
    first = topics.get("orders", 1)  # its first use opens it
    assert first is not None and first.leader_epoch == 1 and topics.pending == 4
    topics.remove(run(topics.deleting("gone"))[1])
    assert topics.pending == 2
    assert not any(name.startswith("gone-") for name in engine.list_dir(""))
    assert run(topics.opening()) == 2 and topics.pending == 0
    assert not topics.unverified
    assert all(getattr(topics.get("orders", i), "leader_epoch", -1) == 1 for i in range(3))
    # nothing was appended in epoch 1, so no partition wrote it: the next start's term keeps
    # the epochs growing all the same
    topics.close()
    store = LocalMetadataStore(engine, NODE)
    TopicManager(engine, store, config, lambda: 3_000).load(clean=True)
    assert ClusterMembership(store, NODE).partition("orders", 0) == PartitionState(
        (NODE,), NODE, 2, (NODE,)
    )


def test_a_topic_that_cannot_be_recorded_leaves_no_partition_led() -> None:
    engine = MemoryEngine()
    store = LocalMetadataStore(engine, NODE)
    topics = TopicManager(engine, store, BrokerConfig({"node.id": str(NODE)}), lambda: 1_000)
    engine.faults.write_errno = errno.ENOSPC
    with pytest.raises(Exception, match="recording topic orders"):
        topics.create("orders", 2, 1, {})
    engine.faults.write_errno = None
    assert store.view.topics == {} and store.view.partitions == {}
    assert LocalMetadataStore(engine, NODE).topics() == {}


def test_a_topic_is_created_in_steps_and_its_name_is_taken_from_the_first() -> None:
    """An admin request creates a topic's partitions in steps of `step_s` (here none: a step
    a partition), giving the event loop back in between; a second creation of the name
    meanwhile is refused, and the topic exists (recorded, led) only once every partition does."""
    engine = MemoryEngine()
    store = LocalMetadataStore(engine, NODE)
    topics = TopicManager(engine, store, BrokerConfig({"node.id": str(NODE)}), lambda: 1_000)
    topics.step_s = 0
    steps = topics.creating("orders", 3, 1, {})
    next(steps)
    with pytest.raises(KafkaProtocolError) as refused:
        topics.create("orders", 1, 1, {})
    assert refused.value.code == ErrorCode.topic_already_exists
    assert "orders" not in topics.topics and store.view.topics == {}
    next(steps)
    next(steps)
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert done.value.value.partitions == 3
    assert set(store.view.topic_partitions("orders")) == {0, 1, 2}


def test_a_creation_abandoned_at_a_step_leaves_nothing_behind() -> None:
    engine = MemoryEngine()
    store = LocalMetadataStore(engine, NODE)
    topics = TopicManager(engine, store, BrokerConfig({"node.id": str(NODE)}), lambda: 1_000)
    topics.step_s = 0
    steps = topics.creating("orders", 3, 1, {})
    next(steps)
    steps.close()  # the request was cancelled: the broker stops
    assert not any(name.startswith("orders-") for name in engine.list_dir(""))
    assert topics.partitions == {} and store.view.topics == {}
    topics.create("orders", 2, 1, {})  # the name is free again
    assert set(store.view.topic_partitions("orders")) == {0, 1}


async def test_an_admin_deletion_renames_in_steps_and_removes_the_files_in_a_thread() -> None:
    engine = MemoryEngine()
    store = LocalMetadataStore(engine, NODE)
    topics = TopicManager(engine, store, BrokerConfig({"node.id": str(NODE)}), lambda: 1_000)
    topics.step_s = 0
    topics.create("orders", 3, 1, {})
    steps = topics.deleting("orders")
    next(steps)  # a step done: the topic and its partitions are gone, not yet all renamed
    assert store.view.topics == {} and topics.get("orders", 2) is None
    assert engine.exists("orders-2")
    with pytest.raises(KafkaProtocolError) as refused:
        topics.create("orders", 1, 1, {})
    assert refused.value.code == ErrorCode.topic_already_exists
    record, trash = run(steps)
    assert len(trash) == 3 and all(
        name.endswith(f".{record.topic_id.hex}.deleted") for name in trash
    )
    assert sorted(n for n in engine.list_dir("") if n.startswith("orders-")) == sorted(trash)
    topics.create("orders", 1, 1, {})  # the name is free once renamed; the trash is apart
    await LocalTopicAdmin(topics, NODE).delete("orders")
    topics.remove(trash)
    assert not any(name.startswith("orders-") for name in engine.list_dir(""))
    assert store.view.topics == {}
    topics.create("orders", 3, 1, {})
    steps = topics.deleting("orders")
    next(steps)
    steps.close()  # stopped between steps: the rest is renamed at once
    left = [n for n in engine.list_dir("") if n.startswith("orders-")]
    assert len(left) == 3 and all(n.endswith(".deleted") for n in left)
    topics.create("orders", 1, 1, {})


def test_the_cleaner_is_shown_the_open_partitions_of_compacted_topics_alone() -> None:
    engine = MemoryEngine()
    store = LocalMetadataStore(engine, NODE)
    topics = TopicManager(engine, store, BrokerConfig({"node.id": str(NODE)}), lambda: 1_000)
    topics.create("plain", 3, 1, {})
    topics.create("changelog", 2, 1, {"cleanup.policy": "compact"})
    topics.step_s = 0
    steps = topics.creating("coming", 3, 1, {"cleanup.policy": "compact"})
    next(steps)  # being created: not the cleaner's yet
    assert [(p.topic, p.index) for p in topics.compacted()] == [("changelog", 0), ("changelog", 1)]
    steps.close()


async def test_the_interface_writes_are_compare_and_swap() -> None:
    engine = MemoryEngine()
    store: MetadataStore = LocalMetadataStore(engine, NODE)
    changes: list[Change] = []
    store.view.listeners.append(changes.append)
    record = TopicRecord("orders", ORDERS_ID, 1, {})
    state = PartitionState((NODE,), NODE, 0, (NODE,))
    assert await store.create_topic(record, {0: state})
    assert not await store.create_topic(TopicRecord("orders", AUDIT_ID, 1, {}), {})
    assert changes == [("topic", "orders"), ("partition", "orders/0")]
    current = store.view.topics["orders"]
    grown = TopicRecord("orders", ORDERS_ID, 2, {})
    assert not await store.update_topic(grown, current.revision - 1, {1: state})
    assert await store.update_topic(grown, current.revision, {1: state})
    assert store.view.topics["orders"].value.partitions == 2
    assert set(store.view.topic_partitions("orders")) == {0, 1}
    assert LocalMetadataStore(engine, NODE).topics()["orders"].partitions == 2  # on disk

    at = store.view.partitions[("orders", 0)].revision
    moved = PartitionState((NODE,), NODE, 1, (NODE,), 1)
    assert await store.compare_and_set("orders", 0, moved, at - 1) is None
    assert await store.compare_and_set("orders", 0, moved, at, CONTROLLER_EPOCH + 1) is None
    written = await store.compare_and_set("orders", 0, moved, at, CONTROLLER_EPOCH)
    assert written is not None and written.value == moved and written.revision > at
    assert store.view.partitions[("orders", 0)] == written
    assert await store.compare_and_set("orders", 5, state, 0) is not None  # 0: if absent

    assert await store.delete_topic("orders")
    assert not await store.delete_topic("orders")
    assert "orders" not in store.view.topics and store.view.topic_partitions("orders") == {}
    assert "orders" not in LocalMetadataStore(engine, NODE).topics()


async def test_producer_id_blocks_are_never_given_twice() -> None:
    engine = MemoryEngine()
    store = LocalMetadataStore(engine, NODE)
    assert await store.allocate_producer_ids(1000) == 0
    assert store.reserve_producer_ids(10) == 1000
    store = LocalMetadataStore(engine, NODE)  # a restart
    assert await store.allocate_producer_ids(5) == 1010
    engine.faults.atomic_errno = errno.ENOSPC
    with pytest.raises(OSError):
        store.reserve_producer_ids(10)
    engine.faults.atomic_errno = None
    assert store.reserve_producer_ids(10) == 1015  # nothing was reserved by the failed write
