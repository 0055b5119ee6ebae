"""Faults of a 3-broker cluster: a leader frozen (SIGSTOP) past its lease is fenced when it
wakes (KIP-359), min.insync.replicas refuses or flags acks=all writes, a broker cut off from
etcd but not from its clients stops leading, an etcd member killed changes nothing, and a
rolling restart loses no acknowledged write."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from lockgate.protocol.records import build_batch
from tests.support.clients import consume_all
from tests.support.cluster import BrokerCluster
from tests.support.etcd import EtcdCluster
from tests.support.kafka_wire import KafkaWire, leader_epochs, produce
from tests.support.tcp_proxy import TcpProxy

NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


def _produce(cluster: BrokerCluster, node: int, topic: str, value: bytes, acks: int = -1,
             epoch: int | None = None) -> tuple[int, int]:  # fmt: skip
    """(error code, base offset) of one record sent to `node` for partition 0."""
    with KafkaWire(cluster.brokers[node].bootstrap, client_id="fault-test") as wire:
        result = produce(wire, 9, topic, {0: build_batch([(None, value)])}, acks=acks,
                         current_leader_epoch=None if epoch is None else {0: epoch})  # fmt: skip
    answer = result.only()
    return answer.error_code, answer.base_offset


def _values(cluster: BrokerCluster, topic: str, count: int) -> list[bytes]:
    received = consume_all(cluster.bootstrap, topic, 1, count, timeout=30)
    return [v for _offset, v in received[0] if v is not None]


def test_a_leader_frozen_past_its_lease_is_fenced_when_it_wakes(cluster: BrokerCluster) -> None:
    topic = "frozen"
    cluster.create_topic(topic, partitions=1, replication=3)
    old = cluster.partitions(topic)[0].leader
    with KafkaWire(cluster.brokers[old].bootstrap) as wire:
        epoch = leader_epochs(wire, topic)[0]
    assert _produce(cluster, old, topic, b"before", epoch=epoch) == (0, 0)

    cluster.pause(old)
    try:
        new = cluster.wait_leader(topic, 0, other_than=old).leader
        with KafkaWire(cluster.brokers[new].bootstrap) as wire:
            new_epoch = leader_epochs(wire, topic)[0]
        assert new_epoch > epoch
        assert _produce(cluster, new, topic, b"after", epoch=new_epoch) == (0, 1)
    finally:
        cluster.resume(old)
    # The first requests it reads on waking: it refuses, whatever its view says yet.
    code, offset = _produce(cluster, old, topic, b"stale-with-new-epoch", epoch=new_epoch)
    assert code in (UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER) and offset == -1
    assert _produce(cluster, old, topic, b"stale")[0] == NOT_LEADER_OR_FOLLOWER
    cluster.wait_for(lambda: _produce(cluster, old, topic, b"x", epoch=epoch)[0]
                     == FENCED_LEADER_EPOCH, "the old leader learning the new epoch")  # fmt: skip
    cluster.wait_full_isr(topic)  # it follows the new leader now
    assert _values(cluster, topic, 2) == [b"before", b"after"]


def test_min_insync_replicas_refuses_and_flags_acks_all_writes(cluster: BrokerCluster) -> None:
    topic = "min-isr"
    cluster.create_topic(topic, partitions=1, replication=3, **{"min.insync.replicas": "3"})
    info = cluster.partitions(topic)[0]
    leader = info.leader
    follower = next(r for r in info.replicas if r != leader)
    assert _produce(cluster, leader, topic, b"all-in-sync") == (0, 0)

    cluster.pause(follower)
    try:
        # appended, then answered once the ISR has shrunk below the minimum
        assert _produce(cluster, leader, topic, b"during-shrink")[0] == (
            NOT_ENOUGH_REPLICAS_AFTER_APPEND
        )
        cluster.wait_for(lambda: len(cluster.partitions(topic)[0].isr) == 2, "isr shrunk")
        assert _produce(cluster, leader, topic, b"refused") == (NOT_ENOUGH_REPLICAS, -1)
        assert _produce(cluster, leader, topic, b"acks-1", acks=1)[0] == 0
    finally:
        cluster.resume(follower)
    cluster.wait_full_isr(topic)
    # The metadata may show the grown ISR a moment before the leader has applied its own
    # change (as Kafka's AlterPartition answer trails the controller's record); until it has,
    # acks=all is refused (NOT_ENOUGH_REPLICAS) and nothing is appended.
    answers: list[tuple[int, int]] = []

    def accepted() -> bool:
        answers.append(_produce(cluster, leader, topic, b"in-sync-again"))
        return answers[-1][0] != NOT_ENOUGH_REPLICAS

    cluster.wait_for(accepted, "the leader accepting acks=all again")
    assert answers[-1] == (0, 3)
    assert _values(cluster, topic, 4) == [b"all-in-sync", b"during-shrink", b"acks-1",
                                          b"in-sync-again"]  # fmt: skip


def test_a_broker_cut_from_etcd_stops_leading(
    etcd: EtcdCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    proxy = TcpProxy(etcd.members[0].client_port).start()
    cut = 2
    brokers = BrokerCluster(
        tmp_path_factory.mktemp("cut"), etcd, cluster_urls={cut: f"etcd://{proxy.address}"}
    )
    try:
        brokers.start()
        topic = "cut"
        brokers.create_topic(topic, partitions=3, replication=3)
        led = next(p for p, info in brokers.partitions(topic).items() if info.leader == cut)
        proxy.cut()
        info = brokers.wait_leader(topic, led, other_than=cut)
        assert cut not in info.isr
        # still reachable by clients, it refuses to lead
        with KafkaWire(brokers.brokers[cut].bootstrap, client_id="cut-test") as wire:
            result = produce(wire, 9, topic, {led: build_batch([(None, b"stale")])})
        assert result.only().error_code == NOT_LEADER_OR_FOLLOWER
        acked = _send_all(brokers.bootstrap, topic, [b"v%d" % i for i in range(300)])
        proxy.cut(False)  # back: it registers again and catches up
        brokers.wait_full_isr(topic)
        received = consume_all(brokers.bootstrap, topic, 3, len(acked))
        assert sorted(v for records in received.values() for _o, v in records if v) == sorted(acked)
    finally:
        brokers.stop()
        proxy.stop()


def test_an_etcd_member_killed_changes_nothing(cluster: BrokerCluster, etcd: EtcdCluster) -> None:
    member = etcd.members[1]
    etcd.kill(member)
    try:
        # the first write may meet etcd's election: REQUEST_TIMED_OUT, and the client retries
        cluster.wait_for(lambda: _created(cluster, "etcd-member-down"), "topic created")
        acked = _send_all(cluster.bootstrap, "etcd-member-down", [b"m%d" % i for i in range(300)])
        assert len(acked) == 300
    finally:
        etcd.restart(member)
        etcd.wait_healthy()


def test_a_rolling_restart_loses_no_acknowledged_write(cluster: BrokerCluster) -> None:
    topic = "rolling"
    cluster.create_topic(topic, partitions=3, replication=3)
    acked: list[bytes] = []
    gaps: list[float] = []
    stop = threading.Event()
    errors: list[object] = []

    def send() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5})  # fmt: skip
        last = time.monotonic()

        def delivered(error: object, message: object) -> None:
            nonlocal last
            if error is not None:
                errors.append(error)
                return
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            acked.append(message.value())  # type: ignore[attr-defined]

        i = 0
        while not stop.is_set():
            producer.produce(topic, b"r%d" % i, on_delivery=delivered)
            producer.poll(0.01)
            i += 1
        assert producer.flush(60) == 0

    sender = threading.Thread(target=send)
    sender.start()
    try:
        for broker in cluster.brokers.values():
            time.sleep(1)
            assert broker.stop() == 0  # SIGTERM: a controlled shutdown
            broker.start()
            cluster.wait_full_isr(topic)
    finally:
        stop.set()
        sender.join(90)
    assert not errors, errors[:3]
    received = consume_all(cluster.bootstrap, topic, 3, len(acked))
    assert sorted(v for records in received.values() for _o, v in records if v) == sorted(acked)
    print(f"rolling restart: {len(acked)} acknowledged, longest wait {max(gaps):.2f} s")


def _created(cluster: BrokerCluster, topic: str) -> bool:
    try:
        cluster.create_topic(topic, partitions=3, replication=3)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    return True


def _send_all(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    acked: list[bytes] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})  # fmt: skip

    def delivered(error: object, message: Message) -> None:
        value = message.value()
        if error is None and value is not None:
            acked.append(value)

    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(60) == 0
    assert len(acked) == len(values)
    return acked
